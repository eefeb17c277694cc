"""The batched purge of processed-message rows (and of a store's finished rows) older than
a :class:`~sa_inbox.retention.policy.RetentionPolicy` window.

:func:`purge` deletes in short transactions of at most ``batch_size`` rows, each with the
cut-off inside its limited statement (see :mod:`sa_inbox.dialects.purge` for the SQL per
backend), until a batch deletes nothing. Several purgers may run at once: PostgreSQL skips
rows another purger has locked (``FOR UPDATE SKIP LOCKED``), MySQL/MariaDB take turns on a
named lock per batch, SQLite has one writer at a time.
"""

from __future__ import annotations

import datetime
import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import ColumnElement

from ..checks import is_asyncio_object
from ..claim import Inbox
from ..dialects import PurgeDialect, backend_for, backend_of, classifier_for
from ..exc import (
    InvalidArgument,
    InvalidBind,
    InvalidTableType,
    UnsupportedBackend,
)
from ..hooks import InboxHooks, as_hooks
from ..schema import DEFAULT_TABLE_NAME, processed_messages_table
from ..store.schema import DEAD, DONE, utc_now
from ..store.store import InboxStore
from ..validation import positive_int
from .policy import RetentionPolicy, resolve_window

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_LOCK_TIMEOUT",
    "TRANSIENT_BATCH_RETRIES",
    "Batch",
    "PurgeTarget",
    "StorePurgeResult",
    "count_expired",
    "database_now",
    "outbox_dispatched_target",
    "purge",
    "purge_store",
    "purge_target",
    "purge_target_of",
    "python_utc_now",
    "store_purge_targets",
]

#: Rows per purge transaction, at most.
DEFAULT_BATCH_SIZE = 5000
#: Seconds a MySQL/MariaDB purger waits for another purger's batch (``GET_LOCK``).
DEFAULT_LOCK_TIMEOUT = 60.0
#: Batches in a row a purge re-runs after a transient error (deadlock, serialization or
#: certification failure) before it raises it.
TRANSIENT_BATCH_RETRIES = 8
#: Seconds: the first back-off after such an error, doubled each time, at most 1 s.
TRANSIENT_BACKOFF = 0.05


@dataclass(frozen=True)
class Batch:
    """One committed purge batch, as reported to ``on_batch``.

    :param rows: rows deleted by the batch (at most the batch size).
    :param seconds: wall time of the batch's transaction, from its first statement to its
        commit (the time its row locks were held; on SQLite it includes the wait for the
        database's write lock).
    :param total: rows deleted by this purge so far, this batch included.
    :param cutoff: rows older than this database timestamp are expired.
    """

    rows: int
    seconds: float
    total: int
    cutoff: datetime.datetime


def database_now(conn: Connection) -> datetime.datetime:
    """The database's ``CURRENT_TIMESTAMP``: the clock ``received_at`` is written with."""
    now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
    if not isinstance(now, datetime.datetime):
        raise UnsupportedBackend(f"CURRENT_TIMESTAMP returned {now!r}, not a datetime")
    return now


def python_utc_now(conn: Connection) -> datetime.datetime:
    """Python's UTC clock: the clock the inbox store writes its timestamps with."""
    return utc_now()


@dataclass(frozen=True)
class PurgeTarget:
    """What a purge deletes: rows of ``table`` whose ``time_column`` is before the cut-off.

    :param table: the table; it needs a primary key and ``time_column`` (indexed, so that a
        batch walks the index from the oldest row).
    :param time_column: the column the window counts from (``received_at``).
    :param condition: an extra condition every purged row must meet (e.g. the inbox store's
        ``status = 'done'``), or ``None``.
    :param clock: reads "now" for the cut-off, on the purge's connection: the clock the
        rows' times were written with (:func:`database_now` for ``CURRENT_TIMESTAMP``
        defaults, :func:`python_utc_now` for the store's Python UTC times).
    :raises InvalidArgument: if ``table`` has no column ``time_column``.
    """

    table: sa.Table
    time_column: str = "received_at"
    condition: ColumnElement[bool] | None = None
    clock: Callable[[Connection], datetime.datetime] = database_now

    def __post_init__(self) -> None:
        if self.time_column not in self.table.c:
            raise InvalidArgument(
                f"table {self.table.name!r} has no column {self.time_column!r} to purge by"
            )

    @property
    def order_by(self) -> sa.Column[Any]:
        return self.table.c[self.time_column]

    def expired(self, cutoff: datetime.datetime) -> ColumnElement[bool]:
        """The condition of an expired row: older than ``cutoff`` (and ``condition``)."""
        older = self.order_by < sa.bindparam("cutoff", cutoff, type_=self.order_by.type)
        return older if self.condition is None else sa.and_(older, self.condition)


