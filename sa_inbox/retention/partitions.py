"""PostgreSQL time partitions of the processed-messages table, keyed by the message's own time.

The primary key becomes ``(message_id, consumer_name, <partition key>)`` (PostgreSQL
manual, 5.11.2.3 "Limitations": unique constraints must include all partition key columns),
so a redelivery is rejected only if it carries the same partition key value: a key from the
message itself (the producer's event time) is safe, one from arrival time is refused by
:func:`check_partition_key`. :func:`maintain_partitions` (``sa-inbox partitions maintain``)
creates partitions ahead and drops those wholly older than the
:class:`~sa_inbox.retention.RetentionPolicy` window.

.. seealso:: ``docs/discussions/retention.md``, "Time partitions and deduplication".
"""

from __future__ import annotations

import contextlib
import datetime
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from ..checks import check_metadata, require_bind, require_table
from ..claim import Bind, Inbox
from ..exc import (
    InvalidArgument,
    InvalidMessageId,
    InvalidTable,
    UnsafePartitionKey,
    UnsupportedBackend,
)
from ..schema import (
    DEFAULT_MESSAGE_ID_LENGTH,
    DEFAULT_TABLE_NAME,
    RECEIVED_AT,
    RECEIVED_NOW,
    TIMESTAMP_TZ,
    key_type,
)
from .policy import RetentionPolicy
from .purge import database_now

__all__ = [
    "DEFAULT_AHEAD",
    "DEFAULT_INTERVAL",
    "DEFAULT_PARTITION_KEY",
    "MaintenanceResult",
    "Partition",
    "PartitionedInbox",
    "check_partition_key",
    "check_partition_key_on_server",
    "create_partition",
    "drop_expired_partitions",
    "ensure_partitions",
    "list_partitions",
    "maintain_partitions",
    "partition_key_definition",
    "partition_range",
    "partitioned_processed_messages_table",
]

DEFAULT_PARTITION_KEY = "event_time"
#: Width of one partition.
DEFAULT_INTERVAL = datetime.timedelta(days=1)
#: How far ahead of now partitions exist.
DEFAULT_AHEAD = datetime.timedelta(days=7)
#: Partition ranges are aligned on multiples of the interval since this instant.
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: Column names that are arrival times by their meaning, whatever their default.
ARRIVAL_COLUMNS = frozenset({"received_at"})

_RANGE_KEY = re.compile(r"^\s*RANGE\s*\(\s*\"?([A-Za-z_][A-Za-z0-9_$]*)\"?\s*\)\s*$", re.I)
_BOUND = re.compile(r"FOR VALUES FROM \('([^']+)'\) TO \('([^']+)'\)")


# -- the table and its checks ---------------------------------------------------------------


