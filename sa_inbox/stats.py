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
* each table's rows and size: rows a ``COUNT(*)``, or the planner's estimate from
  :data:`EXACT_BELOW` rows on (see "Exact and estimated" below); bytes PostgreSQL
  ``pg_relation_size`` / ``pg_indexes_size`` (manual 9.27.7, "Database Object Management
  Functions"); MySQL/MariaDB ``information_schema.TABLES`` ``DATA_LENGTH`` /
  ``INDEX_LENGTH`` (InnoDB's estimates, refreshed by ``ANALYZE TABLE``; MySQL manual, "The
  INFORMATION_SCHEMA TABLES Table"); SQLite the ``dbstat`` virtual table (SQLite manual,
  "The DBSTAT Virtual Table"; None where it is not compiled in);
* on PostgreSQL, the server's replication (:func:`sa_inbox.replication.read_replication`):
  connected standbys and whether a COMMIT waits for one.

Exact and estimated. Counting a table, or grouping it by consumer, reads every row: linear in
the table, past a scrape's timeout on a large one. So, unless ``exact=True`` (``sa-inbox
stats --exact``), a table the planner estimates at :data:`EXACT_BELOW` rows or more is not
counted, and a processed-messages table that large is read through its ``received_at`` index
in a bounded number of rows (:func:`_sampled_inbox`). The figures read that way are flagged
as estimates (``TableStats.estimated``, ``ConsumerStats.estimated``,
``DailyGrowth.estimated``, ``ConsumerRename.checked``; the report prints them with ``~``):

* rows: the planner's estimate, PostgreSQL ``EXPLAIN`` (``pg_class.reltuples`` scaled to the
  table's current pages; manual 14.2 "Statistics Used by the Planner"), MySQL/MariaDB
  ``information_schema.TABLES.TABLE_ROWS`` (InnoDB's estimate);
* the table's oldest and newest ``received_at``: exact (``MIN``/``MAX`` on the index);
* per consumer: :data:`SAMPLE_ROWS` index entries read at the start of each of
  :data:`SAMPLE_STRATA` strata of equal time between the oldest and the newest row (cut
  again at the growth's day boundaries), and the newest ones read back (who claimed last),
  each stratum weighted by the planner's estimate of its rows (``EXPLAIN`` of the range: a
  bias common to every range cancels out) and the whole scaled to the table's estimate. A
  consumer's oldest (newest) claim is exact when it is among the table's first (last) rows
  read, else found by bisection on time (:data:`BISECT_PROBES` probes, taking the consumer
  to claim continuously while it runs) and flagged. A consumer holding under about one row
  in ``SAMPLE_STRATA * SAMPLE_ROWS`` can be missed: ``--exact`` lists every one;
* a renamed consumer (:class:`ConsumerRename`): the :data:`RENAME_SCAN` index entries from
  the new name's first claim, their ids looked up under the old name (primary-key reads).

SQLite and other backends have no cheap estimate: they are always counted. The store's and
the outbox's rows by status are always counted.

The broker's dead-letter queues / streams are not in the database: ``sa-inbox stats
--dead-letters URL/QUEUE`` counts them with :func:`sa_inbox.brokers.dead_letters.sample`
into :attr:`InboxStats.dead_letter_queues`, which :func:`stats_warnings` reads.

:func:`stats_warnings` turns a sample into the operator's warnings, each with its own code (the
exit status of ``sa-inbox stats --check``).
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
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
    "BISECT_PROBES",
    "DEAD_LETTERS_SHOWN",
    "EXACT_BELOW",
    "GROWTH_DAYS",
    "RENAME_SCAN",
    "SAMPLE_ROWS",
    "SAMPLE_STRATA",
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
#: Tables the planner estimates at fewer rows are counted exactly (scanning so few rows is
#: cheap); larger processed-messages tables are sampled (see the module docstring).
EXACT_BELOW = 100_000
#: Time strata of the sample, and the index entries read in each.
SAMPLE_STRATA = 32
SAMPLE_ROWS = 64
#: Probes of the bisection for a consumer's first or last claim inside the table.
BISECT_PROBES = 20
#: The bisection stops when its interval is this short: the claim it finds is at most
#: that far from the consumer's true first (last) one.
BISECT_RESOLUTION = datetime.timedelta(seconds=1)
#: Index entries from a new consumer's first claim compared with an old one's claims.
RENAME_SCAN = 20_000


