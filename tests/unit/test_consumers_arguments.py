"""``hand_over`` and ``owner`` refuse what they cannot serve with a typed error before any
SQL (an engine whose every statement is recorded shows none was sent)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox
from sa_inbox.asyncio import AsyncInbox, AsyncInboxStore
from sa_inbox.exc import (
    ConfigurationError,
    InvalidArgument,
    InvalidBind,
    InvalidHandler,
    InvalidMessageId,
    InvalidTable,
    SyncAsyncMismatch,
)
from sa_inbox.store import InboxStore


def handler(session: Any) -> None:
    """A handler."""


@pytest.fixture
def sent() -> list[str]:
    return []


@pytest.fixture
def engine(sent: list[str]) -> sa.Engine:
    engine = sa.create_engine("sqlite://")
    sa.event.listen(engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
    return engine


@pytest.mark.parametrize(
    ("consumer_name", "handler_", "error"),
    [
        ("", handler, InvalidMessageId),
        (" orders", handler, InvalidMessageId),
        ("o" * 65, handler, InvalidMessageId),  # longer than the inbox's consumer_name
        (None, handler, InvalidMessageId),
        ("orders", 42, InvalidHandler),
        ("orders", "", InvalidArgument),
        ("orders", "x" * 513, InvalidArgument),
    ],
    ids=["empty", "whitespace", "too long", "None", "not callable", "empty owner", "long owner"],
)
def test_hand_over_refuses_bad_values_before_sql(
    engine: sa.Engine, sent: list[str], consumer_name: Any, handler_: Any, error: type[Exception]
) -> None:
    inbox = Inbox(sa.MetaData(), message_id_length=64)
    assert inbox.consumers is not None
    with pytest.raises(error):
        inbox.consumers.hand_over(engine, consumer_name, handler_)
    assert sent == []


def test_hand_over_and_owner_refuse_what_is_not_an_engine(
    engine: sa.Engine, sent: list[str]
) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    consumers = Inbox(sa.MetaData()).consumers
    assert consumers is not None
    aengine = create_async_engine("sqlite+aiosqlite://")
    for call in (consumers.hand_over, lambda e, *a: consumers.owner(e, "orders")):
        with pytest.raises(SyncAsyncMismatch, match="AsyncEngine"):
            call(aengine, "orders", handler)
        with engine.connect() as conn, pytest.raises(InvalidBind):
            call(conn, "orders", handler)
    assert sent == []


def test_the_async_hand_overs_refuse_a_sync_engine_and_a_store_without_owners(
    engine: sa.Engine,
) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    aengine = create_async_engine("sqlite+aiosqlite://")
    with pytest.raises(SyncAsyncMismatch):
        AsyncInbox(Inbox(sa.MetaData())).hand_over(engine, "orders", handler)  # type: ignore[arg-type]
    with pytest.raises(SyncAsyncMismatch):
        AsyncInboxStore(InboxStore(sa.MetaData())).hand_over(engine, "orders", handler)  # type: ignore[arg-type]
    for made in (
        AsyncInbox(Inbox(sa.MetaData(), consumers=False)),
        AsyncInboxStore(InboxStore(sa.MetaData(), consumers=False)),
    ):
        with pytest.raises(InvalidTable, match="consumers=False") as info:
            made.hand_over(aengine, "orders", handler)
        assert isinstance(info.value, ConfigurationError)
    asyncio.run(aengine.dispose())


def test_the_refusal_keeps_its_values_through_pickle() -> None:
    """A worker process reports it to its parent (multiprocessing, a task queue)."""
    import pickle

    from sa_inbox.exc import ConsumerNameTaken

    refused = pickle.loads(pickle.dumps(ConsumerNameTaken("orders", "app.create", "app.bill")))
    assert (refused.consumer_name, refused.owner, refused.handler) == (
        "orders",
        "app.create",
        "app.bill",
    )
    assert "hand_over(engine, 'orders', handler)" in str(refused)
