"""The stores under contract, behind one small test adapter.

Each adapter holds a :class:`~sa_inbox.store.MessageStore` (what a worker uses) and adds what
the contract scenarios need and the protocol does not define: receive (in its own
transaction for a database), replay, a row's columns, the counts per status, and the
handler's business change with a way to read it back. Every time given to a store comes from
one fake :class:`Clock`, so no scenario sleeps: the database stores take ``now`` on every call.

The business change is an ``effects`` row per handled message (a list on the in-memory store,
the ``store_test_effects`` table of :class:`tests.support.store_app.StoreApp` on a database).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox.store import DEFAULT_CONSUMER, Incoming, MessageStore, StoredMessage
from sa_inbox.testing import MemoryStore
from tests.support.store_app import StoreApp

__all__ = ["START", "Clock", "DatabaseStore", "MemoryStoreUnderTest", "Row", "StoreUnderTest"]

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class Clock:
    """A clock the test moves by hand (read by the worker's threads too)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)

    def set(self, when: datetime.datetime) -> None:
        self.now = when


@dataclass(frozen=True)
class Row:
    """The columns of one stored message, read from either store."""

    id: int
    message_id: str
    consumer_name: str
    payload: Any
    aggregate_id: str | None
    message_type: str | None
    status: str
    attempts: int
    available_at: datetime.datetime
    claimed_at: datetime.datetime | None
    claimed_by: str | None
    last_error: str | None
    processed_at: datetime.datetime | None


class StoreUnderTest:
    """What every store offers the contract scenarios."""

    name: str
    store: MessageStore
    clock: Clock

    def receive(
        self,
        message_id: str,
        payload: Any,
        *,
        consumer_name: str = DEFAULT_CONSUMER,
        aggregate_id: str | None = None,
        message_type: str | None = None,
    ) -> bool:
        raise NotImplementedError

    def receive_many(
        self, messages: Iterable[Incoming], *, consumer_name: str = DEFAULT_CONSUMER
    ) -> set[str]:
        raise NotImplementedError

    def replay(self, *, ids: Iterable[int] | None = None, status: str | None = None) -> int:
        raise NotImplementedError

    def row(self, message_id: str, consumer_name: str = DEFAULT_CONSUMER) -> Row:
        raise NotImplementedError

    def message_ids(self) -> list[str]:
        """Every stored ``message_id`` in row-id (arrival) order."""
        raise NotImplementedError

    def counts(self) -> dict[str, int]:
        raise NotImplementedError

    def apply(self, context: Any, message: StoredMessage) -> None:
        """The handler's business change: one effect for ``message``."""
        raise NotImplementedError

    def effect_ids(self) -> list[str]:
        """``message_id`` of every effect, in the order they were made (duplicates kept)."""
        raise NotImplementedError

    def is_handler_context(self, context: Any) -> bool:
        """Whether ``context`` is what this store hands its handlers."""
        raise NotImplementedError


class MemoryStoreUnderTest(StoreUnderTest):
    """:class:`sa_inbox.testing.MemoryStore`; the handler's context is the effects list."""

    name = "memory"

    def __init__(self) -> None:
        self.clock = Clock()
        self.effects: list[str] = []
        self.memory = MemoryStore(context=self.effects, clock=self.clock)
        self.store = self.memory

    def receive(
        self,
        message_id: str,
        payload: Any,
        *,
        consumer_name: str = DEFAULT_CONSUMER,
        aggregate_id: str | None = None,
        message_type: str | None = None,
    ) -> bool:
        return self.memory.receive(
            message_id,
            payload,
            consumer_name=consumer_name,
            aggregate_id=aggregate_id,
            message_type=message_type,
        )

    def receive_many(
        self, messages: Iterable[Incoming], *, consumer_name: str = DEFAULT_CONSUMER
    ) -> set[str]:
        return self.memory.receive_many(messages, consumer_name=consumer_name)

    def replay(self, *, ids: Iterable[int] | None = None, status: str | None = None) -> int:
        return self.memory.replay(ids=ids, status=status, now=self.clock())

    def row(self, message_id: str, consumer_name: str = DEFAULT_CONSUMER) -> Row:
        r = self.memory.row(message_id, consumer_name)
        return Row(
            id=r.id,
            message_id=r.message_id,
            consumer_name=r.consumer_name,
            payload=r.payload,
            aggregate_id=r.aggregate_id,
            message_type=r.message_type,
            status=r.status,
            attempts=r.attempts,
            available_at=r.available_at,
            claimed_at=r.claimed_at,
            claimed_by=r.claimed_by,
            last_error=r.last_error,
            processed_at=r.processed_at,
        )

    def message_ids(self) -> list[str]:
        return [r.message_id for r in self.memory.rows]

    def counts(self) -> dict[str, int]:
        return self.memory.counts()

    def apply(self, context: Any, message: StoredMessage) -> None:
        context.append(message.message_id)

    def effect_ids(self) -> list[str]:
        return list(self.effects)

    def is_handler_context(self, context: Any) -> bool:
        return context is self.effects


class DatabaseStore(StoreUnderTest):
    """:class:`~sa_inbox.store.InboxStore` bound to a real database (``BoundStore``)."""

    def __init__(self, name: str, app: StoreApp) -> None:
        self.name = name
        self.app = app
        self.clock = Clock()
        self.store = app.store.bind(app.engine)

    def receive(
        self,
        message_id: str,
        payload: Any,
        *,
        consumer_name: str = DEFAULT_CONSUMER,
        aggregate_id: str | None = None,
        message_type: str | None = None,
    ) -> bool:
        with self.app.engine.begin() as conn:
            return self.app.store.receive(
                conn,
                message_id,
                payload,
                consumer_name=consumer_name,
                aggregate_id=aggregate_id,
                message_type=message_type,
                now=self.clock(),
            )

    def receive_many(
        self, messages: Iterable[Incoming], *, consumer_name: str = DEFAULT_CONSUMER
    ) -> set[str]:
        with self.app.engine.begin() as conn:
            return self.app.store.receive_many(
                conn, messages, consumer_name=consumer_name, now=self.clock()
            )

    def replay(self, *, ids: Iterable[int] | None = None, status: str | None = None) -> int:
        return self.app.store.replay(self.app.engine, ids=ids, status=status, now=self.clock())

    def row(self, message_id: str, consumer_name: str = DEFAULT_CONSUMER) -> Row:
        t = self.app.store.table
        query = sa.select(t).where(t.c.message_id == message_id, t.c.consumer_name == consumer_name)
        with self.app.engine.connect() as conn:
            r = conn.execute(query).mappings().one()
        return Row(
            id=int(r["id"]),
            message_id=r["message_id"],
            consumer_name=r["consumer_name"],
            payload=r["payload"],
            aggregate_id=r["aggregate_id"],
            message_type=r["message_type"],
            status=r["status"],
            attempts=int(r["attempts"]),
            available_at=r["available_at"],
            claimed_at=r["claimed_at"],
            claimed_by=r["claimed_by"],
            last_error=r["last_error"],
            processed_at=r["processed_at"],
        )

    def message_ids(self) -> list[str]:
        t = self.app.store.table
        with self.app.engine.connect() as conn:
            return list(conn.execute(sa.select(t.c.message_id).order_by(t.c.id)).scalars())

    def counts(self) -> dict[str, int]:
        return self.app.store.counts(self.app.engine)

    def apply(self, context: Any, message: StoredMessage) -> None:
        self.app.apply(context, message)

    def effect_ids(self) -> list[str]:
        return self.app.effect_ids()

    def is_handler_context(self, context: Any) -> bool:
        return isinstance(context, Session) and context.get_bind() is self.app.engine