@dataclass(frozen=True)
class TableStats:
    """One table: ``rows`` (a ``COUNT(*)``, or the planner's estimate if ``estimated``),
    and bytes (None where unknown)."""

    name: str
    rows: int
    data_bytes: int | None = None
    index_bytes: int | None = None
    estimated: bool = False

    @property
    def total_bytes(self) -> int | None:
        """Data plus indexes, in bytes."""
        if self.data_bytes is None:
            return None
        return self.data_bytes + (self.index_bytes or 0)


@dataclass(frozen=True)
class ConsumerStats:
    """One consumer's processed-message rows (``oldest``/``newest``: ``received_at``, as the
    database returns it) and the collisions recorded for it; ``estimated`` names those of
    ``rows``, ``oldest`` and ``newest`` that are estimates (see the module docstring)."""

    consumer_name: str
    rows: int
    oldest: datetime.datetime | None
    newest: datetime.datetime | None
    collisions: int = 0
    estimated: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConsumerRename:
    """A consumer that looks renamed: ``old`` stopped claiming (its newest claim is older
    than ``new``'s oldest) and ``new`` claimed ``shared`` ids that ``old`` had claimed: each
    of them applied a second time. ``checked``: None if every claim of ``new`` was compared,
    else how many of its first claims were (a sampled table: ``shared`` is a lower bound)."""

    old: str
    new: str
    shared: int
    checked: int | None = None


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
    are not counted); ``estimated``: scaled from a sample (see the module docstring)."""

    table: str
    group: str
    rows: list[int]
    estimated: bool = False


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
    #: Index entries of the processed-messages table the sample read (0: not sampled).
    sampled_rows: int = 0

    @property
    def estimated(self) -> bool:
        """Whether any figure of the sample is an estimate."""
        return bool(self.sampled_rows) or any(t.estimated for t in self.tables)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: datetimes as ISO 8601 strings, bytes per table and ``estimated``
        included."""
        data = _jsonable(asdict(self))
        for table, raw in zip(data["tables"], self.tables, strict=True):
            table["total_bytes"] = raw.total_bytes
        data["estimated"] = self.estimated
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
    exact: bool = False,
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
    :param exact: count every table and group every row, however large (a full scan of
        each); False: estimate a large processed-messages table (see the module docstring).
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
        inbox = _inbox(conn, present.get("inbox"), schema, now, exact=exact)
        store = _store(conn, present.get("store"), schema)
        outbox = _outbox(conn, present.get("outbox"), schema)
        tables = [
            inbox.table
            if role == "inbox" and inbox.table is not None
            else _table(conn, name, schema, exact=exact)
            for role, name in present.items()
        ]
        growth = inbox.growth + _all_growth(conn, present, schema)
        replication = read_replication(conn)
    return InboxStats(
        backend=engine.dialect.name,
        taken_at=now,
        tables=tables,
        consumers=_with_collisions(inbox.consumers, collisions),
        collisions=sum(collisions.values()),
        store=store,
        missing=missing,
        replication=replication,
        outbox=outbox,
        renames=inbox.renames,
        growth=growth,
        sampled_rows=inbox.sampled_rows,
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
    :param exact: as :func:`collect` (a full scan per sample: for small tables only).
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
        exact: bool = False,
    ) -> None:
        self.engine = _engine(engine, "Sampler()")
        self.inbox_table = inbox_table
        self.store_table = store_table
        self.schema = schema
        self.min_interval = min_interval
        self.exact = exact
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
                    exact=self.exact,
                )
                self._sample = (now, stats)
            return self._sample[1]


@dataclass(frozen=True)
class _InboxFigures:
    """What :func:`collect` reads from the processed-messages table."""

    consumers: list[ConsumerStats] = field(default_factory=list)
    renames: list[ConsumerRename] = field(default_factory=list)
    growth: list[DailyGrowth] = field(default_factory=list)
    table: TableStats | None = None
    sampled_rows: int = 0


def _inbox_clause(name: str, schema: str | None) -> sa.TableClause:
    """The processed-messages table's columns :func:`collect` reads."""
    return sa.table(
        name,
        sa.column("message_id", sa.String()),
        sa.column("consumer_name", sa.String()),
        sa.column("received_at", sa.DateTime(timezone=True)),
        schema=schema,
    )