def partitioned_processed_messages_table(
    metadata: sa.MetaData,
    *,
    partition_key: str = DEFAULT_PARTITION_KEY,
    table_name: str = DEFAULT_TABLE_NAME,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> sa.Table:
    """Define a processed-messages table partitioned by ``RANGE (partition_key)``.

    The columns of :func:`sa_inbox.processed_messages_table` plus ``partition_key``
    (timestamp with time zone, NOT NULL, no default: the claim must give the message's own
    time), and the primary key ``(message_id, consumer_name, partition_key)``. Create it
    with ``metadata.create_all()`` (PostgreSQL 11+), then :func:`ensure_partitions`.

    :param metadata: the caller's MetaData.
    :param partition_key: the column holding the message's own time (default
        ``event_time``).
    :param table_name: the table's name.
    :param schema: the schema, or ``None``.
    :param message_id_length: length of ``message_id`` and ``consumer_name``.
    :raises UnsafePartitionKey: if ``partition_key`` is an arrival time (``received_at``).
    :raises InvalidTableType: if ``metadata`` is not a MetaData (a declarative base).
    :raises InvalidTable: if ``table_name`` is empty, or the MetaData already holds that
        table.
    """
    check_metadata(
        metadata,
        entry="partitioned_processed_messages_table()",
        table_name=table_name,
        schema=schema,
    )
    if partition_key in ARRIVAL_COLUMNS:
        raise UnsafePartitionKey(
            f"partition key {partition_key!r} is the arrival time: a redelivery would land "
            "in a new partition and be processed twice; partition by the message's own time"
        )
    table = sa.Table(
        table_name,
        metadata,
        sa.Column("message_id", key_type(message_id_length), nullable=False),
        sa.Column("consumer_name", key_type(message_id_length), nullable=False),
        sa.Column(partition_key, TIMESTAMP_TZ, nullable=False),
        sa.Column("received_at", RECEIVED_AT, nullable=False, server_default=RECEIVED_NOW),
        sa.Column("message_type", sa.String(255), nullable=True),
        sa.Column("correlation_id", sa.String(255), nullable=True),
        sa.Column("payload_hash", sa.LargeBinary(64), nullable=True),
        sa.PrimaryKeyConstraint(
            "message_id", "consumer_name", partition_key, name=f"pk_{table_name}"
        ),
        sa.Index(f"ix_{table_name}_received_at", "received_at"),
        schema=schema,
        postgresql_partition_by=f"RANGE ({partition_key})",
        comment="sa-inbox: processed messages, partitioned by the message's own time",
        # Marks the table for Alembic autogenerate (sa_inbox.alembic): kind + factory options.
        info={
            "sa_inbox": {
                "kind": "partitioned_processed_messages",
                "options": {"message_id_length": message_id_length, "partition_key": partition_key},
            }
        },
    )
    check_partition_key(table)
    return table


def _unsafe(table: str, key: str, why: str) -> UnsafePartitionKey:
    return UnsafePartitionKey(
        f"table {table!r} is partitioned by {key!r}, {why}: a redelivery would get another "
        "partition key value, miss the primary key and be processed twice; partition by the "
        "message's own time (e.g. the producer's event time), given with every claim"
    )


def _check_key_column(
    table: str, key: str, *, has_default: bool, nullable: bool, primary_key: list[str]
) -> None:
    if key in ARRIVAL_COLUMNS:
        raise _unsafe(table, key, "the arrival time")
    if has_default:
        raise _unsafe(table, key, "a column with a default (filled in at arrival)")
    if nullable:
        raise _unsafe(table, key, "a nullable column")
    missing = {"message_id", "consumer_name", key} - set(primary_key)
    if missing:
        raise UnsafePartitionKey(
            f"table {table!r} needs the primary key (message_id, consumer_name, {key}); "
            f"it lacks {sorted(missing)}"
        )


def check_partition_key(table: sa.Table) -> sa.Column[Any]:
    """Refuse a partitioned processed-messages table whose key breaks deduplication.

    :param table: a Table with ``postgresql_partition_by``.
    :returns: the partition key column.
    :raises UnsafePartitionKey: unless the table is partitioned by ``RANGE`` on one plain
        column that is not an arrival time (``received_at``), has no default (server or
        Python, including ``onupdate``), is NOT NULL, and is in the primary key with
        ``message_id`` and ``consumer_name``.
    :raises InvalidTableType: if ``table`` is not a Table.
    """
    table = require_table(table, entry="check_partition_key()")
    spec = table.dialect_options["postgresql"]["partition_by"]
    match = _RANGE_KEY.match(spec or "")
    if match is None or match.group(1) not in table.c:
        raise UnsafePartitionKey(
            f"table {table.name!r} must be partitioned by RANGE on one column of the "
            f"message's own time, not {spec!r}"
        )
    column = table.c[match.group(1)]
    defaults = (column.default, column.server_default, column.onupdate, column.server_onupdate)
    _check_key_column(
        table.name,
        column.name,
        has_default=any(d is not None for d in defaults),
        nullable=bool(column.nullable),
        primary_key=[c.name for c in table.primary_key.columns],
    )
    return column


def _checked(bind: object, table: object, entry: str, kinds: tuple[type, ...]) -> Any:
    """``bind``, refused before any SQL if it is not one of ``kinds``, or ``table`` not a
    Table (:func:`sa_inbox.checks.require_bind`, :func:`~sa_inbox.checks.require_table`)."""
    require_table(table, entry=entry)
    return require_bind(
        bind,
        kinds,
        "bind",
        entry=entry,
        instead="partition maintenance runs on a synchronous Engine or Connection "
        "(AsyncEngine.sync_engine is one)",
    )


def _regclass(conn: Connection, table: sa.Table) -> str:
    return conn.dialect.identifier_preparer.format_table(table)


def partition_key_definition(conn: Connection, table: sa.Table) -> str | None:
    """The table's partition key as PostgreSQL prints it (``"RANGE (event_time)"``), or
    ``None`` if the table is not partitioned (it has no row in the ``pg_partitioned_table``
    catalog: PostgreSQL manual, "System Catalogs", and "Table Partitioning").

    :raises UnsupportedBackend: if ``conn`` is not PostgreSQL.
    :raises SyncAsyncMismatch, InvalidBind: for a ``conn`` that is not a Connection.
    """
    _checked(conn, table, "partition_key_definition()", (Connection,))
    if conn.dialect.name != "postgresql":
        raise UnsupportedBackend("time partitions are a PostgreSQL feature")
    spec = conn.execute(
        sa.text(
            "SELECT pg_get_partkeydef(p.partrelid) FROM pg_partitioned_table p "
            "WHERE p.partrelid = to_regclass(:name)"
        ),
        {"name": _regclass(conn, table)},
    ).scalar()
    return None if spec is None else str(spec)


def check_partition_key_on_server(conn: Connection, table: sa.Table) -> str:
    """:func:`check_partition_key` for the table as it exists on the server (the catalog).

    Reads the partition key (``pg_get_partkeydef``), the key column's default
    (``pg_attrdef``) and NOT NULL flag, and the primary key.

    :returns: the partition key column's name.
    :raises UnsupportedBackend: if ``conn`` is not PostgreSQL.
    :raises UnsafePartitionKey: if the table is not partitioned, or not range-partitioned on
        one safe column.
    :raises SyncAsyncMismatch, InvalidBind: for a ``conn`` that is not a Connection.
    """
    _checked(conn, table, "check_partition_key_on_server()", (Connection,))
    name = _regclass(conn, table)
    spec = partition_key_definition(conn, table)
    if spec is None:
        raise UnsafePartitionKey(
            f"table {name} is not partitioned: create it with "
            "partitioned_processed_messages_table() (PARTITION BY RANGE on the message's own "
            "time)"
        )
    match = _RANGE_KEY.match(spec)
    if match is None:
        raise UnsafePartitionKey(
            f"table {name} must be partitioned by RANGE on one column of the message's own "
            f"time, not {spec!r}"
        )
    key = match.group(1)
    row = conn.execute(
        sa.text(
            "SELECT a.attnotnull, a.atthasdef FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(:name) AND a.attname = :key"
        ),
        {"name": name, "key": key},
    ).one()
    primary_key = conn.execute(
        sa.text(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY (i.indkey) WHERE i.indrelid = to_regclass(:name) "
            "AND i.indisprimary"
        ),
        {"name": name},
    ).scalars()
    _check_key_column(
        name, key, has_default=bool(row[1]), nullable=not row[0], primary_key=list(primary_key)
    )
    return key


# -- claims -----------------------------------------------------------------------------------


class PartitionedInbox:
    """Claims on a partitioned processed-messages table: each claim gives the message's time.

    ``INSERT … ON CONFLICT (message_id, consumer_name, <key>) DO NOTHING``, in the caller's
    transaction, as :meth:`sa_inbox.Inbox.claim`.

    :param table: from :func:`partitioned_processed_messages_table` (checked again here).
    :raises UnsafePartitionKey: as :func:`check_partition_key`.
    :raises InvalidTableType: if ``table`` is not a Table (an Inbox: pass a partitioned
        table).

    Example::

        inbox = PartitionedInbox(partitioned_processed_messages_table(Base.metadata))
        with Session.begin() as session:
            if inbox.claim(session, msg.id, "billing", event_time=msg.timestamp):
                apply_payment(session, msg)
    """

    def __init__(self, table: sa.Table) -> None:
        self.table = require_table(table, entry="PartitionedInbox()")
        self.key = check_partition_key(table)
        # The Inbox over the same table supplies the claim's shared path: validation, the
        # bind's connection (AUTOCOMMIT refused, a Session's bind chosen by this table) and
        # the once-per-engine backend checks. Only the statement differs: its conflict
        # target includes the partition key.
        self._inbox = Inbox(table=table)
        self._statement = postgresql.insert(table).on_conflict_do_nothing(
            index_elements=list(table.primary_key.columns)
        )

    def claim(
        self,
        bind: Bind,
        message_id: str,
        consumer_name: str,
        *,
        event_time: datetime.datetime,
    ) -> bool:
        """Claim ``message_id`` for ``consumer_name``; True if new, False for a duplicate.

        Runs as :meth:`sa_inbox.Inbox.claim` does, on the same connection handling.

        :param bind: a Session, scoped_session or Connection in the caller's transaction
            (never committed). A Session's bind is the one for :attr:`table` (its
            ``binds``, or ``get_bind()``).
        :param event_time: the message's own time (aware), the same on every redelivery.
        :raises InvalidMessageId: for an invalid id or a naive/non-datetime ``event_time``,
            before any SQL.
        :raises AutocommitConnection: if ``bind`` is in AUTOCOMMIT mode (the claim would
            commit apart from the business change); nothing is sent.
        :raises UnsupportedBackend: if ``bind`` is not on PostgreSQL; nothing is sent.
        :raises InvalidBind: if ``bind`` is not a Session, scoped_session or Connection.
        :raises TransientClaimError: on a serialization failure or deadlock.
        :raises sqlalchemy.exc.IntegrityError: if no partition covers ``event_time``
            (SQLSTATE 23514): run :func:`ensure_partitions` ahead of time.
        """
        row = self._inbox.validate(message_id, consumer_name)
        row[self.key.name] = _aware_time(event_time)
        conn = self._inbox._connection(bind)
        if conn.dialect.name != "postgresql":
            raise UnsupportedBackend(
                f"time partitions are a PostgreSQL feature; this bind is {conn.dialect.name}"
            )
        dialect, _ = self._inbox._prepared(conn)
        return dialect.claim_one(conn, self.table, self._statement, row)


def _aware_time(value: object) -> datetime.datetime:
    if not isinstance(value, datetime.datetime) or value.utcoffset() is None:
        raise InvalidMessageId(f"event_time must be a timezone-aware datetime, not {value!r}")
    return value


# -- partitions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    """One range partition: rows with ``lower <= key < upper``."""

    name: str
    lower: datetime.datetime
    upper: datetime.datetime


@dataclass(frozen=True)
class MaintenanceResult:
    """Partition names created and dropped by :func:`maintain_partitions`."""

    created: list[str]
    dropped: list[str]


def partition_range(
    moment: datetime.datetime, interval: datetime.timedelta
) -> tuple[datetime.datetime, datetime.datetime]:
    """The ``[lower, upper)`` range of width ``interval`` holding ``moment``, aligned on
    multiples of ``interval`` since 1970-01-01 UTC (UTC midnights for one day)."""
    _check_interval(interval)
    lower = EPOCH + ((moment - EPOCH) // interval) * interval
    return lower, lower + interval


def _check_schedule(policy: object, interval: object, ahead: object) -> None:
    """Refuse a policy, interval or look-ahead :func:`ensure_partitions` cannot use.

    :raises InvalidArgument: then, before any SQL.
    """
    if not isinstance(policy, RetentionPolicy):
        raise InvalidArgument(f"policy must be a RetentionPolicy, not {type(policy).__name__}")
    _check_interval(interval)
    if not isinstance(ahead, datetime.timedelta) or ahead < datetime.timedelta(0):
        raise InvalidArgument(f"ahead must be a timedelta of zero or more, not {ahead!r}")


def _check_interval(interval: object) -> None:
    if not isinstance(interval, datetime.timedelta) or interval < datetime.timedelta(minutes=1):
        raise InvalidArgument(
            f"interval must be a timedelta of at least one minute, not {interval!r}"
        )


def _partition_name(table: sa.Table, lower: datetime.datetime, interval: datetime.timedelta) -> str:
    stamp = (
        "%Y%m%d"
        if interval % datetime.timedelta(days=1) == datetime.timedelta(0)
        else "%Y%m%d_%H%M"
    )
    name = f"{table.name}_p{lower.astimezone(datetime.UTC).strftime(stamp)}"
    if len(name) > 63:  # PostgreSQL's NAMEDATALEN - 1
        raise InvalidTable(f"partition name {name!r} is over 63 characters: shorten the table name")
    return name


def list_partitions(conn: Connection, table: sa.Table) -> list[Partition]:
    """The range partitions of ``table``, oldest first (a DEFAULT partition is left out).

    :raises SyncAsyncMismatch, InvalidBind: for a ``conn`` that is not a Connection.
    """
    _checked(conn, table, "list_partitions()", (Connection,))
    rows = conn.execute(
        sa.text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:name)"
        ),
        {"name": _regclass(conn, table)},
    ).all()
    partitions = []
    for name, bound in rows:
        match = _BOUND.search(bound or "")
        if match is None:
            continue  # DEFAULT, MINVALUE or MAXVALUE bounds: never created or dropped here
        lower, upper = (datetime.datetime.fromisoformat(value) for value in match.groups())
        partitions.append(Partition(str(name), lower, upper))
    return sorted(partitions, key=lambda p: p.lower)


