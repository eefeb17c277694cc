"""What goes back into the pool after a transaction: a clean connection, or none.

SQLAlchemy's pool rolls a connection back when it is returned ("reset on return", SQLAlchemy
docs, "Reset On Return") and trusts what the dialect tells it. That fails when a handler
left the driver in a state SQLAlchemy does not track:

* **a statement still in flight** while the transaction is rolled back: asyncpg refuses the
  ``ROLLBACK`` ("another operation is in progress"); SQLAlchemy's asyncpg adapter then
  forgets its transaction while the server keeps it open, so the pool's own rollback does
  nothing and the connection goes back to the pool inside a transaction, holding its locks;
  every later ``BEGIN`` on it fails ("cannot use Connection.transaction() in a manually
  started transaction"). The tasks a handler itself left running are stopped first, once
  their statement has ended (:mod:`sa_inbox.asyncio._bridge`); this module covers the rest;
* **a result still being read**: a psycopg ``COPY`` or ``cursor.stream()`` left open holds
  the connection's lock, and the rollback waits on it for ever.

:func:`released_clean` wraps each transaction sa-inbox runs a handler or its own statements
in (:func:`sa_inbox.guard.owned_transaction` for the runner, the store's workers and every
broker adapter; the store's and the outbox relay's short transactions). When the block
raises, a connection whose driver reports a statement running (on an async driver, still
after :data:`BUSY_WAIT_SECONDS`: another task's statement is let finish and is rolled back
with the transaction) or a closed connection is invalidated instead of rolled back. And
each connection is checked again when it returns to its pool, after SQLAlchemy's rollback:
unless its driver reports it idle, it is invalidated (``ConnectionPoolEntry.invalidate()``;
SQLAlchemy docs, "Dealing with Disconnects", "More on Invalidation"): closed, so the server
ends its transaction and releases its locks, and the pool opens a new connection for the
next checkout. Each invalidation is logged (``inbox.connection.invalidated``). The states
are read from the driver without a round trip
(:meth:`~sa_inbox.dialects.ClaimDialect.driver_state`: psycopg, asyncpg, PyMySQL, aiomysql,
sqlite3, aiosqlite; another driver's rollback is trusted, as SQLAlchemy's pool does).

The check listens once, at import, on the ``Pool`` class (SQLAlchemy docs, "Core Events",
``PoolEvents.checkin``) and acts only on connections :func:`released_clean` marked in
``Connection.info``; for every other checkin it is one dictionary look-up.

Not undone: state a handler set on the connection's session (``SET search_path``, ``SET
SESSION sql_mode``, a temporary table, a prepared statement, a session-level lock such as
``pg_advisory_lock`` or MySQL's ``GET_LOCK``, which outlive a rollback): the connection is
idle, so it goes back to the pool with them. Use the transaction-scoped forms (``SET
LOCAL``, ``pg_advisory_xact_lock``, MariaDB's ``SET STATEMENT … FOR``), or undo them in a
``PoolEvents.reset`` listener. Closing a connection under another task's running statement
(past :data:`BUSY_WAIT_SECONDS`) has limits of its own: psycopg's socket stays registered
with the event loop until that statement's waiter wakes (the next connection, given the
same file descriptor, may fail once), and SQLite keeps a closed connection's locks until
the statement's cursor is freed (sqlite3 closes a connection with an unfinalized statement
only then). A statement such a task sends later, on a connection back in the pool, is beyond
this check: give work done outside the handler's own tasks its own session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import AdaptedConnection, Connection
from sqlalchemy.pool import ConnectionPoolEntry, Pool

from ._compat import await_only
from .dialects import DriverState, backend_for

__all__ = ["BUSY_POLL_SECONDS", "BUSY_WAIT_SECONDS", "released_clean", "statement_running"]

logger = logging.getLogger(__name__)

#: ``Connection.info`` key: the dialect name of a connection to check at its next checkin.
_CHECK = "sa_inbox.check_on_checkin"

#: States in which a failed transaction's connection is not rolled back but invalidated.
_NOT_ROLLED_BACK = (DriverState.BUSY, DriverState.BROKEN)

#: Seconds a failed transaction waits for a statement another task is running on its
#: (async driver's) connection to end before the connection is invalidated.
BUSY_WAIT_SECONDS = 10.0
#: Seconds between two looks at a busy async driver's state.
BUSY_POLL_SECONDS = 0.01


@contextmanager
def released_clean(connections: Callable[[], Iterable[Connection]]) -> Iterator[None]:
    """Make the connections of the transaction in this block go back to their pool clean.

    Put it inside the transaction's block (it exits before the commit or rollback). When
    the block raises, a connection whose driver is busy or broken is invalidated at once, so
    that no rollback is sent on it. Either way, every connection is checked again when it
    returns to its pool (see the module).

    :param connections: called when the block ends: the transaction's connections.
    """
    try:
        yield
    except BaseException:
        for connection in connections():
            _before_rollback(connection)
        raise
    for connection in connections():
        if _usable(connection):
            connection.info[_CHECK] = connection.dialect.name


def statement_running(connections: Iterable[Connection]) -> bool:
    """Whether the driver of one of ``connections`` reports a statement running
    (:attr:`~sa_inbox.dialects.DriverState.BUSY`). Nothing is sent: callable from a
    coroutine as well as from SQLAlchemy's greenlet."""
    return any(
        _usable(connection)
        and _state(connection.dialect.name, connection.connection.dbapi_connection)
        is DriverState.BUSY
        for connection in connections
    )


