"""``Outbox.publish`` in the caller's transaction, on each database (sync and async drivers):
the row exists if and only if the transaction committed, the message id is a UUIDv7 set once,
bad input writes nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

from sa_inbox import DuplicateMessage, Outcome, handle, install, register_claim
from sa_inbox.asyncio import AsyncOutbox
from sa_inbox.asyncio import handle as handle_async
from sa_inbox.exc import AutocommitConnection, InvalidBind, InvalidOutboxMessage
from tests.conftest import ASYNC_DRIVERS as DRIVERS
from tests.conftest import async_driver_url
from tests.support.app import CONSUMER, sync_driver_url
from tests.support.outbox_app import OutboxApp

pytestmark = pytest.mark.backend

#: handle()'s ack and nack: no broker in these tests.
NO_BROKER: dict[str, Any] = {"ack": lambda: None, "nack": lambda: None}


@pytest.fixture
def oapp(engine: sa.Engine) -> Iterator[OutboxApp]:
    app = OutboxApp(engine)
    app.reset()
    yield app
    app.drop()


def test_a_committed_handler_leaves_its_message_and_a_failed_one_none(oapp: OutboxApp) -> None:
    published: list[str] = []

    def handler_for(message_id: str) -> Callable[[Session], None]:
        """The consumer's one handler, for ``message_id``: m-2 fails after publishing."""

        def handler(session: Session) -> None:
            if message_id == "m-2":
                oapp.apply_payment(session, "m-2", 1, Decimal(7))
                oapp.outbox.publish(session, "payments.applied", b"m-2")
                raise RuntimeError("the handler failed after publishing")
            oapp.apply_payment(session, message_id, 1, Decimal(5))
            published.append(
                oapp.outbox.publish(
                    session, "payments.applied", {"payment": message_id}, headers={"trace": "t-1"}
                )
            )

        return handler

    def deliver(message_id: str) -> Outcome:
        handler = handler_for(message_id)
        return handle(oapp.Session, oapp.inbox, message_id, CONSUMER, handler, **NO_BROKER).outcome

    assert deliver("m-1") is Outcome.PROCESSED
    (row,) = oapp.outbox_rows()
    assert [row["message_id"]] == published
    assert uuid.UUID(row["message_id"]).version == 7
    assert (row["destination"], row["payload"], row["headers"]) == (
        "payments.applied",
        b'{"payment":"m-1"}',
        {"trace": "t-1"},
    )
    assert (row["status"], row["attempts"], row["dispatched_at"]) == ("pending", 0, None)
    assert deliver("m-2") is Outcome.FAILED
    assert deliver("m-1") is Outcome.DUPLICATE
    assert len(oapp.outbox_rows()) == 1  # neither the failure nor the duplicate added one
    assert oapp.balance(1) == Decimal(5) and oapp.inbox_rows() == 1


def test_with_the_session_extension_a_duplicate_rolls_the_message_back(oapp: OutboxApp) -> None:
    install(oapp.Session)
    for attempt in range(2):
        session = oapp.Session()
        try:
            with session.begin():
                register_claim(session, oapp.inbox, "m-ext", CONSUMER)
                oapp.outbox.publish(session, "audit", {"attempt": attempt})
        except DuplicateMessage:
            assert attempt == 1
        finally:
            session.close()
    (row,) = oapp.outbox_rows()
    assert row["payload"] == b'{"attempt":0}' and oapp.inbox_rows() == 1


def test_an_explicit_message_id_is_kept_and_unique(oapp: OutboxApp) -> None:
    with oapp.Session.begin() as session:
        assert oapp.outbox.publish(session, "q", b"x", message_id="order-7:shipped") == (
            "order-7:shipped"
        )
    with pytest.raises(sa.exc.IntegrityError), oapp.Session.begin() as session:
        oapp.outbox.publish(session, "q", b"y", message_id="order-7:shipped")
    assert [r["payload"] for r in oapp.outbox_rows()] == [b"x"]


BAD: list[tuple[dict[str, Any], str]] = [
    ({"destination": ""}, "destination must not be empty"),
    ({"destination": " q"}, "whitespace"),
    ({"destination": "q" * 256}, "256 characters"),
    ({"destination": 5}, "destination must be str"),
    ({"payload": float("nan")}, "JSON"),
    ({"payload": object()}, "JSON"),
    ({"headers": ["a"]}, "mapping"),
    ({"headers": {"a": 1}}, "must be a str"),
    ({"headers": {"a": "x\r\ny: z"}}, "CR or LF"),
    ({"headers": {"a b": "x"}}, "whitespace"),
    ({"message_id": ""}, "message_id must not be empty"),
    ({"message_id": "x" * 256}, "256 characters"),
]


