"""What the inbox is doing, read from the database: ``sa-inbox stats`` and the sampled gauges.

:func:`collect` reads, in one connection and a few aggregate queries (never on the hot
path):

* the processed-messages table: rows, oldest and newest ``received_at`` per consumer;
* the collisions table (:mod:`sa_inbox.collision`), if it exists: collisions per consumer;
* the inbox store, if named: rows by status per consumer, the age of the oldest pending row,
  a histogram of attempts over unfinished rows, the dead letters with their last errors;
* the outbox (:mod:`sa_inbox.outbox`), if it exists: rows by status per destination and the
  age of the oldest pending row (a relay that is down, or cannot reach its broker, leaves
  rows pending: no attempt is counted while the broker is unreachable);
* each of those tables' growth: rows arrived per day over the last :data:`GROWTH_DAYS` days,
  per consumer or destination (:class:`DailyGrowth`);
* each table's size: PostgreSQL ``pg_relation_size`` / ``pg_indexes_size`` (manual 9.27.7,
  "Database Object Management Functions"); MySQL/MariaDB ``information_schema.TABLES``
  ``DATA_LENGTH`` / ``INDEX_LENGTH`` (InnoDB's estimates, refreshed by ``ANALYZE TABLE``;
  MySQL manual, "The INFORMATION_SCHEMA TABLES Table"); SQLite the ``dbstat`` virtual table
  (SQLite manual, "The DBSTAT Virtual Table"; None where it is not compiled in);
* on PostgreSQL, the server's replication (:func:`sa_inbox.replication.read_replication`):
  connected standbys and whether a COMMIT waits for one.

The broker's dead-letter queues / streams are not in the database: ``sa-inbox stats
--dead-letters URL/QUEUE`` counts them with :func:`sa_inbox.brokers.dead_letters.sample`
into :attr:`InboxStats.dead_letter_queues`, which :func:`stats_warnings` reads.

:func:`stats_warnings` turns a sample into the operator's warnings, each with its own code (the
exit status of ``sa-inbox stats --check``).
"""

from __future__ import annotations

import datetime
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .checks import require_bind
from .collision import COLLISIONS_TABLE
from .exc import InvalidArgument, InvalidTable
from .outbox.schema import DEFAULT_OUTBOX_TABLE
from .outbox.schema import STATUSES as OUTBOX_STATUSES
from .replication import (
    ReplicationState,
    read_replication,
    replication_unchecked,
    replication_warnings,
)
from .schema import DEFAULT_TABLE_NAME
from .store.schema import DEAD, DEFAULT_STORE_TABLE, PENDING, STATUSES, UTCDateTime

__all__ = [
    "DEAD_LETTERS_SHOWN",
    "GROWTH_DAYS",
    "WARNING_CODES",
    "ConsumerRename",
    "ConsumerStats",
    "DailyGrowth",
    "DeadLetter",
    "DeadLetterFilter",
    "DeadLetterQueueStats",
    "InboxStats",
    "OutboxDestinationStats",
    "OutboxStats",
    "Sampler",
    "StatsWarning",
    "StoreConsumerStats",
    "StoreStats",
    "TableStats",
    "WarningCode",
    "collect",
    "dead_letters",
    "stats_warnings",
]

#: Dead letters listed (the newest first); the count covers them all.
DEAD_LETTERS_SHOWN = 20
#: Days of :class:`DailyGrowth` per table.
GROWTH_DAYS = 7


@dataclass(frozen=True)
class TableStats:
    """One table: ``rows`` (an exact ``COUNT(*)``), and bytes (None where unknown)."""

    name: str
    rows: int
    data_bytes: int | None = None
    index_bytes: int | None = None

    @property
    def total_bytes(self) -> int | None:
        """Data plus indexes, in bytes."""
        if self.data_bytes is None:
            return None
        return self.data_bytes + (self.index_bytes or 0)


@dataclass(frozen=True)
class ConsumerStats:
    """One consumer's processed-message rows (``oldest``/``newest``: ``received_at``, as the
    database returns it) and the collisions recorded for it."""

    consumer_name: str
    rows: int
    oldest: datetime.datetime | None
    newest: datetime.datetime | None
    collisions: int = 0


@dataclass(frozen=True)
class ConsumerRename:
    """A consumer that looks renamed: ``old`` stopped claiming (its newest claim is older
    than ``new``'s oldest) and ``new`` claimed ``shared`` ids that ``old`` had claimed: each
    of them applied a second time."""

    old: str
    new: str
    shared: int


