"""The world a misuse case runs in: one database through its sync and its async driver, the
payments app (ledger and inbox), an inbox store and an outbox on the same MetaData, and the
wrong objects a new user hands to the entry points."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, async_scoped_session, async_sessionmaker
from sqlalchemy.orm import scoped_session

from sa_inbox import InboxStore
from sa_inbox.asyncio import AsyncInbox, AsyncInboxStore, AsyncOutbox
from sa_inbox.outbox import Outbox, OutboxMessage
from tests.support.app import CONSUMER, App

AMOUNT = Decimal("10.00")


class AsyncPublisher:
    """A publisher written for the async relay."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def publish(self, message: OutboxMessage) -> None:
        self.sent.append(message.message_id)


@dataclass
class Env:
    """The app on one database, through both halves of the API."""

    app: App
    aengine: AsyncEngine
    store: InboxStore = field(init=False)
    outbox: Outbox = field(init=False)
    #: Run after the case (the broker cases' queues, streams and clients).
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    #: What a case keeps between its deliveries (its queue's name...).
    kept: dict[str, Any] = field(default_factory=dict)
    #: ``"ack"`` / ``"nack"`` for each call of the cases' ack and nack (``cases.acks``).
    settled: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store = InboxStore(self.app.metadata, table_name="misuse_store")
        self.outbox = Outbox(self.app.metadata, table_name="misuse_outbox")
        self.ASession = async_sessionmaker(self.aengine)

    # -- the wrong objects ------------------------------------------------------------

    def wrong(self, name: str) -> Any:
        """The object a new user passes by mistake, by name (see :data:`WRONG`)."""
        return WRONG[name](self)

    def connection(self) -> sa.Connection:
        """A Connection of the sync engine, closed after the case."""
        conn = self.app.engine.connect()
        self.cleanups.append(conn.close)
        return conn

    # -- business state ---------------------------------------------------------------

    def count(self, table: sa.Table) -> int:
        with self.app.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())

    def payments(self) -> tuple[int, int]:
        """(ledger rows, claims)."""
        return self.app.ledger_rows(), self.app.inbox_rows()

    def stored(self) -> tuple[int, int]:
        """(store rows, store rows): a receive is its own claim."""
        rows = self.count(self.store.table)
        return rows, rows

    def published(self) -> tuple[int, int]:
        """(outbox rows, claims): the outbox rows are written by a claiming handler."""
        return self.count(self.outbox.table), self.app.inbox_rows()


#: The wrong objects, each made fresh for a case.
WRONG: dict[str, Callable[[Env], Any]] = {
    "AsyncInbox": lambda env: AsyncInbox(env.app.inbox),
    "Inbox": lambda env: env.app.inbox,
    "async_sessionmaker": lambda env: env.ASession,
    "async_sessionmaker.begin": lambda env: env.ASession.begin,
    "sessionmaker": lambda env: env.app.Session,
    "sessionmaker.begin": lambda env: env.app.Session.begin,
    "AsyncEngine": lambda env: env.aengine,
    "Engine": lambda env: env.app.engine,
    "InboxStore": lambda env: env.store,
    "AsyncInboxStore": lambda env: AsyncInboxStore(env.store),
    "BoundStore": lambda env: env.store.bind(env.app.engine),
    "AsyncBoundStore": lambda env: AsyncInboxStore(env.store).bind(env.aengine),
    "AsyncOutbox": lambda env: AsyncOutbox(env.outbox),
    "Outbox": lambda env: env.outbox,
    "async publisher": lambda env: AsyncPublisher(),
    "a Table": lambda env: env.app.inbox.table,
    "scoped_session": lambda env: scoped_session(env.app.Session),
    "async_scoped_session": lambda env: async_scoped_session(env.ASession, _current_task),
    "Connection": lambda env: env.connection(),
    # not begun (an AsyncConnection connects when awaited): an object of the right type
    "AsyncConnection": lambda env: env.aengine.connect(),
}


def _current_task() -> object:
    import asyncio

    return asyncio.current_task()


__all__ = ["AMOUNT", "CONSUMER", "WRONG", "AsyncPublisher", "Env"]
