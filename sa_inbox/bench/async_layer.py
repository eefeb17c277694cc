"""The async layer of :mod:`.claim_overhead`: the business transaction on an AsyncConnection.

One layer per async driver of the benchmarked backend (:func:`async_layers`): asyncpg and
psycopg 3 async on PostgreSQL, aiomysql on MySQL/MariaDB, aiosqlite on SQLite. Each runs
the business transaction of :mod:`.claim_overhead` (insert a ledger row, update the worker's
account, commit) on an :class:`~sqlalchemy.ext.asyncio.AsyncConnection` three ways:

* ``async_plain``: the business transaction only;
* ``async_hand``: a hand-written async SQLAlchemy Core insert-or-skip first (the backend's
  ``insert(t).on_conflict_do_nothing(...)`` or ``INSERT IGNORE``, built once and sent with
  ``await conn.execute(statement, params)``), then the business change if it inserted;
* ``async_claim``: :meth:`sa_inbox.asyncio.AsyncInbox.claim` first, then the business
  change if it claimed.

In a ``paired`` cell a worker cycles through all three, message by message, so the claim is
compared with no claim *and* with the hand-written insert-or-skip on the same driver at the
same moment of the machine. A layer whose driver (or greenlet) is not installed is skipped.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite

from .db import ACCOUNT, AMOUNT, LEDGER, SQLITE_TIMEOUT, BenchSchema, sqlite_wal
from .workers import share, worker_result

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = [
    "ASYNC_DRIVERS",
    "ASYNC_SEQUENCES",
    "AsyncContext",
    "async_claim",
    "async_hand",
    "async_layers",
    "async_plain",
    "async_url",
    "measure_async",
    "missing_async_drivers",
]

CONSUMER = "billing"
#: Untimed transactions per worker and kind before the measurement (as the sync layers).
WARMUP = 5
#: Layer prefix: ``async-asyncpg``, ``async-psycopg``, ``async-aiomysql``, ``async-aiosqlite``.
PREFIX = "async-"

#: backend -> its async drivers: (driver name, SQLAlchemy drivername, modules it imports).
ASYNC_DRIVERS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "postgresql": (
        ("asyncpg", "postgresql+asyncpg", ("asyncpg",)),
        ("psycopg", "postgresql+psycopg", ("psycopg",)),
    ),
    "mysql": (("aiomysql", "mysql+aiomysql", ("aiomysql",)),),
    "mariadb": (("aiomysql", "mysql+aiomysql", ("aiomysql",)),),
    "sqlite": (("aiosqlite", "sqlite+aiosqlite", ("aiosqlite",)),),
}

#: execution option of the hand-written statement: the rowcount that tells a duplicate
#: (psycopg 3 reports -1 without it), as any hand-written insert-or-skip needs.
ROWCOUNT = {"preserve_rowcount": True}


def _drivers(url: str) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    return ASYNC_DRIVERS.get(sa.make_url(url).get_backend_name(), ())


def _installed(modules: tuple[str, ...]) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("greenlet", *modules))


def async_layers(url: str) -> list[str]:
    """The async layers measured for ``url``'s backend whose drivers are installed."""
    return [PREFIX + name for name, _, modules in _drivers(url) if _installed(modules)]


def missing_async_drivers(url: str) -> list[str]:
    """The async layers of ``url``'s backend skipped for want of their driver or greenlet."""
    return [PREFIX + name for name, _, modules in _drivers(url) if not _installed(modules)]


def async_url(url: str, layer: str) -> str:
    """``url`` with its driver swapped for ``layer``'s async driver."""
    for name, drivername, _ in _drivers(url):
        if PREFIX + name == layer:
            return sa.make_url(url).set(drivername=drivername).render_as_string(hide_password=False)
    raise ValueError(f"no async layer {layer!r} for {sa.make_url(url).get_backend_name()}")


def make_async_engine(url: str) -> AsyncEngine:
    """An async engine for one benchmark process (SQLite: WAL, as :func:`.db.make_engine`)."""
    # Imported here: this module is imported (to list the layers) without greenlet too.
    from sqlalchemy.ext.asyncio import create_async_engine

    if sa.make_url(url).get_backend_name() == "sqlite":
        engine = create_async_engine(url, connect_args={"timeout": SQLITE_TIMEOUT})
        sqlite_wal(engine.sync_engine)
        return engine
    return create_async_engine(url, pool_size=2, max_overflow=4)


