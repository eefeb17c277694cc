"""The claim sent with its transaction's ``BEGIN``, in one round trip (psycopg 3).

psycopg 3 sends ``BEGIN`` as a round trip of its own before a transaction's first statement.
:meth:`WithBegin.send` uses libpq's pipeline mode (PostgreSQL manual, "libpq", "Pipeline
Mode") to send psycopg's own ``BEGIN`` text (the connection's isolation level, read-only
and deferrable settings), the claim's ``INSERT … ON CONFLICT DO NOTHING`` with its values
bound as parameters (never quoted into the text) and a ``Sync`` in one write, then reads
the answers. The claim stays the transaction's first statement, its answer read before
anything else is sent.

Only where that is exactly what psycopg would have sent (:meth:`WithBegin.runs_on`): a
synchronous psycopg 3 connection on libpq 14 or newer, not in autocommit, not in pipeline
mode, whose transaction has sent nothing yet. Elsewhere (psycopg's asyncio connection,
psycopg2, asyncpg, other backends, a transaction that already ran a statement) the claim
is one statement after the driver's own ``BEGIN``, as ever.

A server error (missing table, lock timeout, serialization failure) is raised as the
exception psycopg builds from that answer, the transaction left failed as after psycopg's
own execute, so SQLAlchemy wraps it and the claim dialect classifies it as on the usual
path. The exchange runs inside SQLAlchemy's execution of the claim (a ``do_execute``
dialect event, asked for by the execution option :data:`OPTION`): events, logging, error
wrapping and invalidation are SQLAlchemy's. The claim's psycopg cursor runs nothing:
``after_cursor_execute`` listeners read its row count with :func:`statement_rowcount`.
"""

from __future__ import annotations

import datetime
import itertools
import select
import weakref
from collections.abc import Mapping
from typing import Any

from sqlalchemy import event
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine.interfaces import DBAPICursor, ExecutionContext
from sqlalchemy.sql.expression import Executable

from .driver_sql import DriverSQL

__all__ = ["OPTION", "Carried", "WithBegin", "statement_rowcount"]

#: SQLAlchemy's psycopg dialect rendering libpq's ``$1, $2…`` placeholders: the statement's
#: text for ``PQsendQueryParams``.
_DOLLAR_DIALECT = PGDialect_psycopg(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]

#: The execution option that carries one claim's :class:`Carried` to :func:`_do_execute`.
OPTION = "sa_inbox_with_begin"

# libpq's enum values (libpq-fe.h; psycopg.pq.TransactionStatus, PipelineStatus, ExecStatus,
# ConnStatus), so that nothing of psycopg is imported before a psycopg connection exists.
_TRANSACTION_IDLE = 0
#: ``PG_DIAG_SQLSTATE`` (``postgres_ext.h``) and invalid_sql_statement_name (PostgreSQL
#: manual, Appendix A, "Error Codes": a prepared statement the server does not know).
_DIAG_SQLSTATE = ord("C")
_NO_SUCH_STATEMENT = b"26000"
#: duplicate_prepared_statement (Appendix A): the name is prepared on the server already.
_DUPLICATE_STATEMENT = b"42P05"
_PIPELINE_OFF = 0
_CONNECTION_OK = 0
_COMMAND_OK = 1
_FATAL_ERROR = 7
_PIPELINE_SYNC = 10
#: libpq's version (``PQlibVersion``) from which pipeline mode exists.
_PIPELINE_LIBPQ = 140000


