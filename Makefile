# huiyi — every target creates .venv when it is missing and installs into it.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test bench install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/huiyi serve

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m bench all

clean:
	rm -rf $(VENV) build *.egg-info