def _insert_or_skip(table: sa.Table, dialect: str) -> sa.Executable:
    """The hand-written single-row insert-or-skip of ``dialect``, built once."""
    key = [table.c.message_id, table.c.consumer_name]
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=key)
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=key)
    if dialect in ("mysql", "mariadb"):
        return mysql.insert(table).prefix_with("IGNORE")
    raise ValueError(f"no hand-written insert-or-skip for {dialect}")


class AsyncContext:
    """What one worker's async transactions run on: its AsyncConnection and account.

    Make it with :meth:`open`.
    """

    def __init__(self, engine: AsyncEngine, conn: AsyncConnection, account: int) -> None:
        from ..asyncio import AsyncInbox

        self.engine = engine
        self.conn = conn
        self.account = account
        inbox = BenchSchema(engine.sync_engine).inbox
        self.inbox = AsyncInbox(inbox)
        self.hand = _insert_or_skip(inbox.table, engine.dialect.name)

    @classmethod
    async def open(cls, url: str, account: int) -> AsyncContext:
        engine = make_async_engine(url)
        return cls(engine, await engine.connect(), account)

    async def close(self) -> None:
        await self.conn.close()
        await self.engine.dispose()


async def _business(ctx: AsyncContext, message_id: str) -> None:
    conn = ctx.conn
    await conn.execute(
        LEDGER.insert(), {"message_id": message_id, "account_id": ctx.account, "amount": AMOUNT}
    )
    await conn.execute(
        ACCOUNT.update()
        .where(ACCOUNT.c.id == ctx.account)
        .values(balance=ACCOUNT.c.balance + AMOUNT)
    )


async def async_plain(ctx: AsyncContext, message_id: str) -> None:
    """Async: business transaction only"""
    async with ctx.conn.begin():
        await _business(ctx, message_id)


async def async_hand(ctx: AsyncContext, message_id: str) -> None:
    """Async: hand-written Core insert-or-skip + business transaction"""
    async with ctx.conn.begin():
        result = await ctx.conn.execute(
            ctx.hand,
            {"message_id": message_id, "consumer_name": CONSUMER},
            execution_options=ROWCOUNT,
        )
        if result.rowcount == 1:
            await _business(ctx, message_id)


async def async_claim(ctx: AsyncContext, message_id: str) -> None:
    """Async: AsyncInbox.claim() + business transaction"""
    async with ctx.conn.begin():
        if await ctx.inbox.claim(ctx.conn, message_id, CONSUMER):
            await _business(ctx, message_id)


AsyncTransaction = Callable[[AsyncContext, str], Awaitable[None]]

#: mode -> the transactions a worker of an async layer cycles through: in ``paired`` mode
#: without the claim, with the hand-written insert-or-skip, with the claim (the last one).
ASYNC_SEQUENCES: dict[str, tuple[AsyncTransaction, ...]] = {
    "plain": (async_plain,),
    "claim": (async_claim,),
    "paired": (async_plain, async_hand, async_claim),
}


async def _measure(
    params: Mapping[str, Any], worker: int, workers: int, go: Callable[[], float]
) -> dict[str, Any]:
    sequence = ASYNC_SEQUENCES[params["mode"]]
    by_kind: list[list[float]] = [[] for _ in sequence]
    ctx = await AsyncContext.open(async_url(params["url"], params["layer"]), worker)
    try:
        ids = [str(uuid.uuid4()) for _ in range(share(params["messages"], worker, workers))]
        for _ in range(WARMUP):
            for transaction in sequence:
                await transaction(ctx, str(uuid.uuid4()))
        started = go()  # blocks the loop at the barrier: nothing else runs on it
        for n, message_id in enumerate(ids):
            kind = n % len(sequence)
            t0 = time.perf_counter()
            await sequence[kind](ctx, message_id)
            by_kind[kind].append(time.perf_counter() - t0)
        finished = time.perf_counter()
    finally:
        await ctx.close()
    # Every transaction but the plain ones inserted one inbox row (hand-written or claim).
    claims = sum(
        len(kind) + WARMUP
        for kind, fn in zip(by_kind, sequence, strict=True)
        if fn is not async_plain
    )
    transactions = len(ids) + WARMUP * len(sequence)
    return worker_result((started, finished, by_kind), params["mode"], transactions, claims)


def measure_async(
    params: Mapping[str, Any], worker: int, workers: int, go: Callable[[], float]
) -> dict[str, Any]:
    """One worker's part of an async cell (a :data:`~.workers.WorkerFunction`): its own
    event loop, engine and AsyncConnection; results as :func:`.claim_overhead.measure`."""
    return asyncio.run(_measure(params, worker, workers, go))
