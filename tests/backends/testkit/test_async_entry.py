"""check_exactly_once_async() on the caller's own event loop, whose engine belongs to that
loop (an ``async def`` test): a right handler passes, a wrong one raises the violation with
its report, on aiosqlite, asyncpg and aiomysql."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from sa_inbox.exc import ExactlyOnceViolation
from sa_inbox.testing import check_exactly_once_async
from tests.support import kit_app
from tests.support.app import sync_driver_url

pytestmark = pytest.mark.backend


def test_the_checks_run_on_the_callers_event_loop(async_url: str) -> None:
    kit_app.setup(sync_driver_url(async_url).render_as_string(hide_password=False))
    kit_app.teardown()

    async def main() -> tuple[object, ExactlyOnceViolation]:
        engine = create_async_engine(async_url)  # made on this loop, used on it
        arguments = {
            "session_factory": async_sessionmaker(engine),
            "inbox": kit_app.inbox,
            "consumer_name": kit_app.CONSUMER,
            "message": kit_app.payment,
            "state": kit_app.ledger_rows,
        }
        try:
            report = await check_exactly_once_async(kit_app.apply_async, **arguments)
            with pytest.raises(ExactlyOnceViolation) as caught:
                await check_exactly_once_async(
                    kit_app.apply_async, key=kit_app.tag_key, **arguments
                )
        finally:
            await engine.dispose()
        return report, caught.value

    report, violation = asyncio.run(main())
    assert report.passed  # type: ignore[attr-defined]
    assert "key-changes-per-delivery" in violation.report.modes()
    assert str(violation) == violation.report.render()
