"""Every use of a SQLAlchemy name that SQLAlchemy does not document as public, in one place.

Each function here wraps one such use, says which SQLAlchemy versions have it, and has a
fallback that uses documented API only. The fallback runs where the private name is
missing; it is never needed on the supported versions (SQLAlchemy 2.0.28 to 2.1.x, which
all have every name used here), but it keeps sa-inbox working, perhaps a little slower or
less strict, should a release remove one. ``tests/unit/test_compat.py`` runs each function
on the installed SQLAlchemy and calls each fallback directly.

Outside this module, sa-inbox uses SQLAlchemy's public API only. The last sections hold the
two private names of CPython's own library that sa-inbox uses (:mod:`asyncio` and
:mod:`warnings`) and the one of FastStream's, under the same rule: one function each, a
fallback where they are missing.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.sql.expression import ClauseElement

__all__ = [
    "TraversalKind",
    "adapted_warning_count",
    "adapter_executing",
    "autocommit_isolation",
    "await_only",
    "cache_key",
    "faststream_handler",
    "greenlet_spawn",
    "result_cursor",
    "session_options",
    "sort_indexes",
    "task_failed_unseen",
    "unawaited_coroutine_hook",
]

_Construct = TypeVar("_Construct", bound=type[ClauseElement])

#: What an attribute of a custom construct holds, for its cache key: a SQL expression
#: (``"clauseelement"``), a list of strings (``"string_list"``) or a plain hashable Python
#: value (``"plain_obj"``). Names of ``sqlalchemy.sql.visitors.InternalTraversal`` without
#: their ``dp_`` prefix.
TraversalKind = Literal["clauseelement", "string_list", "plain_obj"]


# -- Connection._is_autocommit_isolation() ------------------------------------------------


def autocommit_isolation(conn: Connection) -> bool:
    """Whether SQLAlchemy runs ``conn`` at ``isolation_level="AUTOCOMMIT"``.

    Uses the private ``Connection._is_autocommit_isolation()`` (SQLAlchemy 2.0.28 to 2.1.x),
    which sees the level set on the connection, on the engine
    (``engine.execution_options()``) and in ``create_engine(isolation_level=...)``. Without
    it: :func:`_autocommit_isolation_from_options`.

    :param conn: a Connection; nothing is sent to the database.
    """
    check = getattr(conn, "_is_autocommit_isolation", None)
    if not callable(check):
        return _autocommit_isolation_from_options(conn)
    return bool(check())


def _autocommit_isolation_from_options(conn: Connection) -> bool:
    """The fallback of :func:`autocommit_isolation`: the documented execution options only.

    ``Connection.get_execution_options()`` holds the connection's and the engine's
    ``isolation_level`` option, not ``create_engine(isolation_level="AUTOCOMMIT")``. That
    one is still caught by :func:`sa_inbox.dialects.is_autocommit`, through the driver's
    own autocommit flag, which SQLAlchemy sets for it (psycopg's ``autocommit``, PyMySQL's
    ``autocommit(True)``, :mod:`sqlite3`'s ``isolation_level=None``; SQLAlchemy docs,
    "Setting Transaction Isolation Levels including DBAPI Autocommit").
    """
    return conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"


# -- _traverse_internals of a custom construct ---------------------------------------------


def cache_key(**attributes: TraversalKind) -> Callable[[_Construct], _Construct]:
    """Class decorator: key a custom construct's compiled-SQL cache entry on ``attributes``.

    SQLAlchemy caches compiled statements by a cache key built from each class's private
    ``_traverse_internals`` list (SQLAlchemy 2.0 and 2.1; the "SQL Compilation Caching"
    section of the ``sqlalchemy.ext.compiler`` docs says a construct with state of its own
    must take part in it). Example::

        @cache_key(table="clauseelement", columns="string_list")
        class MergeInsertOrSkip(Executable, ClauseElement): ...

    Without ``InternalTraversal``, or without one of the kinds: :func:`_uncached`.

    :param attributes: attribute name -> what it holds (:data:`TraversalKind`); every
        attribute that changes the SQL must be named.
    """

    def decorate(construct: _Construct) -> _Construct:
        from sqlalchemy.sql import visitors

        traversal = getattr(visitors, "InternalTraversal", None)
        internals = [
            (name, getattr(traversal, f"dp_{kind}", None)) for name, kind in attributes.items()
        ]
        if traversal is None or any(kind is None for _, kind in internals):
            return _uncached(construct)
        construct._traverse_internals = internals  # type: ignore[assignment]
        construct.inherit_cache = True
        return construct

    return decorate


def _uncached(construct: _Construct) -> _Construct:
    """The fallback of :func:`cache_key`: the construct is compiled at every execution.

    ``inherit_cache = False`` is SQLAlchemy's documented way to opt a custom construct out
    of the cache (``sqlalchemy.ext.compiler`` docs, "Enabling Caching Support for Custom
    Constructs"): correct, only without the compiled-statement cache.
    """
    construct.inherit_cache = False
    return construct


# -- CursorResult.context.cursor ----------------------------------------------------------


def result_cursor(result: CursorResult[Any]) -> Any:
    """The DBAPI cursor that ran ``result``'s statement, even after the result was closed.

    Uses ``CursorResult.context.cursor`` (the execution context is undocumented; SQLAlchemy
    2.0 and 2.1). ``CursorResult.cursor`` is cleared as soon as the result is soft-closed,
    which for a statement without rows (an ``INSERT`` without ``RETURNING``) is at once.
    Without ``context``:
    :func:`_open_result_cursor`.

    :returns: the driver's cursor, or ``None`` if it cannot be had.
    """
    context = getattr(result, "context", None)
    if context is None:
        return _open_result_cursor(result)
    return getattr(context, "cursor", None)


def _open_result_cursor(result: CursorResult[Any]) -> Any:
    """The fallback of :func:`result_cursor`: ``CursorResult.cursor``, ``None`` once the
    result is soft-closed (so a caller must take ``None`` for "unknown")."""
    return getattr(result, "cursor", None)


# -- greenlet_spawn / await_only ------------------------------------------------------------

# SQLAlchemy's bridge between the event loop and sync code (``sqlalchemy.util``; what
# ``AsyncSession.run_sync`` uses; SQLAlchemy 2.0 and 2.1, not listed in the API reference).
# They have no fallback: sa_inbox.asyncio needs them, and the sync API never imports them.
from sqlalchemy.util import await_only as await_only  # noqa: E402
from sqlalchemy.util import greenlet_spawn as greenlet_spawn  # noqa: E402

# -- AsyncAdapt_dbapi_cursor._cursor --------------------------------------------------------


def adapted_warning_count(cursor: Any) -> int | None:
    """The MySQL warning count that an async driver's cursor keeps behind SQLAlchemy's
    adapted DBAPI cursor.

    SQLAlchemy's asyncio dialects wrap the driver's cursor in an ``AsyncAdapt_*_cursor``
    whose ``_cursor`` attribute (SQLAlchemy 2.0 and 2.1) holds it; aiomysql's cursor keeps
    the OK packet of its last statement in ``_result`` (``warning_count``; aiomysql 0.2).
    Without either: ``None``, and the caller reads ``SHOW WARNINGS`` (one more round trip).

    :param cursor: a DBAPI cursor, adapted or not.
    """
    driver_result = getattr(getattr(cursor, "_cursor", None), "_result", None)
    count = getattr(driver_result, "warning_count", None)
    return count if isinstance(count, int) else None


# -- AsyncAdapt_dbapi_connection._execute_mutex ------------------------------------------


def adapter_executing(dbapi_connection: Any) -> bool:
    """Whether a statement is running on an async driver's connection right now (from
    another task: the caller itself is not executing one).

    SQLAlchemy's asyncio dialects run every statement of an adapted connection
    (``AsyncAdapt_*_connection``, asyncpg, psycopg, aiomysql, asyncmy, aiosqlite) under
    its private ``_execute_mutex``, an :class:`asyncio.Lock` held from the statement's
    send to its last row (SQLAlchemy 2.0 and 2.1). A plain DBAPI connection has none:
    False. Without the name: False, and the caller trusts the driver's own state.

    :param dbapi_connection: the pool's DBAPI connection, adapted or not.
    """
    mutex = getattr(dbapi_connection, "_execute_mutex", None)
    return isinstance(mutex, asyncio.Lock) and mutex.locked()


# -- Table.indexes as an ordered set -------------------------------------------------------


def sort_indexes(table: sa.Table) -> sa.Table:
    """Make ``table.indexes`` iterate in index-name order; returns ``table``.

    ``Table.indexes`` is a ``set``, so ``CREATE INDEX`` statements (``create_all()``,
    Alembic's ``create_table``) would come out in a different order from run to run.
    Replaces it with SQLAlchemy's private ``sqlalchemy.util.OrderedSet`` (2.0 and 2.1)
    holding the same indexes; without it: :func:`_sort_indexes_in_set`. Indexes added
    later go last.
    """
    try:
        from sqlalchemy.util import OrderedSet
    except ImportError:  # pragma: no cover - every supported SQLAlchemy has it
        return _sort_indexes_in_set(table)
    table.indexes = OrderedSet(_by_name(table.indexes))
    return table


def _sort_indexes_in_set(table: sa.Table) -> sa.Table:
    """The fallback of :func:`sort_indexes`: a plain ``set`` subclass that iterates in name
    order (:class:`_NameOrderedIndexes`)."""
    table.indexes = _NameOrderedIndexes(table.indexes)
    return table


def _by_name(indexes: Iterable[sa.Index]) -> list[sa.Index]:
    return sorted(indexes, key=lambda index: str(index.name))


class _NameOrderedIndexes(set[sa.Index]):
    """A set of indexes whose iteration is in index-name order, whatever was added when."""

    def __iter__(self) -> Iterator[sa.Index]:
        return iter(_by_name(super().__iter__()))


# -- sessionmaker.kw ------------------------------------------------------------------------


def session_options(maker: Any) -> dict[str, Any]:
    """The keyword arguments a ``sessionmaker`` or ``async_sessionmaker`` makes its sessions
    with (``bind``, ``info``, ``sync_session_class``...), as a copy (``info`` too).

    Reads ``sessionmaker.kw`` / ``async_sessionmaker.kw`` (SQLAlchemy 2.0 and 2.1, not in the
    API reference; ``configure()`` updates it). Change them with the documented
    ``maker.configure(**options)``. Without ``kw``: :func:`_options_of_a_session`.

    :param maker: a ``sessionmaker`` or ``async_sessionmaker``.
    """
    kw = getattr(maker, "kw", None)
    if not isinstance(kw, dict):
        return _options_of_a_session(maker)
    options = dict(kw)
    if isinstance(options.get("info"), dict):
        options["info"] = dict(options["info"])
    return options


def _options_of_a_session(maker: Any) -> dict[str, Any]:
    """The fallback of :func:`session_options`: what a session the maker makes reports
    through documented attributes (``Session.bind``, ``Session.info``; an AsyncSession's
    ``sync_session``), read off one new session that is closed unused (no connection is
    checked out)."""
    session = maker()
    sync_session = getattr(session, "sync_session", session)
    try:
        options: dict[str, Any] = {"bind": session.bind, "info": dict(sync_session.info)}
        if sync_session is not session:
            options["sync_session_class"] = type(sync_session)
        return options
    finally:
        sync_session.close()


# -- CPython: warnings._warn_unawaited_coroutine, Task._log_traceback ------------------------

#: The ``warnings`` function CPython calls for a coroutine finalised un-awaited.
_UNAWAITED_HOOK = "_warn_unawaited_coroutine"


def unawaited_coroutine_hook(
    replace: Callable[[Callable[[Any], None]], Callable[[Any], None]] | None = None,
) -> Callable[[Any], None] | None:
    """CPython's report of a coroutine finalised without being awaited, optionally replaced.

    CPython calls ``warnings._warn_unawaited_coroutine(coro)`` (``Objects/genobject.c``,
    ``_PyErr_WarnUnawaitedCoroutine``, looked up on the ``warnings`` module at each call;
    CPython 3.8 to 3.14). Without it (another interpreter): ``None``, and nothing is
    replaced.

    :param replace: called with the current function, returns the one to install.
    :returns: the function in place before (``None`` without the hook).
    """
    current = getattr(warnings, _UNAWAITED_HOOK, None)
    if not callable(current):
        return None
    if replace is not None:
        setattr(warnings, _UNAWAITED_HOOK, replace(current))
    return current  # type: ignore[no-any-return]


def task_failed_unseen(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` ended with an exception that nobody retrieved (``await``,
    ``Task.exception()``, ``Task.result()``).

    asyncio's private ``Task._log_traceback`` (Python and C tasks, CPython 3.8 to 3.14) is
    set when a task ends with an exception and cleared when it is retrieved; it is what
    makes asyncio log "Task exception was never retrieved". Without it: False (only
    tasks still running are judged by the caller).
    """
    return not task.cancelled() and bool(getattr(task, "_log_traceback", False))


# -- FastStream: HandlerCallWrapper._original_call -------------------------------------------


def faststream_handler(wrapper: object) -> Callable[..., Any] | None:
    """The function ``@broker.subscriber`` decorated, from FastStream's ``HandlerCallWrapper``
    of it (the owner of ``call_wrapped``, where a subscriber's middleware chain ends).

    FastStream keeps it as ``_original_call`` (``faststream/_internal/endpoint/
    call_wrapper.py``; FastStream 0.5 to 0.7); FastStream documents no public name for it.
    Without it: ``None`` (the caller refuses to guess an owner).
    """
    original = getattr(wrapper, "_original_call", None)
    return original if callable(original) else None