def _usable(connection: Connection) -> bool:
    return not connection.invalidated and not connection.closed


def _before_rollback(connection: Connection) -> None:
    """Invalidate ``connection`` if its driver is busy or broken (on an async driver, once
    a statement another task runs on it has had :data:`BUSY_WAIT_SECONDS` to end); else mark
    it for the checkin check."""
    if not _usable(connection):
        return
    dbapi_connection = connection.connection.dbapi_connection
    state = _state(connection.dialect.name, dbapi_connection)
    if state is DriverState.BUSY and isinstance(dbapi_connection, AdaptedConnection):
        state = _wait_while_busy(connection.dialect.name, dbapi_connection)
    if state in _NOT_ROLLED_BACK:
        _log(state, "before the rollback")
        connection.invalidate()
    else:
        connection.info[_CHECK] = connection.dialect.name


def _wait_while_busy(dialect_name: str, dbapi_connection: Any) -> DriverState | None:
    """The driver's state once it is no longer busy, or after :data:`BUSY_WAIT_SECONDS`,
    polled every :data:`BUSY_POLL_SECONDS` on the event loop (the caller runs in
    SQLAlchemy's greenlet, as every use of an async driver does): another task's statement
    ends meanwhile, and is rolled back with the transaction. Closing the connection under
    it instead would leave its socket registered with the loop (psycopg: the next
    connection, given the same file descriptor, fails to register)."""
    deadline = time.monotonic() + BUSY_WAIT_SECONDS
    state = _state(dialect_name, dbapi_connection)
    while state is DriverState.BUSY and time.monotonic() < deadline:
        await_only(asyncio.sleep(BUSY_POLL_SECONDS))
        state = _state(dialect_name, dbapi_connection)
    return state


def _on_checkin(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
    """``PoolEvents.checkin``: invalidate a marked connection that is not idle."""
    dialect_name = record.info.pop(_CHECK, None)
    if dialect_name is None or dbapi_connection is None:
        return
    state = _state(dialect_name, dbapi_connection)
    if state is not None and state is not DriverState.IDLE:
        _log(state, "after the pool's reset")
        record.invalidate()


def _state(dialect_name: str, dbapi_connection: Any) -> DriverState | None:
    """The driver's state; :attr:`DriverState.BROKEN` if reading it fails."""
    try:
        return backend_for(dialect_name).claim.driver_state(dbapi_connection)
    except Exception:  # a state that cannot be read is not a clean one
        return DriverState.BROKEN


def _log(state: DriverState, when: str) -> None:
    logger.warning(
        "connection invalidated: its driver was %s %s; the pool opens a new one",
        state.value,
        when,
        extra={
            "event": "inbox.connection.invalidated",
            "action": "invalidate",
            "state": state.value,
        },
    )


event.listen(Pool, "checkin", _on_checkin)
