"""SQLite: ``INSERT … ON CONFLICT (message_id, consumer_name) DO NOTHING``.

The upsert clause needs SQLite 3.24.0 and ``RETURNING`` 3.35.0 (SQLite manual, "UPSERT" and
"RETURNING"); the library version is checked at the first claim. SQLite has one writer at a
time: a second writer waits up to the driver's ``timeout`` and then fails with SQLITE_BUSY,
reported as :class:`~sa_inbox.exc.TransientClaimError`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import DBAPIError

from ..exc import UnsupportedBackend
from .backend import Backend
from .base import DriverState, OnConflictDoNothingClaim, driver_error
from .purge import PurgeDialect
from .store_claim import Limit, StoreClaimDialect

__all__ = ["BACKEND", "SQLiteClaim", "SQLitePurge", "SQLiteStoreClaim"]

UPSERT_VERSION = (3, 24, 0)
RETURNING_VERSION = (3, 35, 0)
#: Primary result codes (SQLite manual, "Result and Error Codes"); extended codes keep
#: the primary code in their low byte.
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_CONSTRAINT_PRIMARYKEY = 1555
SQLITE_CONSTRAINT_UNIQUE = 2067


class SQLiteClaim(OnConflictDoNothingClaim):
    """Claims on SQLite through SQLAlchemy's ``sqlite.insert()``."""

    insert_factory = sqlite.insert

    def check_backend(self, conn: sa.Connection) -> None:
        version = conn.dialect.dbapi.sqlite_version_info if conn.dialect.dbapi else (0,)
        if tuple(version) < UPSERT_VERSION:
            raise UnsupportedBackend(
                f"SQLite {'.'.join(map(str, version))} has no ON CONFLICT DO NOTHING; "
                "sa-inbox needs SQLite 3.24.0 or newer"
            )

    def before_savepoint(self, conn: sa.Connection) -> None:
        """Start the driver's transaction if it has not started yet.

        Python's sqlite3 module in its legacy transaction mode emits ``BEGIN`` only before
        INSERT/UPDATE/DELETE, so a ``SAVEPOINT`` sent first would open a transaction of its
        own that ``RELEASE`` commits, outside the caller's transaction (SQLAlchemy docs,
        "SQLite: Serializable isolation / Savepoints / Transactional DDL"). Emitting
        ``BEGIN`` first puts the savepoint inside the transaction the caller will commit or
        roll back.
        """
        if not self.driver_in_transaction(conn.connection.dbapi_connection):
            conn.exec_driver_sql("BEGIN")

    def driver_in_transaction(self, dbapi_connection: Any) -> bool:
        """Whether the driver's connection has begun a transaction (:mod:`sqlite3`'s
        ``in_transaction``: SQLite is not in autocommit mode, Python docs, "sqlite3 —
        Connection.in_transaction"). A driver that tells it otherwise overrides this hook.

        :param dbapi_connection: the DBAPI connection (``conn.connection.dbapi_connection``).
        """
        return bool(getattr(_driver(dbapi_connection), "in_transaction", False))

    def read_driver_state(self, driver_connection: Any) -> DriverState | None:
        """:mod:`sqlite3` and aiosqlite: ``in_transaction`` (Python docs, "sqlite3 —
        Connection.in_transaction"). Neither tells whether a statement is running (an
        aiosqlite statement of another task is seen by :meth:`driver_state`)."""
        try:
            in_transaction = getattr(driver_connection, "in_transaction", None)
        except (sqlite3.ProgrammingError, ValueError):  # closed (aiosqlite: ValueError)
            return DriverState.BROKEN
        if not isinstance(in_transaction, bool):
            return None
        return DriverState.IN_TRANSACTION if in_transaction else DriverState.IDLE

    def supports_returning(self, conn: sa.Connection) -> bool:
        dbapi = conn.dialect.dbapi
        return dbapi is not None and tuple(dbapi.sqlite_version_info) >= RETURNING_VERSION

    def is_duplicate(self, exc: DBAPIError, table: sa.Table) -> bool:
        orig = driver_error(exc)
        code = getattr(orig, "sqlite_errorcode", None)
        if code not in (SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CONSTRAINT_UNIQUE):
            return False
        # SQLite names the columns, not the constraint: "UNIQUE constraint failed:
        # t.message_id, t.consumer_name".
        expected = f"{table.name}.message_id, {table.name}.consumer_name"
        return expected in str(orig)

    def is_transient(self, exc: DBAPIError) -> bool:
        orig = driver_error(exc)
        code = getattr(orig, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED)
        return isinstance(orig, sqlite3.OperationalError) and "database is locked" in str(orig)

    def is_missing_table(self, exc: DBAPIError) -> bool:
        # SQLITE_ERROR (1) carries no finer code: the message is the only signal.
        orig = driver_error(exc)
        return isinstance(orig, sqlite3.OperationalError) and str(orig).startswith(
            ("no such table", "no such column")
        )

    def driver_autocommit(self, dbapi_connection: Any) -> bool:
        """:mod:`sqlite3` outside a transaction with ``isolation_level=None`` (no implicit
        ``BEGIN``) or Python 3.12's ``autocommit=True``: each statement commits on its own
        (Python docs, "sqlite3 — Transaction control"). SQLAlchemy's documented savepoint
        recipe sets ``isolation_level=None`` and emits ``BEGIN`` itself, so an open
        transaction (:meth:`driver_in_transaction`) is not autocommit."""
        if self.driver_in_transaction(dbapi_connection):
            return False
        driver = _driver(dbapi_connection)
        return (
            getattr(driver, "isolation_level", "") is None
            or getattr(driver, "autocommit", False) is True
        )