def create_partition(
    conn: Connection,
    table: sa.Table,
    lower: datetime.datetime,
    interval: datetime.timedelta = DEFAULT_INTERVAL,
) -> str:
    """``CREATE TABLE IF NOT EXISTS <table>_p<date> PARTITION OF <table> FOR VALUES FROM
    (lower) TO (lower + interval)`` in the caller's transaction; returns the name.

    :param lower: the range's start, aligned (see :func:`partition_range`).
    :raises InvalidArgument: if ``lower`` is not aligned on ``interval``, or
        ``interval`` is shorter than one minute.
    :raises InvalidTable: if the partition's name would be over 63 characters.
    :raises SyncAsyncMismatch, InvalidBind: for a ``conn`` that is not a Connection.
    """
    require_table(table, entry="create_partition()")
    if partition_range(lower, interval)[0] != lower:
        raise InvalidArgument(f"{lower} is not aligned on {interval}")
    name = _partition_name(table, lower, interval)
    _checked(conn, table, "create_partition()", (Connection,))
    preparer = conn.dialect.identifier_preparer
    qualified = preparer.quote(name)
    if table.schema:
        qualified = f"{preparer.quote_schema(table.schema)}.{qualified}"
    upper = lower + interval
    conn.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {qualified} PARTITION OF {_regclass(conn, table)} "
        f"FOR VALUES FROM ('{lower.isoformat()}') TO ('{upper.isoformat()}')"
    )
    return name