#: The columns by which :func:`purge` tells an inbox store's table from a processed-messages
#: table: a store row is purged by its ``status`` and ``processed_at``, never by arrival.
_STORE_COLUMNS = ("status", "processed_at")


def _is_store_table(table: sa.Table) -> bool:
    """Whether ``table`` is an inbox store's table (marked as one, or a reflected table with
    the store's ``status`` and ``processed_at`` columns), to be purged by its ``done`` rows.
    """
    mark = table.info.get("sa_inbox")
    if isinstance(mark, dict) and mark.get("kind") == "store":
        return True
    return all(name in table.c for name in _STORE_COLUMNS)


def _store_done_target(table: sa.Table) -> PurgeTarget:
    """The store's ``done`` rows by ``processed_at``, on Python's UTC clock (the store's)."""
    return PurgeTarget(table, "processed_at", table.c.status == DONE, python_utc_now)


#: The columns by which :func:`purge` tells an outbox table (:mod:`sa_inbox.outbox`): its
#: ``dispatched`` rows are purged by ``dispatched_at``.
_OUTBOX_COLUMNS = ("status", "dispatched_at")


def _is_outbox_table(table: sa.Table) -> bool:
    """Whether ``table`` is an outbox table (marked as one, or reflected with its ``status``
    and ``dispatched_at`` columns)."""
    mark = table.info.get("sa_inbox")
    if isinstance(mark, dict) and mark.get("kind") == "outbox":
        return True
    return all(name in table.c for name in _OUTBOX_COLUMNS)


def outbox_dispatched_target(table: sa.Table) -> PurgeTarget:
    """An outbox table's ``dispatched`` rows by ``dispatched_at``, on Python's UTC clock
    (the relay's); ``pending``, ``processing`` and ``dead`` rows are never purged."""
    return PurgeTarget(table, "dispatched_at", table.c.status == "dispatched", python_utc_now)


def store_purge_targets(store: InboxStore) -> tuple[PurgeTarget, PurgeTarget]:
    """What :func:`purge_store` deletes: ``(done, dead)``.

    ``done`` rows by ``processed_at`` (the window), ``dead`` rows by ``received_at`` (the
    ``dead_older_than`` window), both on Python's UTC clock, the store's. With
    :func:`count_expired`, the rows a purge will delete (for a progress bar).
    """
    table = store.table
    dead = PurgeTarget(table, "received_at", table.c.status == DEAD, python_utc_now)
    return _store_done_target(table), dead


def purge_target_of(table: Inbox | InboxStore | sa.Table | None) -> PurgeTarget:
    """What :func:`purge` deletes from ``table``: old processed-message rows, a store's
    old ``done`` rows (for an InboxStore, or a table with the store's ``status`` and
    ``processed_at`` columns), or an outbox's old ``dispatched`` rows (a table marked as an
    outbox's, or with ``status`` and ``dispatched_at`` columns). With :func:`count_expired`,
    the rows a purge will delete.

    :param table: as :func:`purge`'s ``table``.
    :raises InvalidTableType: for anything but an Inbox, an InboxStore, a Table or None.
    """
    if table is None:
        return PurgeTarget(processed_messages_table(sa.MetaData(), table_name=DEFAULT_TABLE_NAME))
    if isinstance(table, InboxStore):
        return _store_done_target(table.table)
    if isinstance(table, Inbox):
        return PurgeTarget(table.table)
    if isinstance(table, sa.Table):
        if _is_outbox_table(table):
            return outbox_dispatched_target(table)
        return _store_done_target(table) if _is_store_table(table) else PurgeTarget(table)
    raise InvalidTableType(
        f"table must be an Inbox, an InboxStore, a Table or None, not {type(table).__name__}"
    )