def _inbox(
    conn: Connection, name: str | None, schema: str | None, now: Any, *, exact: bool
) -> _InboxFigures:
    """The processed-messages table's figures: every row grouped (``exact``, a table the
    planner estimates under :data:`EXACT_BELOW` rows, or a backend with no estimate), else
    :func:`_sampled_inbox`. ``now``: the database's clock, that of ``received_at``'s
    default."""
    if name is None:
        return _InboxFigures()
    t = _inbox_clause(name, schema)
    estimate = None if exact else _estimated_rows(conn, name, schema)
    if estimate is not None and estimate >= EXACT_BELOW:
        data, index = _sizes(conn, name, schema)
        table = TableStats(name, estimate, data, index, estimated=True)
        return _sampled_inbox(conn, t, table, now)
    consumers = _consumers(conn, t)
    return _InboxFigures(
        consumers=consumers,
        renames=_renames(conn, t, consumers),
        growth=_growth(conn, t, "consumer_name", "received_at", now),
        table=_table(conn, name, schema, exact=True),
    )


def _consumers(conn: Connection, t: sa.TableClause) -> list[ConsumerStats]:
    """Every consumer's rows, oldest and newest claim: one ``GROUP BY`` over every row."""
    query = sa.select(
        t.c.consumer_name,
        sa.func.count(),
        sa.func.min(t.c.received_at),
        sa.func.max(t.c.received_at),
    ).group_by(t.c.consumer_name)
    return [
        ConsumerStats(consumer, int(rows), oldest, newest)
        for consumer, rows, oldest, newest in conn.execute(query)
    ]


def _with_collisions(
    consumers: list[ConsumerStats], collisions: dict[str, int]
) -> list[ConsumerStats]:
    """``consumers`` with their recorded collisions (a consumer with collisions only gets
    a row of its own), sorted by name."""
    found = {c.consumer_name: c for c in consumers}
    for consumer, count in collisions.items():
        base = found.get(consumer) or ConsumerStats(consumer, 0, None, None)
        found[consumer] = replace(base, collisions=count)
    return [found[key] for key in sorted(found)]


def _rename_pairs(consumers: list[ConsumerStats]) -> list[tuple[ConsumerStats, ConsumerStats]]:
    """The (old, new) pairs where ``old``'s newest claim is older than ``new``'s oldest."""
    return [
        (old, new)
        for old in consumers
        for new in consumers
        if old.newest is not None and new.oldest is not None and old.newest < new.oldest
    ]


def _renames(
    conn: Connection, t: sa.TableClause, consumers: list[ConsumerStats]
) -> list[ConsumerRename]:
    """The consumers that look renamed (see :class:`ConsumerRename`): for each pair where
    one stopped before the other started, the ids both claimed (one query per such pair,
    over every row of the new name)."""
    earlier = t.alias("earlier")
    found = []
    for old, new in _rename_pairs(consumers):
        shared = sa.exists().where(
            earlier.c.message_id == t.c.message_id,
            earlier.c.consumer_name == old.consumer_name,
        )
        count = sa.select(sa.func.count()).where(t.c.consumer_name == new.consumer_name, shared)
        claimed = int(conn.execute(count).scalar_one())
        if claimed:
            found.append(ConsumerRename(old.consumer_name, new.consumer_name, claimed))
    return found


# -- the sample of a large processed-messages table (see the module docstring) -----------


@dataclass(frozen=True)
class _Stratum:
    """The rows ``[start, end)`` (``end`` None: to the newest) of the ``received_at``
    index: ``seen`` the (consumer, received_at) of the entries read, ``weight`` the rows
    the stratum holds (every one read, or the planner's estimate)."""

    start: Any
    end: Any
    seen: list[tuple[str, Any]]
    weight: float


def _sampled_inbox(
    conn: Connection, t: sa.TableClause, table: TableStats, now: Any
) -> _InboxFigures:
    """The figures of a large processed-messages table, from its ``received_at`` index in
    a bounded number of rows: about ``SAMPLE_STRATA * SAMPLE_ROWS`` entries, plus
    :data:`BISECT_PROBES` probes per consumer that started or stopped inside the table and
    :data:`RENAME_SCAN` entries per pair that looks renamed."""
    c = t.c
    oldest, newest = conn.execute(
        sa.select(sa.func.min(c.received_at), sa.func.max(c.received_at))
    ).one()
    if oldest is None:  # emptied since the planner's statistics were taken
        return _InboxFigures(table=replace(table, rows=0))
    days = _day_edges(now)
    strata = _strata(conn, t, oldest, newest, days)
    scale = table.rows / (sum(s.weight for s in strata) or 1)
    consumers, probes = _sampled_consumers(conn, t, strata, scale)
    renames = [
        rename
        for old, new in _rename_pairs(consumers)
        if (rename := _sampled_rename(conn, t, old, new)) is not None
    ]
    return _InboxFigures(
        consumers=consumers,
        renames=renames,
        growth=_sampled_growth(t.name, strata, days, scale),
        table=table,
        sampled_rows=sum(len(s.seen) for s in strata) + probes,
    )