@contextlib.contextmanager
def _maintenance(bind: sa.Engine | Connection, table: sa.Table) -> Iterator[Connection]:
    """One transaction holding the table's maintenance lock, the partition key checked.

    ``pg_advisory_xact_lock`` on a hash of the table's name (PostgreSQL manual, 9.27.10
    "Advisory Lock Functions"): two maintainers run one after the other instead of racing
    on the same ``CREATE TABLE``; claims and purges never take this lock.
    """
    with contextlib.ExitStack() as stack:
        if isinstance(bind, sa.Engine):
            conn = stack.enter_context(bind.begin())
        else:
            conn = bind
            stack.enter_context(bind.begin())
        # The lock's name keeps the module's former path: maintainers of two releases
        # running side by side must still take the same lock.
        conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:name, 0))"),
            {"name": f"sa_inbox.partitions.{_regclass(conn, table)}"},
        )
        check_partition_key_on_server(conn, table)
        yield conn


def ensure_partitions(
    bind: sa.Engine | Connection,
    table: sa.Table,
    *,
    policy: RetentionPolicy,
    interval: datetime.timedelta = DEFAULT_INTERVAL,
    ahead: datetime.timedelta = DEFAULT_AHEAD,
) -> list[str]:
    """Create the partitions covering the retention window and ``ahead`` of now.

    From the partition holding ``now - policy.window`` (a redelivery or replay may carry
    any time inside the window) to the one holding ``now + ahead``, now being the database
    clock; existing partitions are kept. One transaction.

    :returns: the names of the partitions created.
    :raises UnsafePartitionKey: if the live table's partition key is unsafe (nothing is
        created).
    :raises SyncAsyncMismatch, InvalidBind: for a ``bind`` that is neither an Engine nor a
        Connection (an AsyncEngine: pass its ``sync_engine``), before any SQL.
    :raises InvalidArgument: for a ``policy`` that is no RetentionPolicy, an ``interval``
        under one minute or a negative ``ahead``, before any SQL.
    """
    _checked(bind, table, "ensure_partitions()", (sa.Engine, Connection))
    _check_schedule(policy, interval, ahead)
    with _maintenance(bind, table) as conn:
        now = database_now(conn)
        existing = {p.name for p in list_partitions(conn, table)}
        lower, _ = partition_range(now - policy.window, interval)
        created = []
        while lower <= now + ahead:
            name = create_partition(conn, table, lower, interval)
            if name not in existing:
                created.append(name)
            lower += interval
        return created