class WithBegin:
    """One single-row insert-or-skip as the text and parameter order of libpq's
    ``$1, $2…`` placeholders, sent with ``BEGIN`` by :meth:`send`.

    On a connection that prepares statements (psycopg's ``prepare_threshold`` is not
    ``None``, its default) the statement is prepared under :attr:`name` by its first
    exchange there (``PQsendPrepare`` in the same pipeline) and executed by name after that
    (``PQsendQueryPrepared``), so the server parses and plans it once per connection, as
    psycopg does for a statement it has run five times. Should the server no longer know
    the name (``DEALLOCATE ALL``, ``DISCARD ALL``: SQLSTATE 26000), that claim is rolled
    back and sent the usual way, and the next exchange prepares it again.

    :param driver_sql: the statement compiled for SQLAlchemy's psycopg dialect with the
        ``numeric_dollar`` paramstyle (:meth:`build`).
    """

    __slots__ = ("_encoded", "driver_sql", "name")

    def __init__(self, driver_sql: DriverSQL) -> None:
        self.driver_sql = driver_sql
        #: The prepared statement's name, one per statement and process.
        self.name = f"sa_inbox_{next(_NAMES)}".encode()
        self._encoded: dict[str, bytes] = {}

    @classmethod
    def build(cls, statement: Executable, keys: tuple[str, ...]) -> WithBegin | None:
        """``statement`` for the pipeline, or ``None`` if :class:`DriverSQL` cannot take it.

        :param statement: the single-row insert-or-skip (PostgreSQL's).
        :param keys: the keys of every row it is sent with.
        """
        driver_sql = DriverSQL.build(statement, _DOLLAR_DIALECT, keys)
        return None if driver_sql is None else cls(driver_sql)

    @staticmethod
    def runs_on(driver_connection: Any) -> bool:
        """Whether the claim can go with ``BEGIN`` on this driver connection: a synchronous
        psycopg 3 connection on libpq 14 or newer (pipeline mode), connected, not in
        autocommit, not in pipeline mode, and whose transaction has sent nothing yet."""
        if not _is_psycopg_sync(driver_connection):
            return False
        if getattr(driver_connection, "autocommit", True) is not False:
            return False
        pgconn = driver_connection.pgconn
        return bool(
            pgconn.status == _CONNECTION_OK
            and pgconn.transaction_status == _TRANSACTION_IDLE
            and pgconn.pipeline_status == _PIPELINE_OFF
        )

    def send(self, driver_connection: Any, row: Mapping[str, Any]) -> int | None:
        """Send ``BEGIN`` and the statement for ``row`` in one flush; the rows it inserted.

        :param driver_connection: a psycopg ``Connection`` that :meth:`runs_on`.
        :returns: the insert's row count (1 inserted, 0 skipped); ``None`` if the claim
            must be sent the usual way: a value has no text form here, or the server no
            longer knows the prepared statement (the transaction, which holds nothing, is
            rolled back first).
        :raises psycopg.Error: the server's error for the ``BEGIN`` or the claim, built
            from its answer as psycopg builds it (``psycopg.errors.error_from_result``),
            the transaction left failed, as after psycopg's own execute;
            ``psycopg.OperationalError`` if the connection fails (it is closed first if
            it was left in pipeline mode).
        """
        encoding = driver_connection.info.encoding
        parameters = _parameters(self.driver_sql, row, encoding)
        if parameters is None:
            return None
        values, formats = parameters
        preparing = False
        prepared = _prepared.get(driver_connection)
        if prepared is None and driver_connection.prepare_threshold is not None:
            prepared = _prepared[driver_connection] = set()
        pgconn = driver_connection.pgconn
        with driver_connection.lock:
            pgconn.enter_pipeline_mode()
            try:
                pgconn.send_query_params(_begin_command(driver_connection), None)
                if prepared is None:
                    pgconn.send_query_params(self._sql(encoding), values, None, formats)
                else:
                    preparing = self.name not in prepared
                    if preparing:
                        pgconn.send_prepare(self.name, self._sql(encoding))
                    pgconn.send_query_prepared(self.name, values, formats)
                pgconn.pipeline_sync()
                answers = _exchange(pgconn)
                pgconn.exit_pipeline_mode()
            except BaseException:
                if pgconn.pipeline_status != _PIPELINE_OFF:
                    pgconn.finish()  # its protocol state is unknown: never reuse it
                raise
        if prepared is not None:
            _note_prepared(prepared, self.name, answers, preparing)
        if all(answer.status == _COMMAND_OK for answer in answers):
            return int(answers[-1].command_tuples or 0)
        failed = next((answer for answer in answers if answer.status == _FATAL_ERROR), None)
        if failed is None or _sqlstate(failed) == _NO_SUCH_STATEMENT:
            driver_connection.rollback()  # holds nothing: the usual path sends it again
            return None
        from psycopg import errors

        raise errors.error_from_result(failed, encoding=encoding)

    def _sql(self, encoding: str) -> bytes:
        sql = self._encoded.get(encoding)
        if sql is None:
            sql = self._encoded[encoding] = self.driver_sql.sql.encode(encoding)
        return sql


