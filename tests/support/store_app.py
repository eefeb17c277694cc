"""The store tests' schema: an inbox store plus an ``effects`` table the handlers write.

``effects`` has no unique key on ``message_id`` on purpose: a message processed twice shows
up as two rows instead of an error, so the tests can count it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from sa_inbox.bench.db import sqlite_wal
from sa_inbox.store import InboxStore, StoredMessage

TABLE = "store_test_inbox"


def make_engine(url: str) -> sa.Engine:
    """An engine for the tests; SQLite in WAL mode (one fsync-free commit per message)."""
    if url.startswith("sqlite"):
        return sqlite_wal(sa.create_engine(url, connect_args={"timeout": 60}))
    return sa.create_engine(url, pool_size=5, max_overflow=5)


def make_async_engine(url: str) -> AsyncEngine:
    """:func:`make_engine` for an async driver's URL (aiosqlite in WAL mode too)."""
    if url.startswith("sqlite"):
        engine = create_async_engine(url, connect_args={"timeout": 60})
        sqlite_wal(engine.sync_engine)
        return engine
    return create_async_engine(url, pool_size=5, max_overflow=5)


class StoreApp:
    """The store and the effects table on ``engine``."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.metadata = sa.MetaData()
        self.store = InboxStore(self.metadata, table_name=TABLE)
        self.effects = sa.Table(
            "store_test_effects",
            self.metadata,
            sa.Column(
                "id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                sa.Identity(),
                primary_key=True,
            ),
            sa.Column("message_id", sa.String(255), nullable=False),
            sa.Column("aggregate_id", sa.String(255), nullable=True),
            sa.Column("seq", sa.Integer, nullable=True),
            sa.Column("claimed_by", sa.String(255), nullable=False),
        )
        #: Balances the contention tests' handlers update (see :meth:`credit`).
        self.accounts = sa.Table(
            "store_test_accounts",
            self.metadata,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("balance", sa.Integer, nullable=False),
        )

    def reset(self) -> None:
        self.drop()
        self.metadata.create_all(self.engine)

    def drop(self) -> None:
        self.metadata.drop_all(self.engine, checkfirst=True)

    # -- the business change --------------------------------------------------------------

    def effect(self, message: StoredMessage) -> sa.Insert:
        """The handler's business change: one effect row."""
        payload: dict[str, Any] = message.payload
        return self.effects.insert().values(
            message_id=message.message_id,
            aggregate_id=message.aggregate_id,
            seq=payload.get("seq"),
            claimed_by=message.claimed_by,
        )

    def apply(self, session: Session, message: StoredMessage) -> None:
        """:meth:`effect`, in the handler's session."""
        session.execute(self.effect(message))

    async def apply_async(self, session: AsyncSession, message: StoredMessage) -> None:
        """:meth:`effect`, in an AsyncWorker handler's AsyncSession."""
        await session.execute(self.effect(message))

    def credit(self, account: int, amount: int = 1) -> sa.Update:
        """Add ``amount`` to ``account``'s balance (a business row other workers update)."""
        a = self.accounts
        return a.update().where(a.c.id == account).values(balance=a.c.balance + amount)

    def open_accounts(self, count: int) -> None:
        """Accounts ``0 … count - 1`` with a zero balance."""
        with self.engine.begin() as conn:
            conn.execute(self.accounts.insert(), [{"id": i, "balance": 0} for i in range(count)])

    def balances(self) -> dict[int, int]:
        """Balance per account."""
        with self.engine.connect() as conn:
            return {int(i): int(b) for i, b in conn.execute(sa.select(self.accounts))}

    # -- state ----------------------------------------------------------------------------

    def effect_ids(self) -> list[str]:
        """``message_id`` of every effect row, in insertion order (duplicates kept)."""
        query = sa.select(self.effects.c.message_id).order_by(self.effects.c.id)
        with self.engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def effects_by_aggregate(self) -> dict[str, list[int]]:
        """Sequence numbers applied per aggregate, in the order they were applied."""
        query = sa.select(self.effects.c.aggregate_id, self.effects.c.seq).order_by(
            self.effects.c.id
        )
        applied: dict[str, list[int]] = {}
        with self.engine.connect() as conn:
            for aggregate, seq in conn.execute(query):
                applied.setdefault(aggregate, []).append(seq)
        return applied

    def row(self, message_id: str) -> sa.RowMapping:
        t = self.store.table
        with self.engine.connect() as conn:
            return conn.execute(sa.select(t).where(t.c.message_id == message_id)).mappings().one()


@contextmanager
def fresh_store_app(url: str, accounts: int = 0) -> Iterator[StoreApp]:
    """A :class:`StoreApp` on a new engine for ``url`` (a sync driver's), its tables made
    anew with ``accounts`` accounts opened; dropped and the engine disposed at the end.
    The ``store_app`` fixture of ``tests/conftest.py`` (and of the asyncio tests)."""
    app = StoreApp(make_engine(url))
    app.reset()
    if accounts:
        app.open_accounts(accounts)
    try:
        yield app
    finally:
        app.drop()
        app.engine.dispose()