def drop_expired_partitions(
    bind: sa.Engine | Connection, table: sa.Table, *, policy: RetentionPolicy
) -> list[str]:
    """Drop the partitions whose whole range is older than the retention window.

    A partition goes only if its upper bound is at or before ``now - policy.window`` (the
    database clock): every key in it is outside the window, so no message in it can be
    redelivered. A partition overlapping the window is never dropped.

    Given an Engine, **one transaction per partition**: ``DROP TABLE`` of a partition takes
    an ``ACCESS EXCLUSIVE`` lock on the partitioned table as well (PostgreSQL manual,
    5.11.2.2 "Partition Maintenance", and 13.3.1 "Table-Level Locks"), held to the commit,
    and every claim waits behind it. Given a Connection, one transaction on it drops them
    all.

    .. seealso:: ``docs/discussions/retention.md``, "Dropping partitions one at a time".

    :param bind: an Engine, or a Connection with no transaction begun.
    :param table: the partitioned inbox table.
    :param policy: the retention window.
    :returns: the names of the partitions dropped, oldest first.
    :raises UnsafePartitionKey: if the live table's partition key is unsafe (nothing is
        dropped).
    :raises SyncAsyncMismatch, InvalidBind: as :func:`ensure_partitions`.
    """
    _checked(bind, table, "drop_expired_partitions()", (sa.Engine, Connection))
    if isinstance(bind, Connection):
        with _maintenance(bind, table) as conn:
            return _drop_expired(conn, table, policy, limit=None)
    dropped: list[str] = []
    while True:
        with _maintenance(bind, table) as conn:
            names = _drop_expired(conn, table, policy, limit=1)
        if not names:
            return dropped
        dropped += names