@dataclass(frozen=True)
class StoreConsumerStats:
    """One consumer's store rows: ``counts`` per status, the oldest pending row's age in
    seconds (None if none is pending)."""

    consumer_name: str
    counts: dict[str, int]
    oldest_pending_seconds: float | None


@dataclass(frozen=True)
class DeadLetter:
    """A ``dead`` row and its last error: a store row (``consumer_name`` its consumer) or an
    outbox row (``consumer_name`` its destination), ``arrived_at`` its ``received_at`` /
    ``created_at`` (aware, UTC)."""

    id: int
    message_id: str
    consumer_name: str
    attempts: int
    last_error: str | None
    arrived_at: datetime.datetime | None = None


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters :func:`dead_letters` lists: those matching every filter given.

    :param group: the consumer (store) or destination (outbox).
    :param error: a substring of ``last_error`` (the database's ``LIKE``, its wildcards
        escaped: case-insensitive under MySQL's default collations).
    :param arrived_from: arrived at or after this aware datetime.
    :param arrived_before: arrived before this aware datetime.
    :param below_id: only rows whose id is lower (the next page, newest first).
    """

    group: str | None = None
    error: str | None = None
    arrived_from: datetime.datetime | None = None
    arrived_before: datetime.datetime | None = None
    below_id: int | None = None


@dataclass(frozen=True)
class DailyGrowth:
    """Rows of ``table`` that arrived per day, per ``group`` (consumer or destination):
    ``rows[0]`` in the last 24 hours, ``rows[1]`` the 24 hours before, and so on for
    :data:`GROWTH_DAYS` days (by ``received_at`` / ``created_at``; rows purged meanwhile
    are not counted)."""

    table: str
    group: str
    rows: list[int]


@dataclass(frozen=True)
class StoreStats:
    """The inbox store: per consumer, ``attempts`` (attempts made -> unfinished rows, i.e.
    ``pending``/``processing``/``dead``), and the newest :data:`DEAD_LETTERS_SHOWN` dead
    letters."""

    table: str
    consumers: list[StoreConsumerStats]
    attempts: dict[int, int]
    dead_letters: list[DeadLetter]

    def total(self, status: str) -> int:
        """Rows of ``status`` over every consumer."""
        return sum(c.counts.get(status, 0) for c in self.consumers)


@dataclass(frozen=True)
class DeadLetterQueueStats:
    """A broker's dead-letter queue / stream: the dead letters it holds, or why it could not
    be read (then ``dead_letters`` is None).

    :param queue: ``<broker URL>/<queue>``, the password hidden.
    """

    queue: str
    dead_letters: int | None
    error: str | None = None


@dataclass(frozen=True)
class OutboxDestinationStats:
    """One destination's outbox rows: ``counts`` per status, the oldest pending row's age in
    seconds (None if none is pending)."""

    destination: str
    counts: dict[str, int]
    oldest_pending_seconds: float | None


@dataclass(frozen=True)
class OutboxStats:
    """The outbox: rows per destination."""

    table: str
    destinations: list[OutboxDestinationStats]

    def total(self, status: str) -> int:
        """Rows of ``status`` over every destination."""
        return sum(d.counts.get(status, 0) for d in self.destinations)

    def oldest_pending_seconds(self) -> float | None:
        """The oldest pending row's age over every destination, in seconds."""
        ages = [d.oldest_pending_seconds for d in self.destinations]
        return max((a for a in ages if a is not None), default=None)


@dataclass(frozen=True)
class InboxStats:
    """One sample of :func:`collect`; ``taken_at`` is the database's ``CURRENT_TIMESTAMP``
    (the ages are measured against it)."""

    backend: str
    taken_at: datetime.datetime
    tables: list[TableStats]
    consumers: list[ConsumerStats]
    collisions: int
    store: StoreStats | None = None
    missing: list[str] = field(default_factory=list)
    replication: ReplicationState | None = None
    outbox: OutboxStats | None = None
    renames: list[ConsumerRename] = field(default_factory=list)
    #: The broker's dead-letter queues / streams that were counted (``stats --dead-letters``).
    dead_letter_queues: list[DeadLetterQueueStats] = field(default_factory=list)
    #: Rows arrived per day, per table and consumer / destination.
    growth: list[DailyGrowth] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: datetimes as ISO 8601 strings, bytes per table included."""
        data = _jsonable(asdict(self))
        for table, raw in zip(data["tables"], self.tables, strict=True):
            table["total_bytes"] = raw.total_bytes
        return data  # type: ignore[no-any-return]

    def oldest_processed(self) -> datetime.datetime | None:
        """The oldest ``received_at`` of the processed-messages table."""
        dates = [c.oldest for c in self.consumers if c.oldest is not None]
        return min(dates) if dates else None


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def collect(
    engine: sa.Engine,
    *,
    inbox_table: str | None = DEFAULT_TABLE_NAME,
    store_table: str | None = DEFAULT_STORE_TABLE,
    schema: str | None = None,
    outbox_table: str | None = DEFAULT_OUTBOX_TABLE,
) -> InboxStats:
    """Read one sample of the inbox's tables (see the module docstring).

    A table that does not exist is listed in :attr:`InboxStats.missing` and skipped, except
    the collisions table and an outbox under its default name, which a service may not
    have.

    :param engine: the database.
    :param inbox_table: the processed-messages table's name (None: not read).
    :param store_table: the inbox store's table name (None: not read).
    :param schema: the tables' schema.
    :param outbox_table: the outbox table's name (None: not read).
    :raises InvalidTable: if the table named as the inbox's or the store's has no
        ``message_id`` column (the consumers table ``inbox_consumers``, say), before it is read.
    :raises sqlalchemy.exc.DBAPIError: if the database cannot be read (not wrapped).
    :raises SyncAsyncMismatch: for an AsyncEngine (pass its ``sync_engine``), and
        :class:`~sa_inbox.exc.InvalidBind` for anything but an Engine, before any SQL.
    """
    engine = _engine(engine, "collect()")
    inspector = sa.inspect(engine)
    names = {
        "inbox": inbox_table,
        "store": store_table,
        "collisions": COLLISIONS_TABLE,
        "outbox": outbox_table,
    }
    present = {
        role: name
        for role, name in names.items()
        if name is not None and inspector.has_table(name, schema=schema)
    }
    _check_claim_tables(inspector, present, schema)
    # optional: the collisions table, and the outbox under its default name (a service may
    # have none); an outbox the caller named is reported missing
    optional = {"collisions"} | ({"outbox"} if outbox_table == DEFAULT_OUTBOX_TABLE else set())
    missing = [
        name
        for role, name in names.items()
        if name and role not in present and role not in optional
    ]
    with engine.connect() as conn:
        now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
        collisions = _collisions(conn, present.get("collisions"), schema)
        consumers = _consumers(conn, present.get("inbox"), schema, collisions)
        renames = _renames(conn, present.get("inbox"), schema, consumers)
        store = _store(conn, present.get("store"), schema)
        outbox = _outbox(conn, present.get("outbox"), schema)
        tables = [_table(conn, name, schema) for name in present.values()]
        growth = _all_growth(conn, present, schema, now)
        replication = read_replication(conn)
    return InboxStats(
        backend=engine.dialect.name,
        taken_at=now,
        tables=tables,
        consumers=consumers,
        collisions=sum(collisions.values()),
        store=store,
        missing=missing,
        replication=replication,
        outbox=outbox,
        renames=renames,
        growth=growth,
    )


#: What each claim table of :func:`collect` is, for the message of a wrong one.
CLAIM_TABLES = {"inbox": "a processed-messages table", "store": "an inbox store table"}


def _engine(engine: object, entry: str) -> sa.Engine:
    checked: sa.Engine = require_bind(
        engine,
        (sa.Engine,),
        "engine",
        entry=entry,
        instead="the sample is read on a synchronous Engine (AsyncEngine.sync_engine is one)",
    )
    return checked


def _check_claim_tables(inspector: Any, present: dict[str, str], schema: str | None) -> None:
    """Refuse an inbox or store table that is not one: every claim table has ``message_id``
    (the consumers table, :mod:`sa_inbox.consumers`, has ``inbox_table`` and
    ``consumer_name`` instead, and would be read as an inbox without that check).

    :raises InvalidTable: for such a table.
    """
    for role, what in CLAIM_TABLES.items():
        name = present.get(role)
        if name is None:
            continue
        columns = {column["name"] for column in inspector.get_columns(name, schema=schema)}
        if "message_id" not in columns:
            known = " (sa-inbox's consumers table)" if {"inbox_table", "handler"} <= columns else ""
            raise InvalidTable(
                f"{name!r}{known} has no message_id column: it is not {what}; name the "
                f"{role} table sa-inbox claims in"
            )


class Sampler:
    """:func:`collect`, cached: the sampled gauges' source (Prometheus' :class:`InboxCollector
    <sa_inbox.hooks.prometheus.InboxCollector>`, OpenTelemetry's observable gauges).

    At most one :func:`collect` per ``min_interval`` seconds, whoever asks; thread-safe.

    :param engine: the database.
    :param inbox_table: the processed-messages table's name, or None.
    :param store_table: the inbox store's table name, or None.
    :param schema: the tables' schema.
    :param min_interval: seconds a sample is reused for.
    :raises SyncAsyncMismatch, InvalidBind: as :func:`collect`, when made.
    """

    def __init__(
        self,
        engine: sa.Engine,
        *,
        inbox_table: str | None = DEFAULT_TABLE_NAME,
        store_table: str | None = None,
        schema: str | None = None,
        min_interval: float = 15.0,
    ) -> None:
        self.engine = _engine(engine, "Sampler()")
        self.inbox_table = inbox_table
        self.store_table = store_table
        self.schema = schema
        self.min_interval = min_interval
        self._lock = threading.Lock()
        self._sample: tuple[float, InboxStats] | None = None

    def sample(self) -> InboxStats:
        """The latest sample, taken now if the cached one is older than ``min_interval``.

        :raises sqlalchemy.exc.DBAPIError: as :func:`collect`.
        """
        with self._lock:
            now = time.monotonic()
            if self._sample is None or now - self._sample[0] >= self.min_interval:
                stats = collect(
                    self.engine,
                    inbox_table=self.inbox_table,
                    store_table=self.store_table,
                    schema=self.schema,
                    outbox_table=None,
                )
                self._sample = (now, stats)
            return self._sample[1]


def _consumers(
    conn: Connection, name: str | None, schema: str | None, collisions: dict[str, int]
) -> list[ConsumerStats]:
    found: dict[str, ConsumerStats] = {}
    if name is not None:
        t = sa.table(
            name,
            sa.column("consumer_name", sa.String()),
            sa.column("received_at", sa.DateTime(timezone=True)),
            schema=schema,
        )
        query = sa.select(
            t.c.consumer_name,
            sa.func.count(),
            sa.func.min(t.c.received_at),
            sa.func.max(t.c.received_at),
        ).group_by(t.c.consumer_name)
        for consumer, rows, oldest, newest in conn.execute(query):
            found[consumer] = ConsumerStats(consumer, int(rows), oldest, newest)
    for consumer, count in collisions.items():
        base = found.get(consumer) or ConsumerStats(consumer, 0, None, None)
        found[consumer] = ConsumerStats(
            base.consumer_name, base.rows, base.oldest, base.newest, count
        )
    return [found[key] for key in sorted(found)]


def _renames(
    conn: Connection, name: str | None, schema: str | None, consumers: list[ConsumerStats]
) -> list[ConsumerRename]:
    """The consumers that look renamed (see :class:`ConsumerRename`): for each pair where
    one stopped before the other started, the ids both claimed (one query per such pair)."""
    if name is None:
        return []
    t = sa.table(
        name,
        sa.column("message_id", sa.String()),
        sa.column("consumer_name", sa.String()),
        schema=schema,
    )
    earlier = t.alias("earlier")
    found = []
    for old in consumers:
        for new in consumers:
            if old.newest is None or new.oldest is None or not old.newest < new.oldest:
                continue
            shared = sa.exists().where(
                earlier.c.message_id == t.c.message_id,
                earlier.c.consumer_name == old.consumer_name,
            )
            count = sa.select(sa.func.count()).where(t.c.consumer_name == new.consumer_name, shared)
            claimed = int(conn.execute(count).scalar_one())
            if claimed:
                found.append(ConsumerRename(old.consumer_name, new.consumer_name, claimed))
    return found


def _collisions(conn: Connection, name: str | None, schema: str | None) -> dict[str, int]:
    if name is None:
        return {}
    t = sa.table(name, sa.column("consumer_name", sa.String()), schema=schema)
    query = sa.select(t.c.consumer_name, sa.func.count()).group_by(t.c.consumer_name)
    return {str(consumer): int(count) for consumer, count in conn.execute(query)}


def _store_clause(name: str, schema: str | None) -> sa.TableClause:
    """The store table's columns :func:`collect` and :func:`dead_letters` read."""
    return sa.table(
        name,
        sa.column("id", sa.BigInteger()),
        sa.column("message_id", sa.String()),
        sa.column("consumer_name", sa.String()),
        sa.column("status", sa.String()),
        sa.column("attempts", sa.Integer()),
        sa.column("last_error", sa.Text()),
        sa.column("received_at", UTCDateTime()),
        schema=schema,
    )


def _outbox_clause(name: str, schema: str | None) -> sa.TableClause:
    """The outbox table's columns :func:`collect` and :func:`dead_letters` read."""
    return sa.table(
        name,
        sa.column("id", sa.BigInteger()),
        sa.column("message_id", sa.String()),
        sa.column("destination", sa.String()),
        sa.column("status", sa.String()),
        sa.column("attempts", sa.Integer()),
        sa.column("last_error", sa.Text()),
        sa.column("created_at", UTCDateTime()),
        schema=schema,
    )


#: The kinds of table :func:`dead_letters` reads: (its table clause, the group column,
#: the arrival column).
DEAD_LETTER_TABLES = {
    "store": (_store_clause, "consumer_name", "received_at"),
    "outbox": (_outbox_clause, "destination", "created_at"),
}


def dead_letters(
    conn: Connection,
    kind: str,
    name: str,
    *,
    schema: str | None = None,
    chosen: DeadLetterFilter = DeadLetterFilter(),
    limit: int = DEAD_LETTERS_SHOWN,
) -> list[DeadLetter]:
    """The newest ``limit`` dead rows of the store or outbox table ``name`` that match
    ``chosen``, newest (highest id) first; every filter a bound parameter.

    :param conn: a connection to the table's database.
    :param kind: ``"store"`` or ``"outbox"``.
    :param name: the table's name.
    :param schema: its schema.
    :param chosen: the filters.
    :param limit: the most rows returned.
    :raises InvalidArgument: for an unknown ``kind``, or a naive filter time.
    :raises SyncAsyncMismatch: for an AsyncConnection or AsyncEngine, and
        :class:`~sa_inbox.exc.InvalidBind` for anything but a Connection (an Engine too),
        before any SQL.
    """
    conn = require_bind(
        conn,
        (Connection,),
        "conn",
        entry="sa_inbox.stats.dead_letters()",
        instead="the dead rows are read on a synchronous Connection (engine.connect())",
    )
    if kind not in DEAD_LETTER_TABLES:
        raise InvalidArgument(f"kind must be one of {', '.join(DEAD_LETTER_TABLES)}: {kind!r}")
    clause, group, arrived = DEAD_LETTER_TABLES[kind]
    t = clause(name, schema)
    c = t.c
    query = sa.select(c.id, c.message_id, c[group], c.attempts, c.last_error, c[arrived])
    query = query.where(c.status == DEAD)
    if chosen.group is not None:
        query = query.where(c[group] == chosen.group)
    if chosen.error:
        query = query.where(c.last_error.contains(chosen.error, autoescape=True))
    if chosen.arrived_from is not None:
        query = query.where(c[arrived] >= chosen.arrived_from)
    if chosen.arrived_before is not None:
        query = query.where(c[arrived] < chosen.arrived_before)
    if chosen.below_id is not None:
        query = query.where(c.id < chosen.below_id)
    query = query.order_by(c.id.desc()).limit(limit)
    return [
        DeadLetter(int(i), str(mid), str(g), int(a), e, at)
        for i, mid, g, a, e, at in conn.execute(query)
    ]


def _store(conn: Connection, name: str | None, schema: str | None) -> StoreStats | None:
    if name is None:
        return None
    t = _store_clause(name, schema)
    consumers = [
        StoreConsumerStats(*backlog)
        for backlog in _backlogs(conn, t, "consumer_name", "received_at", STATUSES)
    ]
    histogram = sa.select(t.c.attempts, sa.func.count()).where(t.c.status != "done")
    attempts = {
        int(made): int(count) for made, count in conn.execute(histogram.group_by(t.c.attempts))
    }
    letters = dead_letters(conn, "store", name, schema=schema)
    return StoreStats(name, consumers, attempts, letters)


def _outbox(conn: Connection, name: str | None, schema: str | None) -> OutboxStats | None:
    if name is None:
        return None
    t = _outbox_clause(name, schema)
    backlogs = _backlogs(conn, t, "destination", "created_at", OUTBOX_STATUSES)
    return OutboxStats(name, [OutboxDestinationStats(*backlog) for backlog in backlogs])


def _backlogs(
    conn: Connection, t: sa.TableClause, group: str, arrived: str, statuses: tuple[str, ...]
) -> list[tuple[str, dict[str, int], float | None]]:
    """Per value of column ``group`` of ``t`` (a consumer, a destination), in order: the
    rows per status (each of ``statuses``, 0 when none) and the oldest ``pending`` row's age
    in seconds (by column ``arrived``, on Python's UTC clock, the clock the rows are written
    with)."""
    c = t.c
    per_status = sa.select(c[group], c.status, sa.func.count(), sa.func.min(c[arrived]))
    per_status = per_status.group_by(c[group], c.status)
    counts: dict[str, dict[str, int]] = {}
    oldest: dict[str, datetime.datetime] = {}
    for name, state, count, first in conn.execute(per_status):
        counts.setdefault(name, dict.fromkeys(statuses, 0))[state] = int(count)
        if state == PENDING and first is not None:
            oldest[name] = first
    now = datetime.datetime.now(datetime.UTC)
    return [
        (name, counts[name], (now - oldest[name]).total_seconds() if name in oldest else None)
        for name in sorted(counts)
    ]


def _all_growth(
    conn: Connection, present: dict[str, str], schema: str | None, now: datetime.datetime
) -> list[DailyGrowth]:
    """:func:`_growth` of the processed-messages table (on the database's clock ``now``,
    the clock of its ``received_at`` default), the store and the outbox (on Python's UTC
    clock, the one their rows are written with)."""
    found = []
    utc = datetime.datetime.now(datetime.UTC)
    if "inbox" in present:
        t = sa.table(
            present["inbox"],
            sa.column("consumer_name", sa.String()),
            sa.column("received_at", sa.DateTime(timezone=True)),
            schema=schema,
        )
        found += _growth(conn, t, "consumer_name", "received_at", now)
    if "store" in present:
        t = _store_clause(present["store"], schema)
        found += _growth(conn, t, "consumer_name", "received_at", utc)
    if "outbox" in present:
        t = _outbox_clause(present["outbox"], schema)
        found += _growth(conn, t, "destination", "created_at", utc)
    return found


def _growth(
    conn: Connection, t: sa.TableClause, group: str, arrived: str, now: datetime.datetime
) -> list[DailyGrowth]:
    """Rows of ``t`` arrived in each of the :data:`GROWTH_DAYS` 24-hour windows before
    ``now`` (the first one open-ended), per value of column ``group``: one query, a
    ``SUM(CASE ...)`` per day over the rows since the first window's start (the day
    boundaries bound parameters)."""
    c = t.c
    edges = [now - datetime.timedelta(days=day) for day in range(GROWTH_DAYS + 1)]
    # the last window has no upper end: a row stamped in the very second of ``now`` (whole
    # seconds on MySQL's DATETIME) or ahead of it (clock skew) is today's
    windows = [c[arrived] >= edges[1]] + [
        sa.and_(c[arrived] >= edges[d + 1], c[arrived] < edges[d]) for d in range(1, GROWTH_DAYS)
    ]
    per_day = [sa.func.sum(sa.case((window, 1), else_=0)) for window in windows]
    query = sa.select(c[group], *per_day).where(c[arrived] >= edges[-1]).group_by(c[group])
    return [
        DailyGrowth(t.name, str(name), [int(n or 0) for n in days])
        for name, *days in sorted(conn.execute(query), key=lambda row: str(row[0]))
    ]


def _table(conn: Connection, name: str, schema: str | None) -> TableStats:
    t = sa.table(name, schema=schema)
    rows = int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one())
    data, index = _sizes(conn, name, schema)
    return TableStats(name, rows, data, index)


