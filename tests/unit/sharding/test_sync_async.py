"""The two halves of the sharded inbox do not mix: each refuses the other's objects at the
call, before a coroutine is made or any SQL is sent (SQLite files, aiosqlite)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from sa_inbox import ConfigurationError, Inbox
from sa_inbox.asyncio import AsyncInbox
from sa_inbox.exc import InvalidBind, InvalidHandler, InvalidShardKey, SyncAsyncMismatch
from sa_inbox.sharding import ShardedInbox
from sa_inbox.sharding.asyncio import AsyncShardedInbox

CONSUMER = "billing"


@pytest.fixture
def inbox() -> Inbox:
    return Inbox(sa.MetaData())


@pytest.fixture
def engine(tmp_path: Path, inbox: Inbox) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/a.db")
    inbox.table.metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def aengine(tmp_path: Path, engine: sa.Engine) -> Iterator[AsyncEngine]:
    # each test's asyncio.run() is its own event loop: no connection may outlive it
    aengine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/a.db", poolclass=NullPool)
    yield aengine
    aengine.sync_engine.dispose()


def _is_mismatch(error: BaseException) -> bool:
    return isinstance(error, SyncAsyncMismatch | ConfigurationError) and isinstance(
        error, TypeError
    )


def test_the_synchronous_router_refuses_the_asyncio_objects(
    inbox: Inbox, engine: sa.Engine, aengine: AsyncEngine
) -> None:
    with pytest.raises(SyncAsyncMismatch, match="AsyncShardedInbox") as info:
        ShardedInbox(AsyncInbox(inbox), {"a": engine})  # type: ignore[arg-type]
    assert _is_mismatch(info.value)
    for shard in (aengine, async_sessionmaker(aengine)):
        with pytest.raises(SyncAsyncMismatch, match="AsyncShardedInbox"):
            ShardedInbox(inbox, {"a": shard})


def test_the_asyncio_router_refuses_the_synchronous_objects(
    inbox: Inbox, engine: sa.Engine, aengine: AsyncEngine
) -> None:
    for shard in (engine, sessionmaker(engine)):
        with pytest.raises(SyncAsyncMismatch, match="use ShardedInbox"):
            AsyncShardedInbox(inbox, {"a": shard})
    # its AsyncInbox face is unwrapped (unambiguous)
    assert AsyncShardedInbox(AsyncInbox(inbox), {"a": aengine}).sync_router.inbox is inbox


def test_each_method_checks_what_it_is_given_before_it_returns_the_awaitable(
    inbox: Inbox, engine: sa.Engine, aengine: AsyncEngine, recwarn: pytest.WarningsRecorder
) -> None:
    router = AsyncShardedInbox(inbox, {"a": aengine})
    with Session(engine) as session, pytest.raises(InvalidBind, match="AsyncSession"):
        router.claim(session, "m1", CONSUMER, shard_key="t-1")  # type: ignore[arg-type]
    with pytest.raises(InvalidShardKey):
        router.is_processed("m1", CONSUMER, shard_key="")
    with pytest.raises(InvalidShardKey):
        router.handle("", "m1", CONSUMER, lambda s: None, ack=lambda: None, nack=lambda: None)
    with pytest.raises(InvalidHandler):
        router.handle("t-1", "m1", CONSUMER, "h", ack=lambda: None, nack=lambda: None)  # type: ignore[arg-type]
    # ``if router.is_processed(...)`` in synchronous code: refused, not always true
    with pytest.raises(SyncAsyncMismatch, match="await it"):
        if router.is_processed("m1", CONSUMER, shard_key="t-1"):
            pytest.fail("a coroutine was read as true")
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_the_awaitables_run_under_await_asyncio_run_and_tasks(
    inbox: Inbox, aengine: AsyncEngine
) -> None:
    router = AsyncShardedInbox(inbox, {"a": aengine})
    applied: list[str] = []

    def apply(session: AsyncSession) -> None:
        applied.append("m1")

    async def scenario() -> list[bool]:
        await router.handle(
            "t-1",
            "m1",
            CONSUMER,
            apply,
            ack=lambda: None,
            nack=lambda: None,
        )
        task = asyncio.create_task(router.is_processed("m1", CONSUMER, shard_key="t-1"))
        return [
            await router.is_processed("m1", CONSUMER, shard_key="t-1"),
            await task,
            await router.is_processed("m2", CONSUMER, shard_key="t-1"),
        ]

    assert asyncio.run(scenario()) == [True, True, False]
    assert asyncio.run(router.is_processed("m1", CONSUMER, shard_key="t-1")) is True
    assert applied == ["m1"]