def _drop_expired(
    conn: Connection, table: sa.Table, policy: RetentionPolicy, *, limit: int | None
) -> list[str]:
    """Drop up to ``limit`` expired partitions (all with None), oldest first."""
    cutoff = database_now(conn) - policy.window
    preparer = conn.dialect.identifier_preparer
    expired = sorted(
        (p for p in list_partitions(conn, table) if p.upper <= cutoff), key=lambda p: p.upper
    )
    dropped = []
    for partition in expired[:limit]:
        qualified = preparer.quote(partition.name)
        if table.schema:
            qualified = f"{preparer.quote_schema(table.schema)}.{qualified}"
        conn.exec_driver_sql(f"DROP TABLE {qualified}")
        dropped.append(partition.name)
    return dropped


def maintain_partitions(
    bind: sa.Engine | Connection,
    table: sa.Table,
    *,
    policy: RetentionPolicy,
    interval: datetime.timedelta = DEFAULT_INTERVAL,
    ahead: datetime.timedelta = DEFAULT_AHEAD,
) -> MaintenanceResult:
    """:func:`ensure_partitions` then :func:`drop_expired_partitions`: run it daily.

    :raises SyncAsyncMismatch, InvalidBind, InvalidArgument: as :func:`ensure_partitions`.
    """
    _checked(bind, table, "maintain_partitions()", (sa.Engine, Connection))
    created = ensure_partitions(bind, table, policy=policy, interval=interval, ahead=ahead)
    dropped = drop_expired_partitions(bind, table, policy=policy)
    return MaintenanceResult(created=created, dropped=dropped)
