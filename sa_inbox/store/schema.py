"""The inbox-store table: its columns, types, states and indexes.

Time: every timestamp is Python's UTC clock at the worker or receiver, passed as a
parameter, never the database's ``CURRENT_TIMESTAMP``. One rule then holds on every backend:
SQLite's ``CURRENT_TIMESTAMP`` has whole seconds only, and MySQL/MariaDB ``DATETIME`` has no
time zone (``CURRENT_TIMESTAMP`` follows the session's ``time_zone``). Values are stored as
UTC (``timestamptz`` on PostgreSQL; naive UTC with microseconds elsewhere, see
:class:`UTCDateTime`). The hosts' clocks must agree to well within the visibility timeout.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, oracle
from sqlalchemy.engine import Dialect

from ..checks import check_metadata
from ..exc import InvalidArgument, InvalidTable
from ..schema import DEFAULT_MESSAGE_ID_LENGTH, INSERT_COLUMNS_INFO, identity_column, key_type
from ..validation import positive_int

__all__ = [
    "DEAD",
    "DEFAULT_CONSUMER",
    "DEFAULT_STORE_TABLE",
    "DONE",
    "MAX_ERROR_LENGTH",
    "PAYLOAD",
    "PENDING",
    "PROCESSING",
    "REAP_BATCH",
    "RECEIVE_COLUMNS",
    "STATUSES",
    "JSONText",
    "SerialisedJSON",
    "UTCDateTime",
    "inbox_store_table",
    "lease_columns",
    "utc_now",
]

DEFAULT_STORE_TABLE = "inbox_store"
DEFAULT_CONSUMER = "default"
PENDING, PROCESSING, DONE, DEAD = "pending", "processing", "done", "dead"
STATUSES = (PENDING, PROCESSING, DONE, DEAD)
#: Rows of each kind one :meth:`~sa_inbox.store.InboxStore.reap` call moves, at most.
REAP_BATCH = 1000
#: ``last_error`` keeps at most this many characters of the error text.
MAX_ERROR_LENGTH = 2000
#: Columns a receive writes; ``message_id`` and ``consumer_name`` first (Oracle's MERGE).
RECEIVE_COLUMNS = (
    "message_id",
    "consumer_name",
    "aggregate_id",
    "message_type",
    "payload",
    "status",
    "received_at",
    "available_at",
    "attempts",
)


def utc_now() -> datetime.datetime:
    """The current time, time-zone aware, in UTC."""
    return datetime.datetime.now(datetime.UTC)


class UTCDateTime(sa.TypeDecorator[datetime.datetime]):
    """A UTC timestamp with microseconds on every backend; aware ``datetime`` in and out.

    PostgreSQL: ``TIMESTAMP WITH TIME ZONE``. MySQL/MariaDB: ``DATETIME(6)`` (plain
    ``DATETIME`` has whole seconds; MySQL manual, "Fractional Seconds in Time Values").
    Oracle: ``TIMESTAMP``. SQLite: SQLAlchemy's ``DATETIME`` text. Everywhere but PostgreSQL
    the value is written as naive UTC, since those drivers drop the zone; a naive value read
    back is UTC.

    :raises InvalidArgument: when binding a naive ``datetime``.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        if dialect.name == "oracle":
            return dialect.type_descriptor(oracle.TIMESTAMP())
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(
        self, value: datetime.datetime | None, dialect: Dialect
    ) -> datetime.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise InvalidArgument(f"timestamps must be time-zone aware, not {value!r}")
        if value.tzinfo is not datetime.UTC:  # the store's own times are UTC already
            value = value.astimezone(datetime.UTC)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=datetime.UTC)  # type: ignore[no-any-return]
        return value.astimezone(datetime.UTC)  # type: ignore[no-any-return]


class SerialisedJSON(str):
    """A JSON document already serialised to text (by the receive, once): bound as it is,
    never serialised again (see :func:`sa_inbox.store.receive.receive_insert`)."""

    __slots__ = ()


class JSONText(sa.TypeDecorator[Any]):
    """JSON kept as text in a ``CLOB``: the payload's type on Oracle (any version).

    A :class:`SerialisedJSON` is bound as it is; any other value is serialised.
    """

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str:
        if isinstance(value, SerialisedJSON):
            return str(value)
        return json.dumps(value, allow_nan=False)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


