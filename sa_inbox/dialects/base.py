"""The shape every backend shares: build an insert-or-skip, run it, read which rows were new.

A backend module subclasses :class:`ClaimDialect` and specialises only what differs: the
statement (:meth:`ClaimDialect.insert_or_skip`), how to tell that a row was skipped, and which
driver error codes mean "duplicate key" and "retry the transaction".
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.sql.expression import Executable

from .._compat import adapter_executing, autocommit_isolation
from ..exc import MissingTable, TransientClaimError
from .driver_sql import DriverSQL

__all__ = [
    "EXECUTION_OPTIONS",
    "ClaimDialect",
    "DriverState",
    "OnConflictDoNothingClaim",
    "Row",
    "driver_error",
    "sqlstate_of",
]

#: One row to claim: column name -> value, always with ``message_id`` and ``consumer_name``.
Row = Mapping[str, Any]

#: Rows per statement for batch claims; more are sent as several statements, in id order.
MAX_ROWS_PER_STATEMENT = 1000

#: The execution options of every claim statement: ``rowcount`` kept (psycopg 3 reports -1
#: without ``preserve_rowcount``), and batches of at most :data:`MAX_ROWS_PER_STATEMENT`
#: rows per multi-row INSERT; given per execute (see ``docs/discussions/claim-statements.md``).
EXECUTION_OPTIONS: Mapping[str, Any] = {
    "preserve_rowcount": True,
    "insertmanyvalues_page_size": MAX_ROWS_PER_STATEMENT,
}


def driver_error(exc: DBAPIError) -> Any:
    """The DBAPI driver's own exception wrapped by SQLAlchemy's ``exc``."""
    return exc.orig


def sqlstate_of(exc: DBAPIError) -> str | None:
    """The SQLSTATE of a driver error, if the driver exposes one (psycopg 3 and psycopg2 do).

    :param exc: SQLAlchemy's wrapper of the driver's exception.
    :returns: a five-character SQLSTATE such as ``"23505"``, or ``None``.
    """
    orig = driver_error(exc)
    for attribute in ("sqlstate", "pgcode"):
        value = getattr(orig, attribute, None)
        if isinstance(value, str):
            return value
    return None


class DriverState(enum.Enum):
    """What a driver's connection reports of itself, read without a round trip (see
    :meth:`ClaimDialect.driver_state`)."""

    #: No transaction open, no statement running: fit for the next user of the pool.
    IDLE = "idle"
    #: A transaction is open (or failed and not yet rolled back).
    IN_TRANSACTION = "in a transaction"
    #: A statement is still running, or its results are still being read (a COPY, a
    #: streamed result, another task's statement).
    BUSY = "busy"
    #: The connection is closed or its state cannot be read.
    BROKEN = "broken"


class ClaimDialect(abc.ABC):
    """Insert-or-skip claims for one database backend.

    Subclasses set :attr:`name` and override :meth:`insert_or_skip`, :meth:`is_duplicate`
    and :meth:`is_transient`; the defaults here implement the common flow:

    * :meth:`claim_one` runs one statement and reads ``rowcount`` (1 = new, 0 = skipped);
    * :meth:`claim_many` runs one statement per :data:`MAX_ROWS_PER_STATEMENT` rows with
      ``RETURNING message_id`` where the backend supports it, else one statement per row.

    Neither commits nor rolls back the caller's transaction.

    Its methods are of two kinds: the claim's :attr:`FLOW` (how a claim is sent and read),
    which a claim strategy defines, and everything else, the backend's knowledge (its checks,
    its error codes, its driver's state), which a strategy over another backend's dialect
    takes from that dialect (:class:`~sa_inbox.dialects.generic.SavepointClaim`).
    """

    #: The methods of the claim's flow; every other public method is backend knowledge.
    FLOW: ClassVar[frozenset[str]] = frozenset(
        {
            "insert_or_skip",
            "supports_returning",
            "with_begin",
            "claim_one",
            "claim_many",
            "claim_chunk",
            "execute",
            "inserted_count",
            "translate_errors",
            "translate_configuration_errors",
            "raise_translated",
            "duplicate_or_raise",
        }
    )

    def check_backend(self, conn: Connection) -> None:
        """Raise :class:`~sa_inbox.exc.UnsupportedBackend` if ``conn``'s server is too old.

        Called once per engine, at the first claim. The default accepts every server.
        """
        return None

    def check_table(self, conn: Connection, table: sa.Table) -> bool:
        """Raise :class:`~sa_inbox.exc.UnsupportedBackend` if ``table`` as it exists on the
        server would merge distinct keys (see :meth:`MySQLClaim.check_table`).

        Called at the first claim per engine, in the caller's transaction.

        :returns: True once the table was checked (False if it does not exist yet, so the
            check runs again at the next claim). The default checks nothing.
        """
        return True

    def before_savepoint(self, conn: Connection) -> None:
        """Make sure a SAVEPOINT on ``conn`` nests inside the caller's transaction.

        The default does nothing; see :meth:`SQLiteClaim.before_savepoint`.
        """
        return None

    def causal_select(self, conn: Connection, *entities: Any) -> sa.Select[Any]:
        """``select(*entities)``, made to see every transaction the database cluster
        committed before it is sent, whichever node ``conn`` is on (:meth:`Inbox.is_processed
        <sa_inbox.Inbox.is_processed>` with ``causal=True``).

        The default is a plain :func:`~sqlalchemy.select`: a read on the server that
        committed is causal already. Overridden for MariaDB Galera
        (:meth:`~sa_inbox.dialects.mysql.MySQLClaim.causal_select`).

        :param conn: the connection the query will run on.
        :param entities: what to select, as for :func:`~sqlalchemy.select`.
        """
        return sa.select(*entities)

    @abc.abstractmethod
    def insert_or_skip(self, table: sa.Table) -> Executable:
        """The statement that inserts one row into ``table`` and skips a duplicate silently.

        Its values are given as parameters at execution, so one statement serves every
        claim and SQLAlchemy compiles it once per engine (by its cache key). A batch sends
        it as an executemany (see :meth:`claim_many`).

        :param table: the processed-messages table, or the inbox store's table.
        """

    def is_autocommit(self, conn: Connection) -> bool:
        """Whether ``conn`` commits each statement on its own: SQLAlchemy's
        ``isolation_level="AUTOCOMMIT"`` (on the connection, the engine or
        ``create_engine()``; SQLAlchemy docs, "Setting Transaction Isolation Levels
        including DBAPI Autocommit"), or autocommit set on the driver itself
        (:meth:`driver_autocommit`).

        :param conn: a Connection; its DBAPI connection is checked out if it was not yet.
        """
        return autocommit_isolation(conn) or self.driver_autocommit(
            conn.connection.dbapi_connection
        )

    def driver_autocommit(self, dbapi_connection: Any) -> bool:
        """Whether the driver's own connection commits each statement on its own.

        SQLAlchemy's ``isolation_level="AUTOCOMMIT"`` is checked apart (see
        :meth:`is_autocommit`); this hook sees what the driver was told directly, such as
        ``create_engine(url, connect_args={"autocommit": True})``. The default reads a
        boolean ``autocommit`` attribute, which psycopg 3, psycopg2, oracledb and Python
        3.12's :mod:`sqlite3` (``autocommit=True``) expose; backends whose driver reports it
        otherwise override this.

        :param dbapi_connection: the DBAPI connection (``conn.connection.dbapi_connection``).
        """
        return getattr(dbapi_connection, "autocommit", False) is True

    def driver_state(self, dbapi_connection: Any) -> DriverState | None:
        """What the driver's connection reports of itself, without a round trip.

        :mod:`sa_inbox.pool_guard` asks it before a failed transaction is rolled back
        (a busy connection is not rolled back but invalidated) and when the connection
        returns to its pool (anything but idle is invalidated). An async driver's
        connection is :attr:`DriverState.BUSY` while another task runs a statement on it
        (:func:`~sa_inbox._compat.adapter_executing`); otherwise the backend reads its
        driver (:meth:`read_driver_state`).

        :param dbapi_connection: the pool's DBAPI connection
            (``conn.connection.dbapi_connection``), adapted or not.
        :returns: the state, or ``None`` if the driver does not tell (the rollback is
            then trusted, as SQLAlchemy's pool does).
        """
        if adapter_executing(dbapi_connection):
            return DriverState.BUSY
        return self.read_driver_state(
            getattr(dbapi_connection, "driver_connection", dbapi_connection)
        )

    def read_driver_state(self, driver_connection: Any) -> DriverState | None:
        """The state the driver's own connection reports (see :meth:`driver_state`); the
        default knows no driver: ``None``.

        :param driver_connection: the driver's connection (an async driver's, behind
            SQLAlchemy's adapter: ``AdaptedConnection.driver_connection``).
        """
        return None

    def json_text(
        self, text: sa.BindParameter[str], column: sa.Column[Any]
    ) -> sa.ColumnElement[Any]:
        """The SQL that writes JSON sent as text (``text``, already serialised) into the JSON
        ``column``: the text itself by default, as MySQL/MariaDB (MySQL manual, "The JSON Data
        Type": a JSON column takes a valid JSON string; MariaDB's ``JSON`` is ``LONGTEXT``
        checked by ``JSON_VALID``) and SQLite (its JSON is text) store it. Overridden where
        the server needs a cast (:class:`~sa_inbox.dialects.postgresql.PostgreSQLClaim`).

        :param text: a ``Text`` bind parameter holding the JSON document.
        :param column: the JSON column written.
        """
        return text

    def ids_in(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        """``column`` is one of the list bound as ``ids``: an expanding ``IN`` (one
        parameter per id), PostgreSQL's one array."""
        return column.in_(sa.bindparam("ids", expanding=True))

    def supports_returning(self, conn: Connection) -> bool:
        """Whether ``INSERT … RETURNING`` works with this backend's insert-or-skip."""
        return bool(conn.dialect.insert_returning)

    def with_begin(self, statement: Executable, dialect: sa.Dialect, keys: Sequence[str]) -> Any:
        """The single-row ``statement`` in the form sent together with the transaction's
        ``BEGIN`` on ``dialect``'s driver, for :meth:`claim_one` to send when the claim
        opens its transaction; ``None`` where there is none (the default: the claim is
        sent after the driver's own ``BEGIN``, or in a transaction the driver begins
        implicitly). Overridden for psycopg 3
        (:class:`~sa_inbox.dialects.with_begin.WithBegin`).

        :param statement: the single-row insert-or-skip.
        :param dialect: the connection's SQLAlchemy dialect.
        :param keys: the keys of every row it is sent with.
        """
        return None

    # -- the flow ---------------------------------------------------------------------

    def claim_one(
        self, conn: Connection, table: sa.Table, statement: Executable | DriverSQL, row: Row
    ) -> bool:
        """Run the cached single-row ``statement`` for ``row``; True if the row was inserted.

        :raises TransientClaimError, MissingTable: as :meth:`translate_errors`.
        """
        try:
            result = self.execute(conn, statement, row)
        except DBAPIError as exc:
            self.raise_translated(exc)
            raise
        return self.inserted_count(conn, result) == 1

    def claim_many(
        self,
        conn: Connection,
        table: sa.Table,
        rows: Sequence[Row],
        statement: Executable | None = None,
    ) -> set[str]:
        """Insert-or-skip ``rows`` (already validated and sorted) and return the new ids.

        :param statement: the single-row statement to send (default
            :meth:`insert_or_skip`); with ``RETURNING`` it is sent as one executemany.
        """
        single = self.insert_or_skip(table) if statement is None else statement
        if not self.supports_returning(conn):
            return {row["message_id"] for row in rows if self.claim_one(conn, table, single, row)}
        # One cached statement, sent as an executemany: SQLAlchemy's "insertmanyvalues"
        # turns it into one multi-row INSERT … RETURNING per chunk (SQLAlchemy docs,
        # '"Insert Many Values" Behavior for INSERT statements'), without compiling a
        # statement of 2 x N parameters for every batch as .values([...]) would.
        statement = single.returning(table.c.message_id)  # type: ignore[attr-defined]
        claimed: set[str] = set()
        for start in range(0, len(rows), MAX_ROWS_PER_STATEMENT):
            chunk = rows[start : start + MAX_ROWS_PER_STATEMENT]
            with self.translate_errors():
                claimed.update(self.claim_chunk(conn, table, statement, chunk))
        return claimed

    def claim_chunk(
        self, conn: Connection, table: sa.Table, statement: Executable, chunk: Sequence[Row]
    ) -> set[str]:
        """Send one multi-row ``INSERT … RETURNING message_id`` for ``chunk`` (at most
        :data:`MAX_ROWS_PER_STATEMENT` distinct rows); return the ids it inserted."""
        return set(self.execute(conn, statement, chunk).scalars().all())

    def execute(
        self,
        conn: Connection,
        statement: Executable | DriverSQL,
        params: Row | Sequence[Row] | None,
    ) -> CursorResult[Any]:
        """Execute ``statement`` keeping ``rowcount`` (psycopg 3 reports -1 without it).

        :param statement: a statement, or a single-row one as driver SQL (given one row).
        :param params: one row, several rows (an executemany of at most
            :data:`MAX_ROWS_PER_STATEMENT`, sent as one statement), or None.
        """
        options = EXECUTION_OPTIONS
        if isinstance(statement, DriverSQL):
            assert isinstance(params, Mapping), "driver SQL is a single-row statement"
            return statement.execute(conn, params, options)
        if params is None:
            return conn.execute(statement, execution_options=options)
        if isinstance(params, Mapping):
            row = params if type(params) is dict else dict(params)
            return conn.execute(statement, row, execution_options=options)
        return conn.execute(statement, [dict(p) for p in params], execution_options=options)

    def inserted_count(self, conn: Connection, result: CursorResult[Any]) -> int:
        """Rows the insert-or-skip wrote: the statement's ``rowcount`` by default."""
        return result.rowcount

    # -- errors -----------------------------------------------------------------------

    def is_duplicate(self, exc: DBAPIError, table: sa.Table) -> bool:
        """True only if ``exc`` is a duplicate-key conflict on ``table``'s primary key."""
        return False

    def is_transient(self, exc: DBAPIError) -> bool:
        """True if ``exc`` is a serialization failure or deadlock: retry the transaction."""
        return False

    def is_missing_table(self, exc: DBAPIError) -> bool:
        """True if ``exc`` says a table or column does not exist (a configuration error)."""
        return False

    def is_unavailable(self, exc: DBAPIError) -> bool:
        """True if ``exc`` means the database cannot be reached or cannot take writes now
        (a restart, a shutdown, a failover in progress): no message is at fault, so the
        delivery is held and the database probed (:mod:`sa_inbox.outage`), not retried.

        The default: SQLAlchemy's own disconnect detection, which set
        ``exc.connection_invalidated`` (the dialect's ``is_disconnect``; SQLAlchemy docs,
        "Dealing with Disconnects"). Backends add their server's codes.
        """
        return bool(exc.connection_invalidated)

    @contextmanager
    def translate_configuration_errors(self) -> Iterator[None]:
        """Re-raise "no such table / column" driver errors as
        :class:`~sa_inbox.exc.MissingTable` (chained), leaving every other error as it is."""
        try:
            yield
        except DBAPIError as exc:
            if self.is_missing_table(exc):
                raise MissingTable(f"a table or column does not exist: {exc.orig}") from exc
            raise

    @contextmanager
    def translate_errors(self) -> Iterator[None]:
        """Re-raise transient driver errors as :class:`~sa_inbox.exc.TransientClaimError`,
        missing tables as :class:`~sa_inbox.exc.MissingTable` (see :meth:`raise_translated`)."""
        try:
            yield
        except DBAPIError as exc:
            self.raise_translated(exc)
            raise

    def raise_translated(self, exc: DBAPIError) -> None:
        """Raise ``exc``'s translation, chained, if it has one; return otherwise (the caller
        re-raises ``exc``).

        :raises TransientClaimError: for a deadlock or serialization failure.
        :raises MissingTable: for a missing table or column.
        """
        if self.is_transient(exc):
            raise TransientClaimError(
                f"claim aborted by the database, retry the transaction: {exc.orig}"
            ) from exc
        if self.is_missing_table(exc):
            raise MissingTable(f"the inbox table does not exist: {exc.orig}") from exc

    def duplicate_or_raise(self, exc: IntegrityError, table: sa.Table) -> bool:
        """Return False for a duplicate-key conflict on ``table``; re-raise anything else."""
        if self.is_duplicate(exc, table):
            return False
        raise exc


class _OnConflictInsert(Protocol):
    def on_conflict_do_nothing(self, *, index_elements: list[sa.Column[Any]]) -> Executable: ...


class OnConflictDoNothingClaim(ClaimDialect):
    """The shape shared by backends with ``INSERT … ON CONFLICT (key) DO NOTHING``.

    Subclasses name SQLAlchemy's dialect-specific ``insert()`` factory in
    :attr:`insert_factory` (``postgresql.insert``, ``sqlite.insert``).
    """

    insert_factory: ClassVar[Any]

    def insert_or_skip(self, table: sa.Table) -> Executable:
        statement: _OnConflictInsert = type(self).insert_factory(table)
        return statement.on_conflict_do_nothing(
            index_elements=[table.c.message_id, table.c.consumer_name]
        )
