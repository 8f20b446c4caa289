"""The store package stays split by concern: its parts import tables and base, never each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import memory.store
from memory.store.base import StoreBase

PACKAGE = Path(memory.store.__file__).parent


def _imports() -> dict[str, set[str]]:
    """Module name (``memories``) → the store modules it imports (``tables``, ``base``…)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("memory.store"):
                deps.add(node.module.removeprefix("memory.store").lstrip(".") or "__init__")
            elif isinstance(node, ast.Import):
                deps |= {a.name.removeprefix("memory.store").lstrip(".") or "__init__"
                         for a in node.names if a.name.startswith("memory.store")}
        graph[path.stem] = deps
    return graph


def test_store_parts_import_no_cycle_and_not_the_package():
    """No part imports ``memory.store`` itself, tables import no other part, migrate only tables, and the import graph has no cycle."""
    graph = _imports()
    assert {"tables", "base", "memories", "chatlog", "outbox", "audit", "identities", "commands"} <= set(graph)
    assert all("__init__" not in deps for deps in graph.values())
    assert graph["tables"] == set()
    assert graph["migrate"] == {"tables"}  # the schema (Alembic) knows the tables, nothing else
    assert graph["base"] == {"tables", "migrate", "traces"}  # the traces held in process: a leaf
    assert graph["traces"] == set()

    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for dep in graph.get(name, ()):
            visit(dep, (*path, name))
        done.add(name)

    for name in graph:
        visit(name, ())
    assert done == set(graph)


def test_every_store_method_lives_in_a_part_on_the_one_transaction_boundary():
    """Each public Store method is defined in a concern module, and every part derives from StoreBase."""
    parts = [c for c in memory.store.Store.__mro__[1:] if c not in (StoreBase, object)]
    assert len(parts) == 17 and all(issubclass(c, StoreBase) for c in parts)
    public = [n for n in dir(memory.store.Store) if not n.startswith("_") and callable(getattr(memory.store.Store, n))]
    homes = {getattr(memory.store.Store, n).__module__ for n in public}
    assert "add" in public and "append_chat" in public and "move_namespace" in public
    assert homes <= {f"memory.store.{m}" for m in ("base", "memories", "chatlog", "outbox", "audit", "identities", "nonces",
                                                   "commands", "conflicts", "links", "apikeys", "versions",
                                                   "consolidated", "events", "console_sessions", "pauses", "ledger",
                                                   "followups")}
    assert getattr(memory.store.Store, "add").__module__ == "memory.store.memories"
    assert getattr(memory.store.Store, "append_chat").__module__ == "memory.store.chatlog"
