"""The rules every broker adapter shares (:func:`sa_inbox.brokers.process`), on each database.

The settler here records what the adapter would do to its broker; the adapters' own tests
prove the same rules against the live brokers.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

from sa_inbox.brokers import (
    DeadLetterReason,
    Delivery,
    Disposition,
    Settlement,
    process,
    process_async,
)
from sa_inbox.exc import InvalidArgument, MissingTable
from tests.support.app import CONSUMER, App


class Recorder:
    """A settler that records each call (what the adapter would send to its broker)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def ack(self) -> None:
        self.calls.append(("ack",))

    def retry(self) -> None:
        self.calls.append(("retry",))

    def dead_letter(self, reason: DeadLetterReason, detail: str) -> None:
        self.calls.append(("dead_letter", reason, detail))


def pay(app: App) -> Any:
    def handler(session: Session, delivery: Delivery) -> None:
        app.apply_payment(session, delivery.message_id or "", 1, Decimal(delivery.body.decode()))

    return handler


def deliver(
    app: App, delivery: Delivery, handler: Any = None, **kw: Any
) -> tuple[Settlement, Recorder]:
    settler = Recorder()
    settlement = process(
        delivery,
        settler,
        session_factory=app.Session,
        inbox=app.inbox,
        consumer_name=CONSUMER,
        handler=handler or pay(app),
        **{"max_deliveries": 3, **kw},
    )
    return settlement, settler


def state(app: App) -> tuple[Decimal, int, int]:
    with app.engine.connect() as conn:
        balance = conn.scalar(sa.select(app.accounts.c.balance).where(app.accounts.c.id == 1))
        ledger = conn.scalar(sa.select(sa.func.count()).select_from(app.ledger))
        claims = conn.scalar(sa.select(sa.func.count()).select_from(app.inbox.table))
    return Decimal(balance), int(ledger or 0), int(claims or 0)


def test_first_delivery_is_processed_and_a_redelivery_is_a_duplicate(app: App) -> None:
    seen: list[Disposition] = []
    first, settler = deliver(
        app, Delivery("p-1", b"10.00"), on_settled=lambda s: seen.append(s.disposition)
    )
    assert first.disposition is Disposition.PROCESSED and settler.calls == [("ack",)]
    again, settler = deliver(
        app,
        Delivery("p-1", b"10.00", delivery_count=2),
        on_settled=lambda s: seen.append(s.disposition),
    )
    assert again.disposition is Disposition.DUPLICATE and settler.calls == [("ack",)]
    assert state(app) == (Decimal("10.00"), 1, 1)
    assert seen == [Disposition.PROCESSED, Disposition.DUPLICATE]


@pytest.mark.parametrize(
    ("message_id", "reason"),
    [
        (None, DeadLetterReason.MISSING_MESSAGE_ID),
        ("", DeadLetterReason.INVALID_MESSAGE_ID),
        (" p-1", DeadLetterReason.INVALID_MESSAGE_ID),
        ("x" * 300, DeadLetterReason.INVALID_MESSAGE_ID),
    ],
)
def test_a_delivery_without_a_valid_key_is_dead_lettered_unprocessed(
    app: App, message_id: str | None, reason: DeadLetterReason
) -> None:
    settlement, settler = deliver(app, Delivery(message_id, b"10.00"))
    assert settlement.disposition is Disposition.DEAD_LETTERED and settlement.reason is reason
    assert [call[:2] for call in settler.calls] == [("dead_letter", reason)]
    assert state(app) == (Decimal(0), 0, 0)


def test_a_failing_handler_is_retried_then_dead_lettered_at_the_limit(app: App) -> None:
    def fails(session: Session, delivery: Delivery) -> None:
        app.apply_payment(session, "p-2", 1, Decimal("5.00"))
        raise RuntimeError("poison")

    for count, expected in [(1, ("retry",)), (2, ("retry",))]:
        settlement, settler = deliver(app, Delivery("p-2", b"", delivery_count=count), fails)
        assert settlement.disposition is Disposition.RETRY and settler.calls == [expected]
    settlement, settler = deliver(
        app, Delivery("p-2", b"", delivery_count=3, broker_ref="tag 9"), fails
    )
    assert settlement.disposition is Disposition.DEAD_LETTERED
    assert settlement.reason is DeadLetterReason.DELIVERY_LIMIT
    ((name, reason, detail),) = settler.calls
    assert (name, reason) == ("dead_letter", DeadLetterReason.DELIVERY_LIMIT)
    assert "RuntimeError: poison" in detail and "tag 9" in detail
    assert state(app) == (Decimal(0), 0, 0)


