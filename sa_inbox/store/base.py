"""The state and helpers every part of the inbox store shares (:class:`StoreBase`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Concatenate, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..checks import require
from ..claim import ClaimPath, PreparedInsert
from ..collision import CollisionCheck, CollisionMode, payload_hash_of_row
from ..consumers import Consumers, consumers_flag, consumers_for
from ..dialects.store_claim import StoreClaimDialect
from ..exc import InvalidArgument
from ..hooks import InboxHooks, as_hooks
from ..schema import DEFAULT_MESSAGE_ID_LENGTH
from ..validation import JSONSerializer, check_json_serializer
from .leases import LeasedRows, LeaseShape
from .receive import receive_insert
from .schema import (
    DEAD,
    DEFAULT_STORE_TABLE,
    DONE,
    PENDING,
    PROCESSING,
    RECEIVE_COLUMNS,
    STATUSES,
    inbox_store_table,
)

__all__ = ["SHAPE", "StoreBase", "on_engine"]

P = ParamSpec("P")
R = TypeVar("R")

#: The store table's leased rows: by consumer, ordered per consumer and aggregate in
#: ``(received_at, id)`` order; a lease returns a :class:`StoredMessage`'s columns
#: (``attempts`` as read before the lease's increment where there is no ``RETURNING``); a
#: replay resets dead or done rows, chosen by ids, status, arrival time and consumer.
SHAPE = LeaseShape(
    group="consumer_name",
    partition=("consumer_name", "aggregate_id"),
    order=("received_at", "id"),
    columns=(
        "id",
        "message_id",
        "consumer_name",
        "payload",
        "aggregate_id",
        "message_type",
        "attempts",
        "received_at",
        "claimed_by",
    ),
    statuses=STATUSES,
    arrived="received_at",
    finished="processed_at",
    replayable=(DEAD, DONE),
    error=InvalidArgument,
    pending=PENDING,
    processing=PROCESSING,
)


S = TypeVar("S", bound="StoreBase")


def on_engine(
    method: Callable[Concatenate[S, sa.Engine, P], R],
) -> Callable[Concatenate[S, sa.Engine, P], R]:
    """Refuse, before any SQL, an ``engine`` that is not a synchronous Engine.

    :raises SyncAsyncMismatch: for an AsyncEngine (use :class:`~sa_inbox.asyncio.AsyncInboxStore`).
    :raises InvalidObject: for anything else.
    """
    entry = f"InboxStore.{method.__name__}()"

    @functools.wraps(method)
    def checked(store: S, engine: sa.Engine, /, *args: P.args, **kwargs: P.kwargs) -> R:
        require(
            engine,
            sa.Engine,
            "engine",
            entry=entry,
            instead="for an AsyncEngine use AsyncInboxStore(store) (or the Engine behind it)",
        )
        return method(store, engine, *args, **kwargs)

    return checked


class StoreBase:
    """The state every part of :class:`~sa_inbox.store.InboxStore` shares: its table, the
    receive's prepared statement, the leased-row core; and the store's short transaction.
    The parameters are :class:`~sa_inbox.store.InboxStore`'s."""

    def __init__(
        self,
        metadata: sa.MetaData,
        *,
        table_name: str = DEFAULT_STORE_TABLE,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
        on_collision: CollisionMode = "raise",
        hooks: InboxHooks | None = None,
        consumers: bool = True,
        json_serializer: JSONSerializer | None = None,
    ) -> None:
        consumers = consumers_flag(consumers)
        #: What a receive serialises payloads with (``None``: :func:`json.dumps`).
        self.json_serializer = check_json_serializer(json_serializer)
        #: Told of every receive as of a claim (new, duplicates, collisions, seconds:
        #: :mod:`sa_inbox.hooks`); default the no-op hooks.
        self.hooks: InboxHooks = as_hooks(hooks)
        self.table = inbox_store_table(
            metadata, table_name=table_name, schema=schema, message_id_length=message_id_length
        )
        #: The owner of each consumer name (:mod:`sa_inbox.consumers`), or None.
        self.consumers: Consumers | None = consumers_for(self.table, message_id_length, consumers)
        #: The duplicate path's payload comparison (:mod:`sa_inbox.collision`).
        self.collisions = CollisionCheck(
            self.table, ("payload",), payload_hash_of_row, on_collision
        )
        self.message_id_length = message_id_length
        # The receive statement per backend and its one-time checks, as Inbox.claim's.
        self._insert = PreparedInsert(self.table, build=receive_insert, row_keys=RECEIVE_COLUMNS)
        #: The receive is a claim: Inbox.claim's path, with the store's statement.
        self._receives = ClaimPath(self._insert, self.collisions, single=True)
        #: The leased-row statements on the table (:mod:`sa_inbox.store.leases`).
        self.leased_rows = LeasedRows(self.table, SHAPE)
        # The batch's done-marking UPDATE per backend, built once (see _mark_done).
        self._done_statements: dict[StoreClaimDialect, sa.Update] = {}

    @contextmanager
    @on_engine
    def transaction(self, engine: sa.Engine) -> Iterator[tuple[Connection, StoreClaimDialect]]:
        """A short store transaction on ``engine``: its isolation level, its write lock.

        :raises MissingTable: if the store table (or a column) does not exist.
        """
        with self.leased_rows.transaction(engine) as (conn, dialect):
            yield conn, dialect
