"""The client and the NoneBot plugin install as their users install packages (issue 26 item 14): README's
`pip install` lines, run as written from the repository root into a clean virtual environment (offline:
no index, the build backend and the dependencies this machine already has), give both packages, importable
from that environment, the plugin loading without the gateway; `make dist` builds the three wheels; the
plugin's metadata names no made-up homepage."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _readme_install_lines() -> list[str]:
    """The `pip install …` lines of README's shell examples, comments cut."""
    blocks = re.findall(r"```sh\n(.*?)```", README, flags=re.DOTALL)
    lines = [ln.split("#", 1)[0].strip() for b in blocks for ln in b.splitlines()]
    return [ln for ln in lines if ln.startswith("pip install ")]


@pytest.fixture
def clean_venv(tmp_path) -> Path:
    """A new virtual environment with nothing installed in it; the packages this test process already has (the
    plugin's dependencies: httpx, nonebot2, the OneBot adapter, setuptools) are visible to it through a .pth
    line, the way an index would offer them, since tests download nothing. Returns its python."""
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "_offline_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return python


def test_readmes_install_line_installs_client_and_plugin_in_a_clean_venv(clean_venv, tmp_path):
    """README's one install line, as written, from a copy of the repository's clients/: pip finds huiyi-client
    in ./clients/python for the plugin (no index), both land in the clean environment, and the plugin loads
    into a NoneBot there without the gateway's packages."""
    (line,) = [ln for ln in _readme_install_lines() if "./clients/nonebot" in ln]
    args = shlex.split(line)
    assert args[:2] == ["pip", "install"] and "./clients/python" in args
    work = tmp_path / "checkout"  # a copy: the in-tree builds leave build/ and *.egg-info behind
    shutil.copytree(ROOT / "clients", work / "clients", ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                                        "__pycache__"))
    pip = [sys.executable, "-m", "pip", "--python", str(clean_venv), "--disable-pip-version-check", "--isolated"]
    offline = ["--no-index", "--no-build-isolation", "--no-compile"]
    r = subprocess.run(pip + args[1:] + offline, cwd=work, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "Successfully installed huiyi-client-0.1.0 nonebot-plugin-huiyi-0.1.0" in r.stdout, r.stdout[-2000:]
    code = """
import json, sys, nonebot
from importlib.metadata import distribution
nonebot.init(driver='~none')
plugin = nonebot.load_plugin('nonebot_plugin_huiyi')
import huiyi_client, nonebot_plugin_huiyi
print(json.dumps({'loaded': plugin is not None, 'plugin': nonebot_plugin_huiyi.__file__,
                  'client': huiyi_client.__file__, 'homepage': plugin.metadata.homepage,
                  'requires': distribution('nonebot-plugin-huiyi').requires,
                  'gateway': sorted({'gateway', 'memory', 'bridges'} & set(sys.modules))}, ensure_ascii=False))
"""
    r = subprocess.run([clean_venv, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    prefix = str(clean_venv.parent.parent)
    assert out["loaded"] and out["plugin"].startswith(prefix) and out["client"].startswith(prefix), out
    assert any(req.startswith("huiyi-client") for req in out["requires"]) and out["gateway"] == []
    assert out["homepage"] is None  # not published yet: no made-up address


def test_make_dist_builds_the_three_wheels(tmp_path):
    """`make dist` (its venv taken as installed), in a copy of the checkout so that the suite's other workers
    never see its build files, builds huiyi, huiyi-client and nonebot-plugin-huiyi offline, each wheel carrying
    its own packages and, for the gateway, its locales and migrations, and leaves no build files behind."""
    work = tmp_path / "checkout"
    skip = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    for name in ("Makefile", "pyproject.toml", "README.md"):
        work.mkdir(exist_ok=True)
        shutil.copy2(ROOT / name, work / name)
    for name in ("gateway", "bridges", "memory", "locales", "evals", "clients"):
        shutil.copytree(ROOT / name, work / name, ignore=skip)
    dist = tmp_path / "dist"
    r = subprocess.run(["make", "-o", ".venv/.installed", "dist", f"PY={sys.executable}", f"DIST={dist}"],
                       cwd=work, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    wheels = {p.name.split("-")[0]: p for p in dist.glob("*.whl")}
    assert set(wheels) == {"huiyi", "huiyi_client", "nonebot_plugin_huiyi"}, sorted(dist.iterdir())
    names = {k: zipfile.ZipFile(p).namelist() for k, p in wheels.items()}
    assert "gateway/cli/main.py" in names["huiyi"] and "memory/store/migrations/alembic.ini" in names["huiyi"]
    assert any(n.startswith("locales/zh_CN/") and n.endswith(".po") for n in names["huiyi"])
    assert "huiyi_client/__init__.py" in names["huiyi_client"]
    assert "nonebot_plugin_huiyi/embedded.py" in names["nonebot_plugin_huiyi"]
    assert not any(n.startswith(("tests/", "clients/")) for n in names["huiyi"])
    left = [str(p.relative_to(work)) for p in (work / "build", work / "clients" / "python" / "build",
                                              work / "clients" / "nonebot" / "build", *work.glob("*.egg-info"),
                                              *work.glob("clients/*/*.egg-info")) if p.exists()]
    assert left == [], left  # no build files left in the checkout


def test_no_placeholder_address_ships_with_the_plugin():
    """No made-up address is left in the clients: the plugin's homepage is read from its package metadata
    (the installed plugin's is None above, until it is published)."""
    sources = [p for p in (ROOT / "clients").rglob("*") if p.suffix in {".py", ".toml", ".md"} and "build" not in p.parts]
    assert len(sources) >= 8
    hits = [str(p) for p in sources if "huiyi-gateway/huiyi" in p.read_text(encoding="utf-8")]
    assert hits == []