def _day_edges(now: Any) -> list[Any]:
    """The :data:`GROWTH_DAYS` + 1 window edges of :func:`_growth`, newest first."""
    return [now - datetime.timedelta(days=day) for day in range(GROWTH_DAYS + 1)]


def _probe(
    conn: Connection, t: sa.TableClause, start: Any, end: Any, *, newest_first: bool = False
) -> list[tuple[str, Any]]:
    """The (consumer, received_at) of the first :data:`SAMPLE_ROWS` index entries of
    ``[start, end)`` (``end`` None: open), or of the last ones with ``newest_first``."""
    c = t.c
    query = sa.select(c.consumer_name, c.received_at).where(c.received_at >= start)
    if end is not None:
        query = query.where(c.received_at < end)
    order = c.received_at.desc() if newest_first else c.received_at
    return [(str(name), at) for name, at in conn.execute(query.order_by(order).limit(SAMPLE_ROWS))]


def _strata(
    conn: Connection, t: sa.TableClause, oldest: Any, newest: Any, days: list[Any]
) -> list[_Stratum]:
    """The sample: :data:`SAMPLE_STRATA` strata of equal time from ``oldest`` to
    ``newest``, cut again at each day edge of ``days``, each read from its start (the first:
    the table's oldest rows); then the tail, the newest rows read back (weight 0: it tells
    who claimed last, not how much)."""
    step = (newest - oldest) / SAMPLE_STRATA
    starts = {oldest + step * i for i in range(SAMPLE_STRATA)} if step else {oldest}
    starts |= {edge for edge in days[1:] if oldest < edge <= newest}
    edges = sorted(starts)
    strata = []
    for index, start in enumerate(edges):
        end = None if index == len(edges) - 1 else edges[index + 1]
        seen = _probe(conn, t, start, end)
        if len(seen) < SAMPLE_ROWS:  # every row of the stratum was read
            weight: float = len(seen)
        else:
            weight = _stratum_rows(conn, t, start, end, oldest, newest)
        strata.append(_Stratum(start, end, seen, weight))
    tail = _probe(conn, t, oldest, None, newest_first=True)
    strata.append(_Stratum(min(at for _, at in tail), None, tail, 0.0))
    return strata


def _stratum_rows(
    conn: Connection, t: sa.TableClause, start: Any, end: Any, oldest: Any, newest: Any
) -> float:
    """The planner's estimate of the rows in ``[start, end)``; without one (a plan of
    unknown shape), the share of the table's time span the stratum covers, in rows of a
    table of ``SAMPLE_STRATA`` full strata (rows arriving evenly)."""
    c = t.c
    query: sa.Select[Any] = sa.select(sa.literal_column("1")).select_from(t)
    query = query.where(c.received_at >= start)
    if end is not None:
        query = query.where(c.received_at < end)
    planned = _planned_rows(conn, query)
    if planned is not None:
        return planned
    span = (newest - oldest).total_seconds() or 1.0
    share = ((end or newest) - start).total_seconds() / span
    return float(share * SAMPLE_STRATA * SAMPLE_ROWS)


