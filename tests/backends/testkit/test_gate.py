"""Where the concurrent duplicate holds its deliveries: just before the claim. For an
sa-inbox handler that is sa-inbox's own insert-or-skip into the inbox table; for a
check-then-insert consumer, its insert into its dedup table, after its SELECT. Every
delivery is held, all are released together, and the database decides: one applies."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from sa_inbox.testing.checks import check_concurrent, check_sequential
from sa_inbox.testing.kit import _prepare
from tests.backends.testkit.conftest import url_for
from tests.support import kit_app

pytestmark = pytest.mark.backend

WORKERS = 5


@pytest.fixture(params=["sqlite", "postgresql", "mysql", "aiosqlite", "asyncpg", "aiomysql"])
def kit_url(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[str]:
    url = url_for(request.param, tmp_path)
    yield url
    kit_app.teardown()


def concurrent(target: Any, **arguments: Any) -> tuple[Any, Any, Any]:
    """The sequential check (for its baseline), then the concurrent one: (deliveries, gate,
    report)."""
    run, _, report = _prepare(
        target,
        message=kit_app.payment,
        state=kit_app.ledger_rows,
        workers=WORKERS,
        timeout=60.0,
        consumer=arguments.pop("consumer", None),
        key=None,
        outbound=(),
        **{"session_factory": None, "inbox": None, "consumer_name": None, **arguments},
    )

    async def both() -> tuple[Any, Any]:
        from sa_inbox.testing.observe import observing

        try:
            with observing():
                assert await check_sequential(run, report)
                return await check_concurrent(run, report)
        finally:
            if run.asynchronous_factory:  # its connections closed on their event loop
                await run.session_factory.kw["bind"].dispose()

    try:
        results, gate = asyncio.run(both())
    finally:
        run.close_threads()
    return results, gate, report


def test_an_sa_inbox_handlers_deliveries_are_held_at_its_claim(kit_url: str) -> None:
    session_factory = kit_app.setup(kit_url)
    handler = kit_app.apply_async if kit_app.is_async(kit_url) else kit_app.apply
    results, gate, report = concurrent(
        handler,
        session_factory=session_factory,
        inbox=kit_app.inbox,
        consumer_name=kit_app.CONSUMER,
    )
    assert report.passed, report.render()
    assert gate.together == WORKERS
    table = kit_app.inbox.table.name
    for delivered in results:
        watch = delivered.watch
        assert watch.gated and not watch.read_before_write
        assert watch.claim is not None and watch.claim.upper().startswith("INSERT"), watch.claim
        assert table in watch.claim
    assert sorted(r.watch.claim_rows for r in results) == [0] * (WORKERS - 1) + [1]
    assert [len(r.watch.commits) for r in results].count(1) == 1


def test_a_check_then_insert_consumer_is_held_after_its_check(kit_url: str) -> None:
    session_factory = kit_app.setup(kit_url)
    asynchronous = kit_app.is_async(kit_url)
    consume = kit_app.select_first_async if asynchronous else kit_app.select_first
    results, gate, report = concurrent(None, consumer=consume, session_factory=session_factory)
    assert gate.together == WORKERS
    for delivered in results:
        assert delivered.watch.read_before_write
        assert delivered.watch.claim is not None
        assert delivered.watch.claim.upper().startswith(
            f"INSERT INTO {kit_app.claims.name}".upper()
        )
    assert report.modes("concurrent") == ["check-then-insert"]
    assert sum(1 for r in results if r.failed) == WORKERS - 1
