"""The package layout's rules: the store's worker and the in-memory store depend on the
store protocol, not on the database store, nothing but the CLI imports the CLI, and
sa_inbox.bench holds only what ``sa-inbox bench`` and the demo run."""

from __future__ import annotations

import ast
from pathlib import Path

import sa_inbox
from sa_inbox.bench import OPTIONAL_SCENARIOS, SCENARIOS
from tests.support.imports import module_graph

PACKAGE = Path(sa_inbox.__file__).parent


def _imports(relative: str) -> set[str]:
    """The modules ``sa_inbox/<relative>`` imports, resolved to absolute names."""
    path = PACKAGE / relative
    module = "sa_inbox." + relative.removesuffix(".py").replace("/", ".")
    package = module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_worker_and_memory_store_import_the_protocol_not_the_database_store() -> None:
    for relative in ("store/worker.py", "testing.py"):
        imported = _imports(relative)
        assert "sa_inbox.store.store" not in imported, relative
        assert not any(name.startswith("sa_inbox.dialects") for name in imported), relative


def test_nothing_but_the_cli_imports_the_cli() -> None:
    for path in PACKAGE.rglob("*.py"):
        relative = str(path.relative_to(PACKAGE))
        if relative.startswith("cli/"):
            continue
        assert not any(
            name == "sa_inbox.cli" or name.startswith("sa_inbox.cli.")
            for name in _imports(relative)
        ), relative


def test_the_import_scan_sees_relative_imports() -> None:
    assert "sa_inbox.store.protocol" in _imports("store/worker.py")
    assert "sa_inbox.handlers" in _imports("store/worker.py")


def test_bench_holds_only_what_the_bench_command_and_the_demo_run() -> None:
    """Every module of sa_inbox.bench is a scenario of ``sa-inbox bench`` or is imported by
    one, by the command or by the demo: peer comparisons and studies live in the
    repository's benchmarks/, outside the wheel."""
    graph = module_graph()
    scenarios = {f"sa_inbox.bench.{name}" for name in (*SCENARIOS, *OPTIONAL_SCENARIOS)}
    roots = {"sa_inbox.cli.bench", *(m for m in graph if m.startswith("sa_inbox.demo")), *scenarios}
    reached, todo = set(roots), list(roots)
    while todo:
        for target in graph[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    bench = {m for m in graph if m.startswith("sa_inbox.bench.")}
    assert sorted(bench - reached) == []