def _sampled_consumers(
    conn: Connection, t: sa.TableClause, strata: list[_Stratum], scale: float
) -> tuple[list[ConsumerStats], int]:
    """Each consumer seen in the sample: rows estimated (each entry read stands for
    ``weight / entries read`` rows of its stratum, times ``scale``; at least the tail's
    rows); its oldest (newest) claim exact if every row before (after) the first (last) one
    seen was read (the tail: the newest rows), else bisected. Also returns the entries the
    bisections read."""
    rows: dict[str, float] = defaultdict(float)
    first: dict[str, tuple[int, Any]] = {}
    last: dict[str, tuple[int, Any]] = {}
    for index, stratum in enumerate(strata):
        for consumer, at in stratum.seen:
            rows[consumer] += stratum.weight / len(stratum.seen) * scale
            if consumer not in first or at < first[consumer][1]:
                first[consumer] = (index, at)
            if consumer not in last or at > last[consumer][1]:
                last[consumer] = (index, at)
    found, probes = [], 0
    whole = [len(stratum.seen) < SAMPLE_ROWS for stratum in strata]
    tail = strata[-1]
    for consumer in sorted(rows):
        estimated = ["rows"]
        (begin, oldest), (end, newest) = first[consumer], last[consumer]
        if not all(whole[:begin]):
            oldest, read = _bisect(conn, t, consumer, oldest, _before(strata, begin))
            probes += read
            estimated.append("oldest")
        if end < len(strata) - 1 and not all(whole[end:-1]):
            newest, read = _bisect(conn, t, consumer, newest, _after(strata, end))
            probes += read
            estimated.append("newest")
        count = max(1, round(rows[consumer]), sum(name == consumer for name, _ in tail.seen))
        found.append(ConsumerStats(consumer, count, oldest, newest, estimated=tuple(estimated)))
    return found, probes


def _before(strata: list[_Stratum], index: int) -> Any:
    """A time before stratum ``index`` where the sample saw no row of the consumer first
    seen in it: the newest entry read of the stratum before (its start if none was)."""
    seen = strata[index - 1].seen
    return max((at for _, at in seen), default=strata[index - 1].start)


def _after(strata: list[_Stratum], index: int) -> Any:
    """A time after stratum ``index`` where the sample saw no row of the consumer last
    seen in it: the oldest entry read of the stratum after (its start if none was)."""
    seen = strata[index + 1].seen
    return min((at for _, at in seen), default=strata[index + 1].start)


def _bisect(
    conn: Connection, t: sa.TableClause, consumer: str, inside: Any, outside: Any
) -> tuple[Any, int]:
    """The consumer's first claim (``outside < inside``) or last one (``inside <
    outside``): ``inside`` is the ``received_at`` of one of its rows, ``outside`` a time the
    sample saw none of them. Each probe reads :data:`SAMPLE_ROWS` entries from the middle
    of the interval: a row of the consumer moves ``inside`` to it, none moves ``outside``
    to the middle (the consumer is taken to claim continuously while it runs). Returns the
    claim found and the entries read."""
    found, read = inside, 0
    for _ in range(BISECT_PROBES):
        if abs(outside - inside) <= BISECT_RESOLUTION:
            break
        middle = inside + (outside - inside) / 2
        seen = _probe(conn, t, middle, max(inside, outside))
        read += len(seen)
        mine = [at for name, at in seen if name == consumer]
        if not mine:
            outside = middle
        elif outside < inside:
            inside = found = min(min(mine), found)
        else:
            inside = found = max(max(mine), found)
    return found, read


def _sampled_rename(
    conn: Connection, t: sa.TableClause, old: ConsumerStats, new: ConsumerStats
) -> ConsumerRename | None:
    """``new``'s claims among the :data:`RENAME_SCAN` index entries from its first claim,
    and how many of their ids ``old`` had claimed (primary-key lookups)."""
    c = t.c
    scan = (
        sa.select(c.message_id, c.consumer_name)
        .where(c.received_at >= new.oldest)
        .order_by(c.received_at)
        .limit(RENAME_SCAN)
        .subquery()
    )
    earlier = t.alias("earlier")
    shared = sa.exists().where(
        earlier.c.message_id == scan.c.message_id,
        earlier.c.consumer_name == old.consumer_name,
    )
    query = sa.select(sa.func.count(), sa.func.sum(sa.case((shared, 1), else_=0))).where(
        scan.c.consumer_name == new.consumer_name
    )
    checked, claimed = conn.execute(query).one()
    if not claimed:
        return None
    return ConsumerRename(old.consumer_name, new.consumer_name, int(claimed), int(checked))


def _sampled_growth(
    name: str, strata: list[_Stratum], days: list[Any], scale: float
) -> list[DailyGrowth]:
    """:func:`_growth` from the sample: each stratum's estimated rows, per consumer, added
    to the day window its start falls in (the day edges are strata edges)."""
    per_day: dict[str, list[float]] = defaultdict(lambda: [0.0] * GROWTH_DAYS)
    for stratum in strata:
        day = _day_of(stratum.start, days)
        if day is None or not stratum.weight:
            continue
        for consumer, _ in stratum.seen:
            per_day[consumer][day] += stratum.weight / len(stratum.seen) * scale
    return [
        DailyGrowth(name, consumer, [round(n) for n in per_day[consumer]], estimated=True)
        for consumer in sorted(per_day)
    ]


