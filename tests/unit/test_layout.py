"""The package layout's rules that are not import contracts (those are in
``pyproject.toml``, checked by tests/unit/test_import_contracts.py): sa_inbox.bench,
sa_inbox.chaos and sa_inbox.demo hold only what ``sa-inbox bench``, ``sa-inbox chaos`` and
``sa-inbox demo`` run. Imports are read by grimp (import-linter's graph): every import
counts, at module level, under ``if TYPE_CHECKING:`` and inside functions."""

from __future__ import annotations

import functools

import grimp

from sa_inbox.bench import OPTIONAL_SCENARIOS, SCENARIOS
from sa_inbox.chaos.drivers import SCHEMES

#: The modules run without an import: the bench scenarios (imported by name), the chaos
#: drivers (by URL scheme) and the chaos consumer process (``python -m``).
ENTRY_POINTS = {
    "sa_inbox.cli",
    *(f"sa_inbox.bench.{name}" for name in (*SCENARIOS, *OPTIONAL_SCENARIOS)),
    *(f"sa_inbox.chaos.drivers.{module}" for module in SCHEMES.values()),
    "sa_inbox.chaos.consumer",
}


@functools.cache
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("sa_inbox", cache_dir=None)


def reached_from(roots: set[str]) -> set[str]:
    """``roots`` and every sa_inbox module they import, directly or not."""
    reached, todo = set(roots), list(roots)
    while todo:
        for target in graph().find_modules_directly_imported_by(todo.pop()) - reached:
            reached.add(target)
            todo.append(target)
    return reached


def test_the_import_graph_sees_relative_and_late_imports() -> None:
    imported = graph().find_modules_directly_imported_by("sa_inbox.store.worker")
    assert {"sa_inbox.store.protocol", "sa_inbox.handlers"} <= imported
    assert "sa_inbox.bench.claim_overhead" in reached_from({"sa_inbox.bench.outbox"})


def test_bench_chaos_and_demo_hold_only_what_their_commands_run() -> None:
    """Every module of sa_inbox.bench, sa_inbox.chaos and sa_inbox.demo is run by ``sa-inbox
    bench``, ``chaos`` or ``demo`` (imported by the command, by a scenario, a chaos driver
    or the consumer process): peer comparisons and studies live in the repository's
    benchmarks/, outside the wheel."""
    reached = reached_from(ENTRY_POINTS)
    for package in ("sa_inbox.bench", "sa_inbox.chaos", "sa_inbox.demo"):
        modules = graph().find_descendants(package)
        assert modules, package
        assert sorted(modules - reached) == [], package
