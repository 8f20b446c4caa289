"""The layout's import rules hold (DESIGN "Layout"): arrows run one way, the core
imports no web or IM framework, the turn imports neither the HTTP face nor the
command line, and nothing the tests need lives outside the repository.

Imports are read from the source (every ``import`` statement, including the
ones inside functions and ``if TYPE_CHECKING:`` blocks), so a lazy import
cannot hide an upward arrow.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "bridges", "memory", "locales", "evals")


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: Path, module: str) -> set[str]:
    """Every module name ``path`` imports (absolute; relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


ALL = {name: path for pkg in PACKAGES for name, path in _modules(pkg).items()}
IMPORTS = {name: _imports(path, name) for name, path in ALL.items()}


def _top(name: str) -> str:
    return name.split(".", 1)[0]


#: package -> the first-party packages and third-party frameworks it must never import
FORBIDDEN = {
    "memory": {"gateway", "bridges", "evals", "fastapi", "starlette", "uvicorn", "aiogram", "nonebot", "wechatpy",
               "httpx"},
    "bridges": {"gateway", "evals"},
    "locales": {"gateway", "bridges", "memory", "evals"},
    "evals": {"gateway", "fastapi", "starlette", "uvicorn", "aiogram", "nonebot", "wechatpy", "typer"},
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_run_one_way(package):
    """gateway → bridges → bridges.contract → memory.types; gateway → evals → memory; gateway → memory;
    locales imports none of them."""
    bad = sorted(f"{mod} imports {imp}" for mod, imps in IMPORTS.items() if _top(mod) == package
                 for imp in imps if _top(imp) in FORBIDDEN[package])
    assert bad == []


def test_bridges_reach_the_core_only_through_its_value_types():
    """A bridge parses and sends; the memory core is the pipeline's business (memory.types is the common vocabulary)."""
    bad = sorted(f"{mod} imports {imp}" for mod, imps in IMPORTS.items() if _top(mod) == "bridges"
                 for imp in imps if _top(imp) == "memory" and imp not in ("memory", "memory.types")
                 and not imp.startswith("memory.types."))
    assert bad == []


def test_evals_drive_the_turn_only_through_the_contract():
    """The harness builds the turn's messages (bridges.contract) and is handed its pipeline; no bridge runtime."""
    bad = sorted(f"{mod} imports {imp}" for mod, imps in IMPORTS.items() if _top(mod) == "evals"
                 for imp in imps if _top(imp) == "bridges" and imp not in ("bridges", "bridges.contract")
                 and not imp.startswith("bridges.contract."))
    assert bad == []


#: what a part of gateway/ must never import (by module prefix): the turn and its
#: parts (the top of gateway/) know neither the HTTP face nor the command line, nor
#: their frameworks; the HTTP face does not reach into the command line, nor does
#: the console (the HTTP face's browser pages, a package of its own: gateway.console)
GATEWAY_FORBIDDEN = {
    "turn": ("gateway.http", "gateway.console", "gateway.cli", "fastapi", "starlette", "uvicorn", "typer", "jinja2"),
    "gateway.http": ("gateway.cli", "typer"),
    "gateway.console": ("gateway.cli", "typer"),
}


def _part(mod: str) -> str | None:
    """Which part of gateway/ ``mod`` is: ``gateway.http``, ``gateway.console``, ``gateway.cli`` or ``turn`` (the rest)."""
    if _top(mod) != "gateway":
        return None
    for sub in ("gateway.http", "gateway.console", "gateway.cli"):
        if mod == sub or mod.startswith(sub + "."):
            return sub
    return "turn"


def _names(imp: str, prefix: str) -> bool:
    return imp == prefix or imp.startswith(prefix + ".")


@pytest.mark.parametrize("part", sorted(GATEWAY_FORBIDDEN))
def test_the_turn_knows_neither_the_http_face_nor_the_command_line(part):
    """gateway.cli → gateway.http → the turn (pipeline and its parts at the top of gateway/), never back."""
    bad = sorted(f"{mod} imports {imp}" for mod, imps in IMPORTS.items() if _part(mod) == part
                 for imp in imps if any(_names(imp, p) for p in GATEWAY_FORBIDDEN[part]))
    assert bad == []


def test_the_gateway_parts_are_told_apart():
    """The checker itself: the HTTP face, the command line and the turn."""
    assert [_part(m) for m in ("gateway.http.app", "gateway.http", "gateway.cli.main", "gateway.pipeline",
                               "gateway.httpx", "memory.core", "gateway.console.views")] == \
        ["gateway.http", "gateway.http", "gateway.cli", "turn", "turn", None, "gateway.console"]
    assert _names("gateway.http.errors", "gateway.http") and not _names("gateway.httpd", "gateway.http")


def test_sql_and_index_libraries_stay_in_the_store_and_index_modules():
    """SQLModel only in memory/store, LanceDB/Lance only in memory/index (STYLE practice 1)."""
    allowed = {"sqlmodel": "memory.store", "lancedb": "memory.index", "lance": "memory.index"}
    bad = sorted(f"{mod} imports {imp}" for mod, imps in IMPORTS.items() for imp in imps
                 if _top(imp) in allowed and not mod.startswith(allowed[_top(imp)]))
    assert bad == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan 1972)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, imps in IMPORTS.items():
        for imp in imps:
            # "from gateway import x" names a package or a module: keep the longest known module
            target = imp
            while target and target not in ALL:
                target = target.rpartition(".")[0]
            if target and target != mod and not mod.startswith(target + "."):
                graph[mod].add(target)
    return graph


def test_no_import_cycle_between_top_level_packages():
    """The package graph (gateway, bridges, memory, locales, evals) has no cycle."""
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, targets in _module_graph().items():
        graph[_top(mod)].update(_top(t) for t in targets if _top(t) != _top(mod))
    assert _cycles(graph) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_modules_of_a_package(package):
    """Inside each package no module imports (even lazily) one that imports it back."""
    graph = {m: {t for t in ts if _top(t) == package} for m, ts in _module_graph().items() if _top(m) == package}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    """The checker itself: a two-module circle and a self-contained chain."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": {"c"}}) == []


def _climbs_above_the_repository(source: str, root_index: int) -> bool:
    """Whether a module's ``source`` builds a path above the repository root: a
    parent-directory component in a string, a step up from the root
    (``ROOT.parent``), or ``parents[N]`` past ``root_index`` (the index of ``parents``
    that is the root, for a module at that depth)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if os.pardir in node.value.replace("\\", "/").split("/"):
                return True
        elif isinstance(node, ast.Attribute) and node.attr == "parent" and isinstance(node.value, ast.Name) \
                and node.value.id == "ROOT":
            return True
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "parents" and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, int) and node.slice.value > root_index:
            return True
    return False


def test_no_test_module_reads_outside_the_repository():
    """Tests carry their own data (tests/data): no test module builds a path above the repository root."""
    bad = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
                 if _climbs_above_the_repository(p.read_text(encoding="utf-8"), len(p.relative_to(ROOT).parts) - 1))
    assert bad == []


def test_the_outside_path_finder_finds_one():
    """The checker itself: climbing out by a parent component, by ROOT.parent or by parents[N] past the root."""
    up = os.pardir
    assert _climbs_above_the_repository(f"D = Path(__file__).resolve().parents[1] / '{up}' / 'data'", 1)
    assert _climbs_above_the_repository(f"D = 'x/{up}/data'", 1)
    assert _climbs_above_the_repository("D = ROOT.parent / 'data'", 1)
    assert _climbs_above_the_repository("D = Path(__file__).resolve().parents[3]", 2)
    assert not _climbs_above_the_repository("D = Path(__file__).resolve().parents[2] / 'tests' / 'data'", 2)