def _day_of(at: Any, days: list[Any]) -> int | None:
    """The :func:`_growth` window ``at`` falls in (0: the last 24 hours), None if older."""
    for day in range(GROWTH_DAYS):
        if at >= days[day + 1]:
            return day
    return None


def _estimated_rows(conn: Connection, name: str, schema: str | None) -> int | None:
    """The planner's estimate of the table's rows (see the module docstring), or None
    where the backend has none."""
    backend = conn.dialect.name
    if backend == "postgresql":
        every: sa.Select[Any] = sa.select(sa.literal_column("1"))
        every = every.select_from(sa.table(name, schema=schema))
        planned = _planned_rows(conn, every)
        return None if planned is None else round(planned)
    if backend in ("mysql", "mariadb"):
        catalog = sa.text(
            "SELECT TABLE_ROWS FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = COALESCE(:s, DATABASE()) AND TABLE_NAME = :n"
        )
        rows = conn.execute(catalog, {"s": schema, "n": name}).scalar()
        return None if rows is None else int(rows)
    return None


def _planned_rows(conn: Connection, query: sa.Select[Any]) -> float | None:
    """The rows the planner expects ``query`` to return: PostgreSQL ``EXPLAIN (FORMAT
    JSON)``'s ``Plan Rows`` (manual, "EXPLAIN"); MySQL/MariaDB ``EXPLAIN FORMAT=JSON``'s
    rows times ``filtered`` (MariaDB knowledge base, "EXPLAIN FORMAT=JSON"); None on other
    backends."""
    backend = conn.dialect.name
    compiled = query.compile(dialect=conn.dialect)
    if backend == "postgresql":
        sql = f"EXPLAIN (FORMAT JSON) {compiled.string}"
        plan = conn.exec_driver_sql(sql, compiled.params).scalar_one()
        plan = json.loads(plan) if isinstance(plan, str) else plan
        return float(plan[0]["Plan"]["Plan Rows"])
    if backend in ("mysql", "mariadb"):
        sql = f"EXPLAIN FORMAT=JSON {compiled.string}"
        text = conn.exec_driver_sql(sql, compiled.params).scalar_one()
        scanned = _explained_table(json.loads(text))
        if scanned is None:
            return None
        rows = scanned.get("rows", scanned.get("rows_examined_per_scan"))
        if rows is None:
            return None
        return float(rows) * float(scanned.get("filtered", 100)) / 100
    return None


def _explained_table(node: Any) -> dict[str, Any] | None:
    """The first ``"table"`` object of a MySQL/MariaDB JSON plan."""
    if isinstance(node, dict):
        if isinstance(node.get("table"), dict):
            return node["table"]  # type: ignore[no-any-return]
        values: list[Any] = list(node.values())
    elif isinstance(node, list):
        values = node
    else:
        return None
    for value in values:
        found = _explained_table(value)
        if found is not None:
            return found
    return None


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


def _all_growth(conn: Connection, present: dict[str, str], schema: str | None) -> list[DailyGrowth]:
    """:func:`_growth` of the store and the outbox (on Python's UTC clock, the one their
    rows are written with; the processed-messages table's is :func:`_inbox`'s)."""
    found = []
    utc = datetime.datetime.now(datetime.UTC)
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


def _table(conn: Connection, name: str, schema: str | None, *, exact: bool) -> TableStats:
    """The table's rows (counted if ``exact``, if the planner has no estimate or estimates
    fewer than :data:`EXACT_BELOW`) and bytes."""
    data, index = _sizes(conn, name, schema)
    estimate = None if exact else _estimated_rows(conn, name, schema)
    if estimate is not None and estimate >= EXACT_BELOW:
        return TableStats(name, estimate, data, index, estimated=True)
    t = sa.table(name, schema=schema)
    rows = int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one())
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
        among = "" if rename.checked is None else f" (in its first {rename.checked} claims)"
        warn(
            "renamed-consumer",
            f"consumer {rename.new!r} started after {rename.old!r} stopped and claimed "
            f"{rename.shared} id(s) {rename.old!r} had claimed{among} (applied again): a "
            f"renamed consumer? copy the claims with op.rename_inbox_consumer",
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