def _sizes(conn: Connection, name: str, schema: str | None) -> tuple[int | None, int | None]:
    """Data and index bytes from the backend's catalog (see the module docstring)."""
    backend = conn.dialect.name
    if backend == "postgresql":
        qualified = conn.dialect.identifier_preparer.format_table(sa.table(name, schema=schema))
        query = sa.text("SELECT pg_table_size(to_regclass(:n)), pg_indexes_size(to_regclass(:n))")
        data, index = conn.execute(query, {"n": qualified}).one()
        return _int(data), _int(index)
    if backend in ("mysql", "mariadb"):
        query = sa.text(
            "SELECT DATA_LENGTH, INDEX_LENGTH FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = COALESCE(:s, DATABASE()) AND TABLE_NAME = :n"
        )
        row = conn.execute(query, {"s": schema, "n": name}).first()
        return (None, None) if row is None else (_int(row[0]), _int(row[1]))
    if backend == "sqlite":
        try:
            data = conn.execute(
                sa.text("SELECT SUM(pgsize) FROM dbstat WHERE name = :n"), {"n": name}
            ).scalar()
            index = conn.execute(
                sa.text(
                    "SELECT SUM(pgsize) FROM dbstat WHERE name IN "
                    "(SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :n)"
                ),
                {"n": name},
            ).scalar()
        except sa.exc.OperationalError:  # no dbstat compiled in
            return None, None
        return _int(data), _int(index) or 0
    return None, None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


