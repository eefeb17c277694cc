"""Message-id collisions through every async driver (aiosqlite, asyncpg, psycopg async,
aiomysql): the async faces run the sync code through ``run_sync``, so the same locking read
and the same outcomes, proven here on the database state."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from sa_inbox import Inbox, InboxStore, Outcome
from sa_inbox.asyncio import AsyncInbox, AsyncInboxStore, handle
from sa_inbox.collision import COLLISIONS_TABLE, payload_hash
from sa_inbox.exc import MessageIdCollision
from tests.backends.asyncio.test_async import pay, run
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

A, B = payload_hash({"v": 1}), payload_hash({"v": 2})


def skip_bytes_on_aiomysql(async_url: str) -> None:
    """aiomysql 0.3.2 cannot bind a ``bytes`` parameter with PyMySQL 1.2 (it imports
    ``escape_bytes_prefixed``, which PyMySQL 1.2 replaced by a placeholder string:
    ``TypeError: 'str' object is not callable``), so no ``payload_hash`` can be written
    through it here; the store's digests are never bound, so its test runs on aiomysql."""
    if async_url.startswith("mysql+aiomysql"):
        pytest.skip("aiomysql 0.3.2 + PyMySQL 1.2 cannot bind bytes (payload_hash)")


@dataclass
class Msg:
    message_id: str
    digest: bytes


@pytest.fixture
def record_app(sync_url: str) -> Iterator[App]:
    app = App(sa.create_engine(sync_url), on_collision="record")
    app.reset()
    yield app
    app.drop()
    app.engine.dispose()


def test_async_claim_and_runner(app: App, async_url: str) -> None:
    skip_bytes_on_aiomysql(async_url)
    inbox = AsyncInbox(app.inbox)
    acks: list[str] = []

    async def scenario(engine: AsyncEngine) -> list[Outcome]:
        Session = async_sessionmaker(engine)
        async with Session.begin() as session:
            assert await inbox.claim(session, "m", CONSUMER, payload_hash=A)
            await pay(app, session, "m")
        with pytest.raises(MessageIdCollision):
            async with Session.begin() as session:
                await inbox.claim(session, "m", CONSUMER, payload_hash=B)
        outcomes = []
        for digest in (A, B):
            result = await handle(
                Session,
                app.inbox,
                "m",
                CONSUMER,
                functools.partial(pay, app, message_id="m"),
                ack=lambda: acks.append("ack"),
                nack=lambda: acks.append("nack"),
                payload_hash=digest,
            )
            outcomes.append(result.outcome)
        return outcomes

    assert run(async_url, scenario) == [Outcome.DUPLICATE, Outcome.FAILED]
    assert acks == ["ack", "nack"]
    assert app.ledger_rows() == 1 and app.inbox_rows() == 1


def test_async_batch_records(record_app: App, async_url: str) -> None:
    skip_bytes_on_aiomysql(async_url)
    inbox = AsyncInbox(record_app.inbox)

    async def scenario(engine: AsyncEngine) -> list[str]:
        async with engine.begin() as conn:
            await inbox.claim_many(conn, ["a"], CONSUMER, payload_hashes={"a": A})
        async with engine.begin() as conn:
            todo = await inbox.claim_batch(
                conn, [Msg("a", B), Msg("b", A)], CONSUMER, payload_hash=lambda m: m.digest
            )
        return [m.message_id for m in todo]

    assert run(async_url, scenario) == ["b"]
    table = record_app.metadata.tables[COLLISIONS_TABLE]
    with record_app.engine.connect() as conn:
        assert conn.execute(sa.select(table.c.message_id)).scalars().all() == ["a"]
    assert record_app.inbox_rows() == 2


def test_async_store_receive(sync_url: str, async_url: str) -> None:
    metadata = sa.MetaData()
    store = AsyncInboxStore(InboxStore(metadata, table_name="async_collision_store"))
    sync_engine = sa.create_engine(sync_url)
    metadata.drop_all(sync_engine)
    metadata.create_all(sync_engine)

    async def scenario(engine: AsyncEngine) -> None:
        async with engine.begin() as conn:
            assert await store.receive(conn, "x", {"v": 1}, payload_hash=A)
        with pytest.raises(MessageIdCollision):
            async with engine.begin() as conn:
                await store.receive(conn, "x", {"v": 2}, payload_hash=B)
        async with engine.begin() as conn:
            assert not await store.receive(conn, "x", {"v": 1}, payload_hash=A)

    try:
        run(async_url, scenario)
        with sync_engine.connect() as conn:
            payloads = conn.execute(sa.select(store.table.c.payload)).scalars().all()
        assert payloads == [{"v": 1}]
    finally:
        metadata.drop_all(sync_engine)
        sync_engine.dispose()


def test_inbox_refuses_unknown_collision_mode() -> None:
    from sa_inbox.exc import InvalidArgument

    with pytest.raises(InvalidArgument):
        Inbox(sa.MetaData(), on_collision="ignore")  # type: ignore[arg-type]


def test_async_session_extension(app: App, async_url: str) -> None:
    """A claim registered on an AsyncSession with a digest: a collision aborts the flush
    with MessageIdCollision (and the transaction rolls back)."""
    skip_bytes_on_aiomysql(async_url)
    from sa_inbox.asyncio import install, register_claim

    async def scenario(engine: AsyncEngine) -> None:
        Session = async_sessionmaker(engine)
        install(Session)
        async with Session.begin() as session:
            register_claim(session, app.inbox, "x-1", CONSUMER, payload_hash=A)
            await pay(app, session, "x-1")
        with pytest.raises(MessageIdCollision):
            async with Session.begin() as session:
                register_claim(session, app.inbox, "x-1", CONSUMER, payload_hash=B)
                await pay(app, session, "x-1")
                await session.flush()

    run(async_url, scenario)
    assert app.ledger_rows() == 1 and app.inbox_rows() == 1