#: ``JSON`` on PostgreSQL, MySQL/MariaDB and SQLite; JSON text in a ``CLOB`` on Oracle.
PAYLOAD = sa.JSON().with_variant(JSONText(), "oracle")


def lease_columns(arrived: str, finished: str) -> list[sa.Column[Any]]:
    """The columns of a leased row's state, in table order: ``status`` (``pending`` by
    default), ``arrived`` (the arrival time's name), ``available_at``, ``claimed_at``,
    ``claimed_by``, ``attempts``, ``last_error`` and ``finished`` (the end time's name)."""
    return [
        sa.Column("status", sa.String(16), nullable=False, server_default=PENDING),
        sa.Column(arrived, UTCDateTime(), nullable=False),
        sa.Column("available_at", UTCDateTime(), nullable=False),
        sa.Column("claimed_at", UTCDateTime(), nullable=True),
        sa.Column("claimed_by", sa.String(255), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(finished, UTCDateTime(), nullable=True),
    ]


def inbox_store_table(
    metadata: sa.MetaData,
    *,
    table_name: str = DEFAULT_STORE_TABLE,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> sa.Table:
    """Define the inbox-store table on ``metadata`` and return it.

    Columns: ``id`` (bigint identity, the primary key), ``consumer_name`` and
    ``message_id`` (``VARCHAR(message_id_length)``, byte-compared; together unique as
    ``uq_<table>_message``, the deduplication key), ``aggregate_id`` (up to 255 characters,
    for per-aggregate ordering), ``message_type``, ``payload`` (JSON), ``status`` (one of
    :data:`STATUSES`, checked by ``ck_<table>_status``), ``received_at``, ``available_at``
    (not leasable before: the retry back-off), ``claimed_at``, ``claimed_by`` (the lease
    token), ``attempts`` (counted at lease time), ``last_error`` and ``processed_at``.

    Indexes, named the same on every backend: ``ix_<table>_claim`` (consumer_name, status,
    received_at, id) serves the lease's scan in arrival order; ``ix_<table>_aggregate``
    (consumer_name, aggregate_id, status) the per-aggregate ordering check;
    ``ix_<table>_purge`` (status, processed_at) a purge of old ``done`` rows.

    :param metadata: the caller's MetaData (``create_all`` and Alembic see the table).
    :param table_name: the table's name.
    :param schema: the schema, or ``None``.
    :param message_id_length: length in characters of ``message_id`` and ``consumer_name``.
    :raises InvalidTable: if ``message_id_length`` is not a positive int, ``table_name``
        is empty, or the MetaData already holds that table.
    """
    check_metadata(metadata, entry="the inbox store table", table_name=table_name, schema=schema)
    positive_int(message_id_length, "message_id_length", InvalidTable)
    statuses = ", ".join(f"'{status}'" for status in STATUSES)
    return sa.Table(
        table_name,
        metadata,
        identity_column(),
        sa.Column("consumer_name", key_type(message_id_length), nullable=False),
        sa.Column("message_id", key_type(message_id_length), nullable=False),
        sa.Column("aggregate_id", key_type(255), nullable=True),
        sa.Column("message_type", sa.String(255), nullable=True),
        sa.Column("payload", PAYLOAD, nullable=False),
        *lease_columns("received_at", "processed_at"),
        sa.UniqueConstraint("message_id", "consumer_name", name=f"uq_{table_name}_message"),
        sa.CheckConstraint(f"status IN ({statuses})", name=f"ck_{table_name}_status"),
        sa.Index(f"ix_{table_name}_claim", "consumer_name", "status", "received_at", "id"),
        sa.Index(f"ix_{table_name}_aggregate", "consumer_name", "aggregate_id", "status"),
        sa.Index(f"ix_{table_name}_purge", "status", "processed_at"),
        schema=schema,
        comment="sa-inbox: stored messages, processed later by workers",
        info={
            INSERT_COLUMNS_INFO: list(RECEIVE_COLUMNS),
            # Marks the table for Alembic autogenerate (sa_inbox.alembic): kind + options.
            "sa_inbox": {"kind": "store", "options": {"message_id_length": message_id_length}},
        },
    )