WarningCode = int


@dataclass(frozen=True)
class StatsWarning:
    """One warning of :func:`stats_warnings`: ``code`` is its exit status under ``--check``
    (several warnings: the lowest code wins, see ``sa-inbox stats``)."""

    code: WarningCode
    kind: str
    text: str


#: The exit status of each warning kind.
WARNING_CODES = {
    "purge-not-running": 10,
    "no-tables": 9,
    "dead-letters": 11,
    "worker-stuck": 12,
    "collisions": 13,
    "sync-standby-missing": 14,
    "async-standbys": 15,
    "replication-unchecked": 16,
    "outbox-dead": 17,
    "relay-stuck": 18,
    "renamed-consumer": 19,
    "broker-dead-letters": 20,
    "broker-dead-letters-unread": 21,
}


def stats_warnings(
    stats: InboxStats,
    *,
    retention: datetime.timedelta | None,
    margin: datetime.timedelta = datetime.timedelta(hours=1),
    pending_threshold: datetime.timedelta = datetime.timedelta(minutes=5),
) -> list[StatsWarning]:
    """The warnings of a sample.

    * ``no-tables`` (9): neither the processed-messages table nor the store's exists (a
      probe pointed at the wrong database or table names would otherwise be healthy; an
      outbox or collisions table alone does not count);
    * ``purge-not-running`` (10): the oldest processed-messages row is older than
      ``retention + margin`` (checked only with a ``retention``);
    * ``dead-letters`` (11): the store has ``dead`` rows;
    * ``worker-stuck`` (12): the store's oldest pending row is older than
      ``pending_threshold``;
    * ``collisions`` (13): the collisions table has rows;
    * ``sync-standby-missing`` (14, PostgreSQL): ``synchronous_standby_names`` asks for
      synchronous standbys that are not connected, so every COMMIT waits (or, on a standby,
      will once it is promoted);
    * ``async-standbys`` (15, PostgreSQL): the server has standbys but no synchronous one,
      or ``synchronous_commit`` is ``local``/``off``: a failover can lose acked messages.
      The two follow manual 27.2.8 "Synchronous Replication" and 20.5 "synchronous_commit"
      (see :mod:`sa_inbox.replication`);
    * ``replication-unchecked`` (16, PostgreSQL): the standbys' ``sync_state`` is hidden
      from the probing role (no ``pg_read_all_stats``) and the settings alone do not decide:
      whether a failover can lose acked messages is unknown, which a probe must not take for
      healthy (as ``no-tables``);
    * ``outbox-dead`` (17): the outbox has ``dead`` rows (messages the broker refused
      ``max_attempts`` times: replay them once the cause is fixed);
    * ``relay-stuck`` (18): the outbox's oldest pending row is older than
      ``pending_threshold`` (no relay running, or its broker unreachable);
    * ``renamed-consumer`` (19): a consumer name stopped claiming and another one started
      claiming ids the first had claimed (:class:`ConsumerRename`): every such redelivery
      was applied again. Rename a consumer by copying its claims
      (``op.rename_inbox_consumer``), never by changing the name alone;
    * ``broker-dead-letters`` (20): a broker's dead-letter queue / stream of
      :attr:`InboxStats.dead_letter_queues` is not empty (list them with ``sa-inbox
      dead-letters list``, replay them once the cause is fixed);
    * ``broker-dead-letters-unread`` (21): one of them could not be read (broker
      unreachable, queue or stream missing, the broker's extra not installed): unknown,
      which a probe must not take for healthy.

    :param stats: a sample of :func:`collect`.
    :param retention: the retention window the purge runs with, or None.
    :param margin: the slack added to it (a purge runs periodically, not continuously).
    :param pending_threshold: how old a pending row may get.
    """
    found: list[StatsWarning] = []

    def warn(kind: str, text: str) -> None:
        found.append(StatsWarning(WARNING_CODES[kind], kind, text))

    outbox = stats.outbox.table if stats.outbox is not None else None
    if stats.missing and all(t.name in (COLLISIONS_TABLE, outbox) for t in stats.tables):
        warn(
            "no-tables",
            f"none of the tables to check exists ({', '.join(stats.missing)}): wrong database "
            "or table names?",
        )
    oldest = stats.oldest_processed()
    if retention is not None and oldest is not None:
        age = _age(stats.taken_at, oldest)
        if age > retention + margin:
            warn(
                "purge-not-running",
                f"the oldest processed message is {_human(age)} old, more than the retention "
                f"window {_human(retention)} + {_human(margin)}: is the purge running?",
            )
    if stats.store is not None:
        dead = stats.store.total(DEAD)
        if dead:
            warn("dead-letters", f"{dead} dead letter(s) in {stats.store.table}")
        ages = [
            c.oldest_pending_seconds
            for c in stats.store.consumers
            if c.oldest_pending_seconds is not None
        ]
        if ages and max(ages) > pending_threshold.total_seconds():
            waited = _human(datetime.timedelta(seconds=max(ages)))
            warn(
                "worker-stuck",
                f"the oldest pending message waits for {waited}, more than "
                f"{_human(pending_threshold)}: is a worker running?",
            )
    if stats.collisions:
        warn("collisions", f"{stats.collisions} message-id collision(s) recorded")
    for rename in stats.renames:
        warn(
            "renamed-consumer",
            f"consumer {rename.new!r} started after {rename.old!r} stopped and claimed "
            f"{rename.shared} id(s) {rename.old!r} had claimed (applied again): a renamed "
            f"consumer? copy the claims with op.rename_inbox_consumer",
        )
    if stats.outbox is not None:
        for kind, text in _outbox_warnings(stats.outbox, pending_threshold):
            warn(kind, text)
    for queue in stats.dead_letter_queues:
        if queue.dead_letters is None:
            warn("broker-dead-letters-unread", f"{queue.queue}: {queue.error}")
        elif queue.dead_letters:
            warn(
                "broker-dead-letters",
                f"{queue.dead_letters} dead letter(s) in {queue.queue}: list them with "
                "sa-inbox dead-letters list, replay them once the cause is fixed",
            )
    if stats.replication is not None:
        for kind, text in replication_warnings(stats.replication):
            warn(kind, text)
        unchecked = replication_unchecked(stats.replication)
        if unchecked is not None:
            warn("replication-unchecked", unchecked)
    return found


def _outbox_warnings(
    outbox: OutboxStats, pending_threshold: datetime.timedelta
) -> list[tuple[str, str]]:
    """``outbox-dead`` and ``relay-stuck`` (see :func:`stats_warnings`)."""
    found = []
    dead = outbox.total(DEAD)
    if dead:
        found.append(("outbox-dead", f"{dead} dead outbox message(s) in {outbox.table}"))
    age = outbox.oldest_pending_seconds()
    if age is not None and age > pending_threshold.total_seconds():
        waited = _human(datetime.timedelta(seconds=age))
        found.append(
            (
                "relay-stuck",
                f"the oldest pending outbox message waits for {waited}, more than "
                f"{_human(pending_threshold)}: is a relay running, and can it reach the broker?",
            )
        )
    return found


def _age(now: datetime.datetime, then: datetime.datetime) -> datetime.timedelta:
    """``now - then``, both from the database: aware or naive alike (MySQL/SQLite return
    naive values of the session's time zone for both)."""
    if (now.tzinfo is None) != (then.tzinfo is None):
        now, then = now.replace(tzinfo=None), then.replace(tzinfo=None)
    return now - then


def _human(delta: datetime.timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds} s"
