# huiyi — every target creates .venv when it is missing and installs into it.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DIST   ?= dist

.PHONY: run test bench install dist clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	# tests/clients/test_generated_client.py's generator, without its pins (typer<0.28, httpx<0.29), which
	# would downgrade both under the gateway and its tests; it generates and its clients run with today's
	$(PY) -m pip install --quiet --no-deps 'openapi-python-client>=0.29,<0.30' 'ruamel.yaml>=0.18' 'ruff>=0.6'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/huiyi serve

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m bench all

# the three wheels — huiyi (the gateway), huiyi-client, nonebot-plugin-huiyi — into $(DIST)/, built offline
# with the venv's setuptools (the test extra), leaving no build files in the tree; install the plugin from
# them with  pip install --find-links dist nonebot-plugin-huiyi
BUILT := build *.egg-info clients/python/build clients/python/*.egg-info clients/nonebot/build clients/nonebot/*.egg-info
dist: $(STAMP)
	rm -rf $(DIST) $(BUILT)
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir $(DIST) . ./clients/python ./clients/nonebot
	rm -rf $(BUILT)
	ls $(DIST)

clean:
	rm -rf $(VENV) dist $(BUILT)