def test_past_the_limit_an_unprocessed_message_is_dead_lettered_without_the_handler(
    app: App,
) -> None:
    ran: list[str] = []

    def handler(session: Session, delivery: Delivery) -> None:
        ran.append("ran")

    settlement, settler = deliver(app, Delivery("p-3", b"1.00", delivery_count=4), handler)
    assert [call[:2] for call in settler.calls] == [
        ("dead_letter", DeadLetterReason.DELIVERY_LIMIT)
    ]
    assert settlement.disposition is Disposition.DEAD_LETTERED and ran == []
    assert settlement.reason is DeadLetterReason.DELIVERY_LIMIT
    assert state(app) == (Decimal(0), 0, 0)  # the claim was rolled back


def test_past_the_limit_a_committed_message_is_acked_as_a_duplicate(app: App) -> None:
    deliver(app, Delivery("p-4", b"7.00"))
    settlement, settler = deliver(app, Delivery("p-4", b"7.00", delivery_count=9))
    assert settlement.disposition is Disposition.DUPLICATE and settler.calls == [("ack",)]
    assert state(app) == (Decimal("7.00"), 1, 1)


def test_a_configuration_error_is_raised_unsettled(app: App) -> None:
    app.drop()
    settler = Recorder()
    with pytest.raises(MissingTable):
        process(
            Delivery("p-5", b"1"),
            settler,
            session_factory=app.Session,
            inbox=app.inbox,
            consumer_name=CONSUMER,
            handler=pay(app),
        )
    assert settler.calls == []
    app.reset()


def test_bad_arguments_are_refused_before_anything(app: App) -> None:
    settler = Recorder()
    with pytest.raises(InvalidArgument):
        deliver(app, Delivery("p-6", b"1"), max_deliveries=0)
    with pytest.raises(Exception, match="consumer_name"):
        process(
            Delivery("p-6", b"1"),
            settler,
            session_factory=app.Session,
            inbox=app.inbox,
            consumer_name="",
            handler=pay(app),
        )
    assert settler.calls == [] and state(app) == (Decimal(0), 0, 0)


def test_process_async_follows_the_same_rules(app: App, tmp_path: object) -> None:
    url = app.engine.url
    async_url = url.set(
        drivername={
            "sqlite": "sqlite+aiosqlite",
            "postgresql": "postgresql+asyncpg",
            "mysql": "mysql+aiomysql",
            "oracle": "oracle+oracledb",
        }[url.get_backend_name()]
    )

    class AsyncRecorder(Recorder):
        async def ack(self) -> None:  # type: ignore[override]
            await asyncio.sleep(0)
            super().ack()

    async def handler(session: AsyncSession, delivery: Delivery) -> None:
        await app.apply_payment_async(session, delivery.message_id or "", 1, Decimal("2.50"))

    async def main() -> list[tuple[Disposition, list[tuple[Any, ...]]]]:
        engine = create_async_engine(async_url)
        factory = async_sessionmaker(engine)
        out = []
        for delivery in [Delivery("a-1", b""), Delivery("a-1", b"", 2), Delivery(None, b"")]:
            settler = AsyncRecorder()
            settlement = await process_async(
                delivery,
                settler,
                session_factory=factory,
                inbox=app.inbox,
                consumer_name=CONSUMER,
                handler=handler,
            )
            out.append((settlement.disposition, [c[:2] for c in settler.calls]))
        await engine.dispose()
        return out

    assert asyncio.run(main()) == [
        (Disposition.PROCESSED, [("ack",)]),
        (Disposition.DUPLICATE, [("ack",)]),
        (Disposition.DEAD_LETTERED, [("dead_letter", DeadLetterReason.MISSING_MESSAGE_ID)]),
    ]
    assert state(app) == (Decimal("2.50"), 1, 1)


def test_a_plain_handler_that_drops_an_unawaited_statement_is_refused(app: App) -> None:
    """``def handler(session, d): session.execute(...)`` on an AsyncSession only makes a
    coroutine: the statement never runs. Refused (nothing claimed, nothing acked), where it
    used to commit the claim and ack without the change."""
    url = app.engine.url
    drivers = {
        "sqlite": "sqlite+aiosqlite",
        "postgresql": "postgresql+asyncpg",
        "mysql": "mysql+aiomysql",
        "oracle": "oracle+oracledb",
    }
    async_url = url.set(drivername=drivers[url.get_backend_name()])

    def forgot_await(session: AsyncSession, delivery: Delivery) -> None:
        session.execute(app.payment("u-1", 1, Decimal("3.00"))[0])  # type: ignore[unused-coroutine]

    async def main() -> tuple[Settlement, list[tuple[Any, ...]]]:
        engine = create_async_engine(async_url)
        settler = Recorder()
        try:
            settlement = await process_async(
                Delivery("u-1", b""),
                settler,
                session_factory=async_sessionmaker(engine),
                inbox=app.inbox,
                consumer_name=CONSUMER,
                handler=forgot_await,
            )
        finally:
            await engine.dispose()
        return settlement, settler.calls

    settlement, calls = asyncio.run(main())
    assert settlement.disposition is Disposition.RETRY and calls == [("retry",)]
    assert "never awaited" in str(settlement.error)
    assert state(app) == (Decimal(0), 0, 0)