#: The names of :class:`WithBegin`'s prepared statements.
_NAMES = itertools.count(1)
#: The statements prepared on each psycopg connection (gone with the connection).
_prepared: weakref.WeakKeyDictionary[Any, set[bytes]] = weakref.WeakKeyDictionary()


def _note_prepared(prepared: set[bytes], name: bytes, answers: list[Any], preparing: bool) -> None:
    """Keep ``prepared`` in step with the server: a statement prepared by this exchange
    stays prepared whatever came after (a named statement lasts till the end of the session,
    not of the transaction: PostgreSQL manual, "Frontend/Backend Protocol", "Extended
    Query"); one the server no longer knows (26000) or already had (42P05) is noted so."""
    states = {_sqlstate(answer) for answer in answers}
    if (preparing and answers[1].status == _COMMAND_OK) or _DUPLICATE_STATEMENT in states:
        prepared.add(name)
    elif _NO_SUCH_STATEMENT in states:
        prepared.discard(name)


def _sqlstate(result: Any) -> bytes | None:
    """The SQLSTATE of an error result (``PQresultErrorField``, ``PG_DIAG_SQLSTATE``)."""
    value: bytes | None = result.error_field(_DIAG_SQLSTATE)
    return value


class Carried:
    """One claim sent through :data:`OPTION`: its :class:`WithBegin`, its row, and the rows
    it inserted once sent with ``BEGIN`` (``None`` if it took the usual path)."""

    __slots__ = ("row", "rowcount", "with_begin")

    def __init__(self, with_begin: WithBegin, row: Mapping[str, Any]) -> None:
        self.with_begin = with_begin
        self.row = row
        self.rowcount: int | None = None


def statement_rowcount(cursor: Any, context: Any) -> int:
    """The rows a statement wrote, as an ``after_cursor_execute`` listener sees it: the
    cursor's ``rowcount``, except for a claim sent with ``BEGIN``, whose cursor ran
    nothing (its count is the pipeline's, kept in the :data:`OPTION` execution option).

    :param cursor: the DBAPI cursor the listener was given.
    :param context: the listener's execution context (``None`` allowed).
    :returns: the row count; -1 where the driver does not tell.
    """
    options = getattr(context, "execution_options", None) or {}
    carried = options.get(OPTION)
    if carried is not None and carried.rowcount is not None:
        return int(carried.rowcount)
    rows = getattr(cursor, "rowcount", -1)
    return rows if isinstance(rows, int) else -1


def _begin_command(driver_connection: Any) -> bytes:
    """The ``BEGIN`` psycopg sends for this connection's settings (psycopg docs,
    "Transaction characteristics": ``isolation_level``, ``read_only``, ``deferrable``)."""
    settings = (
        driver_connection.isolation_level,
        driver_connection.read_only,
        driver_connection.deferrable,
    )
    command = _BEGIN_COMMANDS.get(settings)
    if command is None:
        level, read_only, deferrable = settings
        parts = ["BEGIN"]
        if level is not None:
            parts.append(f"ISOLATION LEVEL {level.name.replace('_', ' ')}")
        if read_only is not None:
            parts.append("READ ONLY" if read_only else "READ WRITE")
        if deferrable is not None:
            parts.append("DEFERRABLE" if deferrable else "NOT DEFERRABLE")
        command = _BEGIN_COMMANDS[settings] = " ".join(parts).encode()
    return command


#: ``BEGIN`` per (isolation level, read only, deferrable).
_BEGIN_COMMANDS: dict[tuple[Any, Any, Any], bytes] = {}