def _check_bind(bind: object) -> sa.Engine | Connection:
    if not isinstance(bind, sa.Engine | Connection):
        hint = (
            "; for an AsyncEngine use sa_inbox.asyncio.purge()" if is_asyncio_object(bind) else ""
        )
        raise InvalidBind(f"bind must be an Engine or Connection, not {type(bind).__name__}{hint}")
    return bind


def _check_batch_size(batch_size: object) -> int:
    return positive_int(batch_size, "batch_size", InvalidArgument)


@contextmanager
def _purge_connection(bind: sa.Engine | Connection, dialect: PurgeDialect) -> Iterator[Connection]:
    """A connection outside any transaction, at the dialect's isolation level."""
    options = (
        {} if dialect.isolation_level is None else {"isolation_level": dialect.isolation_level}
    )
    if isinstance(bind, sa.Engine):
        with bind.connect() as conn:
            yield conn.execution_options(**options)
        return
    if bind.in_transaction():
        raise InvalidArgument(
            "purge runs its own short transactions: pass an Engine, or a Connection that is "
            "not in a transaction"
        )
    yield bind.execution_options(**options)


def purge_target(
    bind: sa.Engine | Connection,
    target: PurgeTarget,
    older_than: datetime.timedelta,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[Batch], None] | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    pause: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Delete ``target``'s rows older than ``older_than`` in batches: the shape of every purge.

    ``older_than`` must already be checked against a :class:`RetentionPolicy` (see
    :func:`purge`). The cut-off is fixed once at the start, from ``target.clock``.

    :param pause: seconds to wait between batches; ``None`` for the backend's default
        (0.1 s on SQLite, whose waiting writers would otherwise starve; 0 elsewhere).
    :param sleep: how to wait ``pause`` seconds (the asyncio purge waits on the event loop).
    :returns: rows deleted by this call.
    :raises PurgeLockTimeout: on MySQL/MariaDB, if another purger held the purge lock for
        more than ``lock_timeout`` seconds.
    :raises InvalidBind: if ``bind`` is not an Engine or Connection (before any SQL).
    :raises DBAPIError: the driver's error, at once if it is not transient, or after
        :data:`TRANSIENT_BATCH_RETRIES` batches in a row were rolled back by transient ones
        (deadlock, serialization or Galera certification failure); each re-run waits a
        random back-off from 0.05 s, doubling, at most 1 s. The batches committed before
        stay deleted.
    """
    bind = _check_bind(bind)
    batch_size = _check_batch_size(batch_size)
    dialect = backend_for(_check_bind(bind).dialect.name).purge
    pause = dialect.pause if pause is None else pause
    with _purge_connection(bind, dialect) as conn:
        # A server that speaks this dialect but needs other SQL (YugabyteDB, no ctid); it
        # keeps the isolation level of the dialect it speaks.
        dialect = backend_of(conn).purge
        cutoff = target.clock(conn) - older_than
        statement = dialect.batch_statement(
            conn, target.table, target.expired(cutoff), target.order_by, batch_size
        )
        conn.commit()
        total = 0
        failures = 0
        while True:
            try:
                with dialect.exclusive(conn, target.table, lock_timeout):
                    started = time.perf_counter()
                    with conn.begin():
                        result = conn.execute(
                            statement, execution_options={"preserve_rowcount": True}
                        )
                        rows = max(result.rowcount, 0)
                    seconds = time.perf_counter() - started
            except DBAPIError as exc:
                failures += 1
                if failures > TRANSIENT_BATCH_RETRIES or not classifier_for(
                    conn.dialect.name
                ).is_transient(exc):
                    raise
                _transient_batch(exc, failures, sleep)
                continue
            failures = 0
            if rows == 0:
                return total
            total += rows
            if on_batch is not None:
                on_batch(Batch(rows=rows, seconds=seconds, total=total, cutoff=cutoff))
            if pause > 0:
                sleep(pause)


def _transient_batch(exc: DBAPIError, failures: int, sleep: Callable[[float], None]) -> None:
    """Log a batch rolled back by a transient error and wait before the next one."""
    delay = random.uniform(0, min(1.0, TRANSIENT_BACKOFF * 2 ** (failures - 1)))
    logger.info(
        "purge batch rolled back by a transient error (%d in a row), running it again: %s",
        failures,
        exc.orig,
        extra={"event": "inbox.purge.retry", "action": "retry", "error": str(exc.orig)},
    )
    sleep(delay)


def purge(
    bind: sa.Engine | Connection,
    *,
    older_than: RetentionPolicy | datetime.timedelta,
    policy: RetentionPolicy | None = None,
    table: Inbox | InboxStore | sa.Table | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[Batch], None] | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    pause: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    hooks: InboxHooks | None = None,
) -> int:
    """Delete processed-message rows older than the retention window, in short batches.

    Given an :class:`~sa_inbox.InboxStore` (or its table), it deletes the store's ``done``
    rows whose ``processed_at`` is older than the window, exactly as :func:`purge_store`
    does without ``dead_older_than``: ``pending``, ``processing`` and ``dead`` rows are
    never touched (use :func:`purge_store` for dead rows).

    Each batch is its own transaction deleting at most ``batch_size`` rows whose
    ``received_at`` is before the cut-off (``CURRENT_TIMESTAMP - older_than``, read once at
    the start), until one deletes nothing; each batch locks only the rows it deletes. Safe
    from several processes at once (each backend's way:
    :attr:`~sa_inbox.dialects.purge.PurgeDialect.concurrency`); a batch rolled back by a
    transient error (:func:`sa_inbox.runner.is_transient`) runs again, up to
    :data:`TRANSIENT_BATCH_RETRIES` times in a row.

    .. seealso:: ``docs/discussions/retention.md``, "Several purgers at once".

    :param bind: an Engine, or a Connection that is not in a transaction (the purge commits
        each batch itself). On PostgreSQL, MySQL/MariaDB and Oracle the batches run at READ
        COMMITTED (a given Connection is switched to it; the pool resets it on return).
    :param older_than: the :class:`RetentionPolicy` (rows older than its
        :attr:`~RetentionPolicy.window` are deleted), or a longer :class:`datetime.timedelta`
        together with ``policy``.
    :param policy: the policy a timedelta ``older_than`` is checked against.
    :param table: the :class:`~sa_inbox.Inbox`, the :class:`~sa_inbox.InboxStore`, or the
        table of either (a table with the store's ``status`` and ``processed_at`` columns,
        or marked as a store's, is purged as a store); default: the table
        ``inbox_processed_messages`` with the standard columns.
    :param batch_size: rows per transaction, at most (default 5000).
    :param on_batch: called after each committed batch with a :class:`Batch` (rows, seconds,
        running total); for progress bars and measurements.
    :param lock_timeout: seconds to wait for another purger's batch (MySQL/MariaDB).
    :param pause: seconds between batches; ``None``: 0.1 s on SQLite (so that waiting
        claims get the database's single write lock), 0 elsewhere.
    :param sleep: how to wait ``pause`` seconds (the asyncio purge waits on the event loop).
    :param hooks: told of the purge's rows and seconds when it ends
        (:meth:`~sa_inbox.hooks.InboxHooks.purged`); default: an Inbox ``table``'s hooks.
    :returns: the number of rows this call deleted.
    :raises RetentionWindowTooShort: if the window is shorter than the policy allows
        (``max_redelivery + max_replay + margin``); nothing is deleted.
    :raises InvalidArgument: for a bare timedelta without ``policy``, a bad
        ``batch_size``, or a Connection already in a transaction; nothing is deleted.
    :raises PurgeLockTimeout: as :func:`purge_target`.
    :raises InvalidBind: (a :class:`TypeError`) if ``bind`` is not an Engine or Connection,
        before any SQL; nothing is deleted.
    :raises InvalidTableType: (a :class:`TypeError`) if ``table`` is not an Inbox, an
        InboxStore, a Table or ``None``; nothing is deleted.

    Example::

        policy = RetentionPolicy(max_redelivery=timedelta(hours=12), max_replay=timedelta(days=7))
        deleted = purge(engine, older_than=policy, table=inbox)
        deleted = purge(engine, older_than=policy, table=store)   # the store's done rows
    """
    target = purge_target_of(table)
    bind = _check_bind(bind)
    window = resolve_window(older_than, policy)
    hooks = as_hooks(table.hooks if hooks is None and isinstance(table, Inbox) else hooks)
    start = time.perf_counter()
    deleted = purge_target(
        bind,
        target,
        window,
        batch_size=batch_size,
        on_batch=on_batch,
        lock_timeout=lock_timeout,
        pause=pause,
        sleep=sleep,
    )
    seconds = time.perf_counter() - start
    name = target.table.name
    hooks.purged(name, rows=deleted, seconds=seconds)
    logger.info(
        "purge of %s: %d rows deleted in %.3f s",
        name,
        deleted,
        seconds,
        extra={"event": "inbox.purge.done", "table": name, "rows": deleted, "seconds": seconds},
    )
    return deleted


def count_expired(
    bind: sa.Engine | Connection,
    target: PurgeTarget,
    older_than: datetime.timedelta,
) -> int:
    """How many of ``target``'s rows are older than ``older_than`` now (for progress bars).

    One ``COUNT(*)`` over the time index; the purge itself never needs it.
    """
    with _purge_connection(bind, backend_for(_check_bind(bind).dialect.name).purge) as conn:
        cutoff = target.clock(conn) - older_than
        query = sa.select(sa.func.count()).select_from(target.table).where(target.expired(cutoff))
        count = int(conn.execute(query).scalar_one())
        conn.commit()
        return count


@dataclass(frozen=True)
class StorePurgeResult:
    """Rows deleted from the inbox store by :func:`purge_store`.

    :param done: ``done`` rows deleted.
    :param dead: ``dead`` rows deleted (0 unless ``dead_older_than`` was given).
    """

    done: int
    dead: int

    @property
    def total(self) -> int:
        return self.done + self.dead


def purge_store(
    bind: sa.Engine | Connection,
    store: InboxStore,
    *,
    older_than: RetentionPolicy | datetime.timedelta,
    policy: RetentionPolicy | None = None,
    dead_older_than: datetime.timedelta | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[Batch], None] | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    pause: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> StorePurgeResult:
    """Delete old ``done`` rows (and, if asked, old ``dead`` rows) from the inbox store.

    The same batched purge as :func:`purge` (:func:`purge_target`), on the store's table:
    ``done`` rows whose ``processed_at`` is older than the window (the index
    ``ix_<table>_purge (status, processed_at)`` serves the batches), then, only when
    ``dead_older_than`` is given, ``dead`` rows whose ``received_at`` is older than that.
    ``pending`` and ``processing`` rows are never touched. A store row is also the
    deduplication record of its message, so both windows are checked against the policy.
    The cut-off uses Python's UTC clock, the clock the store writes its times with.

    :param bind: an Engine, or a Connection that is not in a transaction.
    :param store: the :class:`~sa_inbox.store.InboxStore`.
    :param older_than: the policy, or a timedelta with ``policy``: the ``done`` window.
    :param policy: the policy a timedelta window is checked against.
    :param dead_older_than: the ``dead`` rows' own window (dead letters are usually kept
        longer, for inspection and replay); ``None`` (default) keeps every dead row.
    :param batch_size: rows per transaction, at most.
    :param on_batch: called after each committed batch (both phases).
    :param lock_timeout: seconds to wait for another purger's batch (MySQL/MariaDB).
    :param pause: seconds between batches, as :func:`purge`.
    :param sleep: how to wait ``pause`` seconds, as :func:`purge`.
    :returns: the rows deleted per status.
    :raises RetentionWindowTooShort: if either window is inside the policy; nothing is
        deleted.
    :raises InvalidArgument: as :func:`purge`.
    :raises InvalidTableType: if ``store`` is not an InboxStore; nothing is deleted.
    :raises InvalidBind: if ``bind`` is not an Engine or Connection; nothing is deleted.

    Example::

        result = purge_store(engine, store, older_than=policy, dead_older_than=timedelta(days=30))
        result.done, result.dead
    """
    window = resolve_window(older_than, policy)
    checked = older_than if isinstance(older_than, RetentionPolicy) else policy
    dead_window = None
    if dead_older_than is not None:
        dead_window = resolve_window(dead_older_than, checked)
    if not isinstance(store, InboxStore):
        raise InvalidTableType(f"store must be an InboxStore, not {type(store).__name__}")
    bind = _check_bind(bind)
    done_target, dead_target = store_purge_targets(store)
    options: dict[str, Any] = {
        "batch_size": batch_size,
        "on_batch": on_batch,
        "lock_timeout": lock_timeout,
        "pause": pause,
        "sleep": sleep,
    }
    done = purge_target(bind, done_target, window, **options)
    dead = 0
    if dead_window is not None:
        dead = purge_target(bind, dead_target, dead_window, **options)
    return StorePurgeResult(done=done, dead=dead)