class SQLitePurge(PurgeDialect):
    """Purge batches on SQLite: the primary-key subquery, each batch ``BEGIN IMMEDIATE``.

    ``DELETE FROM t WHERE (message_id, consumer_name) IN (SELECT … WHERE received_at < ?
    ORDER BY received_at LIMIT ?)`` (row values: SQLite 3.15, "Row Values"). ``BEGIN
    IMMEDIATE`` takes the one write lock first and waits up to the driver's ``timeout`` (a
    deferred transaction that reads first can fail at once with SQLITE_BUSY: SQLite manual,
    "sqlite3_busy_handler"); :attr:`pause` between batches lets waiting writers in.

    .. seealso:: ``docs/discussions/retention.md``, "The purge on SQLite".
    """

    concurrency = "one writer at a time: BEGIN IMMEDIATE per batch, a pause between batches"
    pause = 0.1

    @contextmanager
    def exclusive(self, conn: sa.Connection, table: sa.Table, timeout: float) -> Iterator[None]:
        dbapi_connection: Any = conn.connection.dbapi_connection
        previous = getattr(dbapi_connection, "isolation_level", None)
        if previous is None:  # autocommit: pysqlite emits no BEGIN at all
            yield
            return
        dbapi_connection.isolation_level = "IMMEDIATE"  # pysqlite: BEGIN IMMEDIATE before DML
        try:
            yield
        finally:
            dbapi_connection.isolation_level = previous


class SQLiteStoreClaim(StoreClaimDialect):
    """The store's claim on SQLite: one writer at a time instead of ``SKIP LOCKED``.

    SQLite has no row locks. Every store transaction that writes starts with ``BEGIN
    IMMEDIATE``, which takes the database's write lock at once (SQLite manual, "BEGIN
    TRANSACTION"), so two claimers run one after the other and the second sees the first's
    rows as claimed; then ``SELECT id … LIMIT n``, ``UPDATE … WHERE id IN (…)`` and a
    ``SELECT``. A claimer waits for the lock up to the driver's ``timeout``.
    """

    isolation_level = None

    def __init__(self, claim_dialect: SQLiteClaim | None = None) -> None:
        #: The claim dialect whose version check and driver probe this one shares.
        self.claim_dialect = claim_dialect if claim_dialect is not None else SQLiteClaim()

    def check_backend(self, conn: sa.Connection) -> None:
        self.claim_dialect.check_backend(conn)

    def begin_write(self, conn: sa.Connection) -> None:
        """``BEGIN IMMEDIATE`` if the driver has not begun a transaction yet.

        Python's sqlite3 module (legacy transaction control) begins only before DML, with a
        deferred ``BEGIN``; an explicit ``BEGIN IMMEDIATE`` first makes it use this
        transaction, committed or rolled back by SQLAlchemy as usual.
        """
        if not self.claim_dialect.driver_in_transaction(conn.connection.dbapi_connection):
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    def lock(self, candidates: sa.Select[Any], limit: Limit) -> sa.Select[Any]:
        return candidates.limit(limit)


_CLAIM = SQLiteClaim()
#: This backend's dialects, registered once in :mod:`sa_inbox.dialects` (see ``backend_for``).
BACKEND = Backend(
    names=("sqlite",),
    claim=_CLAIM,
    purge=SQLitePurge(),
    store_claim_dialect=SQLiteStoreClaim(_CLAIM),
)


def _driver(dbapi_connection: Any) -> Any:
    """The driver's own connection: :mod:`sqlite3`'s itself, or aiosqlite's behind
    SQLAlchemy's adapted connection (``AdaptedConnection.driver_connection``), which alone
    has ``in_transaction`` and ``isolation_level``."""
    return getattr(dbapi_connection, "driver_connection", dbapi_connection)