def _parameters(
    driver_sql: DriverSQL, row: Mapping[str, Any], encoding: str
) -> tuple[list[bytes | None], list[int]] | None:
    """The values and formats of ``PQsendQueryParams``: text for str and int, ISO 8601 text
    for a datetime with a time zone, binary for bytes (a ``bytea`` column's), NULL for None,
    each parameter's type left to the server, which takes the column's or the cast's;
    ``None`` for any other value (the statement then takes the usual path).

    :param encoding: the connection's client encoding (``Connection.info.encoding``).
    """
    values: list[bytes | None] = []
    formats: list[int] = []
    for value in driver_sql.values(row):
        if value is None:
            values.append(None)
            formats.append(0)
        elif isinstance(value, str):
            values.append(value.encode(encoding))
            formats.append(0)
        elif isinstance(value, bytes):
            values.append(value)
            formats.append(1)
        elif isinstance(value, int) and not isinstance(value, bool):
            values.append(str(value).encode())
            formats.append(0)
        elif isinstance(value, datetime.datetime) and value.utcoffset() is not None:
            values.append(value.isoformat().encode())
            formats.append(0)
        else:
            return None
    return values, formats


def _exchange(pgconn: Any) -> list[Any]:
    """Flush what was queued, then read the answers up to the pipeline's sync, one result
    per query sent (libpq manual, "Pipeline Mode", "Processing Results": each query's
    results end with a NULL, the sync with a PIPELINE_SYNC)."""
    fileno = pgconn.socket
    while pgconn.flush():
        _wait(fileno, write=True)
        pgconn.consume_input()
    results: list[Any] = []
    while True:
        while pgconn.is_busy():
            _wait(fileno, write=False)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            continue
        if result.status == _PIPELINE_SYNC:
            return results
        results.append(result)


def _wait(fileno: int, *, write: bool) -> None:
    """Block until the socket can be read (or, ``write``, read or written): ``select()``
    below its ``FD_SETSIZE`` limit of 1024 descriptors, ``poll()`` above."""
    if fileno < _FD_SETSIZE or not hasattr(select, "poll"):
        select.select([fileno], [fileno] if write else [], [])
        return
    poller = select.poll()
    poller.register(fileno, select.POLLIN | (select.POLLOUT if write else 0))
    poller.poll()


#: The descriptors ``select()`` takes (``FD_SETSIZE``, select(2)).
_FD_SETSIZE = 1024


#: psycopg's synchronous Connection class, if libpq has pipeline mode; looked up at the
#: first claim on a psycopg connection (psycopg is then imported already).
_sync_connection: list[type | None] = []


def _is_psycopg_sync(driver_connection: Any) -> bool:
    """Whether ``driver_connection`` is a synchronous psycopg 3 connection whose libpq has
    pipeline mode (libpq 14, ``PQlibVersion``)."""
    if not _sync_connection:
        import psycopg

        supported = psycopg.pq.version() >= _PIPELINE_LIBPQ
        _sync_connection.append(psycopg.Connection if supported else None)
    connection_class = _sync_connection[0]
    return connection_class is not None and isinstance(driver_connection, connection_class)


@event.listens_for(PGDialect_psycopg, "do_execute")
def _do_execute(
    cursor: DBAPICursor, statement: str, parameters: Any, context: ExecutionContext
) -> bool:
    """SQLAlchemy's ``do_execute`` event: a claim with :data:`OPTION` goes with ``BEGIN``
    where :meth:`WithBegin.runs_on` its connection, else (or when :meth:`WithBegin.send`
    gives ``None``) the usual way, by the dialect's own ``do_execute``; a server error is
    raised from here, inside SQLAlchemy's execution, which wraps it. Every other
    statement: untouched."""
    carried = context.execution_options.get(OPTION)
    if carried is None:
        return False
    driver_connection = cursor.connection
    if WithBegin.runs_on(driver_connection):
        carried.rowcount = carried.with_begin.send(driver_connection, carried.row)
        if carried.rowcount is not None:
            return True
    context.dialect.do_execute(cursor, statement, parameters, context)
    return True