def test_bad_input_is_refused_before_any_sql(oapp: OutboxApp) -> None:
    statements: list[str] = []
    sa.event.listen(oapp.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    for bad, message in BAD:
        arguments: dict[str, Any] = {"destination": "q", "payload": b"ok"} | bad
        with (
            oapp.Session.begin() as session,
            pytest.raises(InvalidOutboxMessage, match=message),
        ):
            oapp.outbox.publish(session, **arguments)
    assert statements == [] and oapp.outbox_rows() == []


def test_an_autocommit_connection_and_a_bad_bind_are_refused(oapp: OutboxApp) -> None:
    with oapp.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        with pytest.raises(AutocommitConnection):
            oapp.outbox.publish(conn, "q", b"x")
    with pytest.raises(InvalidBind):
        oapp.outbox.publish(oapp.engine, "q", b"x")  # type: ignore[arg-type]
    assert oapp.outbox_rows() == []


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_async_publish_commits_with_the_handler_or_not_at_all(driver: str, tmp_path: Any) -> None:
    url = async_driver_url(driver, tmp_path)
    oapp = OutboxApp(sa.create_engine(sync_driver_url(url)))
    oapp.reset()
    outbox = AsyncOutbox(oapp.outbox)

    async def run() -> list[Outcome]:
        engine = create_async_engine(url)
        factory = async_sessionmaker(engine)
        outcomes = []
        for message_id, fail in (("a-1", False), ("a-2", True), ("a-1", False)):

            async def handler(session: AsyncSession, mid: str = message_id, f: bool = fail) -> None:
                await oapp.apply_payment_async(session, mid, 1, Decimal(1))
                await outbox.publish(session, "out", {"id": mid})
                if f:
                    raise RuntimeError("failed after publishing")

            result = await handle_async(
                factory, oapp.inbox, message_id, CONSUMER, handler, **NO_BROKER
            )
            outcomes.append(result.outcome)
        with pytest.raises(InvalidBind):
            await outbox.publish(oapp.Session(), "out", b"x")  # type: ignore[arg-type]
        await engine.dispose()
        return outcomes

    try:
        outcomes = asyncio.run(run())
        assert outcomes == [Outcome.PROCESSED, Outcome.FAILED, Outcome.DUPLICATE]
        assert [r["payload"] for r in oapp.outbox_rows()] == [b'{"id":"a-1"}']
        assert oapp.balance(1) == Decimal(1)
    finally:
        oapp.drop()
        oapp.engine.dispose()


@pytest.mark.parametrize("driver", ["aiosqlite", "asyncpg", "aiomysql"])
def test_async_publish_with_the_session_extension(driver: str, tmp_path: Any) -> None:
    """``AsyncOutbox.publish`` on an AsyncSession with a registered claim: the claim is
    emitted first; a duplicate aborts the transaction and takes the message with it."""
    from sa_inbox.asyncio import install as install_async
    from sa_inbox.asyncio import register_claim as register_claim_async

    url = async_driver_url(driver, tmp_path)
    oapp = OutboxApp(sa.create_engine(sync_driver_url(url)))
    oapp.reset()
    outbox = AsyncOutbox(oapp.outbox)

    async def run() -> list[str]:
        engine = create_async_engine(url)
        factory = async_sessionmaker(engine)
        install_async(factory)
        outcomes = []
        for attempt in range(2):
            try:
                async with factory() as session, session.begin():
                    register_claim_async(session, oapp.inbox, "m-async-ext", CONSUMER)
                    await outbox.publish(session, "audit", {"attempt": attempt})
                outcomes.append("committed")
            except DuplicateMessage:
                outcomes.append("duplicate")
        await engine.dispose()
        return outcomes

    try:
        assert asyncio.run(run()) == ["committed", "duplicate"]
        assert [r["payload"] for r in oapp.outbox_rows()] == [b'{"attempt":0}']
        assert oapp.inbox_rows() == 1
    finally:
        oapp.drop()
        oapp.engine.dispose()
