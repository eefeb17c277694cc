"""No import cycle within sa_inbox: every import counts, at module level, under ``if
TYPE_CHECKING:`` and inside functions (a cycle broken only by a late import is still one
concern depending on another and back)."""

from __future__ import annotations

import ast

from tests.support.imports import cycles, imported, module_graph


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("def f():\n    from .b import g\nif TYPE_CHECKING:\n    from . import c\n")
    assert {"sa_inbox.x.b.g", "sa_inbox.x.c"} <= set(imported(tree, "sa_inbox.x.a", False))


def test_no_import_cycle_in_sa_inbox() -> None:
    graph = module_graph()
    found = cycles(graph)
    described = [
        " ; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(c)))}" for m in c) for c in found
    ]
    assert not found, "import cycles:\n" + "\n".join(described)
