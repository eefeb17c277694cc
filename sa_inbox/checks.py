"""What the public entry points check they were given, before any SQL is sent.

The synchronous and the asyncio halves of the API do not mix: synchronous code calling an
asyncio object's methods gets coroutines back and awaits none of them (a claim never made is
a redelivery applied again), and asyncio code handed a synchronous object blocks the event
loop or fails at the first message. Each entry point refuses the other half's objects with
:class:`~sa_inbox.exc.SyncAsyncMismatch`, and objects of no half with
:class:`~sa_inbox.exc.InvalidObject`, naming what to pass instead.

sa-inbox's asyncio faces (:class:`~sa_inbox.asyncio.AsyncInbox` and the others) carry the
class attribute :data:`ASYNCIO_FACE`. SQLAlchemy's asyncio objects are recognised once
:mod:`sqlalchemy.ext.asyncio` is imported (it needs greenlet); the synchronous half never
imports it: an object of that module cannot exist before it is imported.
"""

from __future__ import annotations

import sys
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from .exc import (
    InvalidBind,
    InvalidObject,
    InvalidSessionFactory,
    InvalidTable,
    InvalidTableType,
    SyncAsyncMismatch,
)
from .validation import shown

__all__ = [
    "ASYNCIO_FACE",
    "NEEDS_BIND",
    "check_metadata",
    "check_session_factory",
    "is_asyncio_object",
    "require",
    "require_asyncio",
    "require_bind",
    "require_table",
    "sync_face",
    "unwrap",
]

T = TypeVar("T")

#: Class attribute of sa-inbox's asyncio faces: the name of the attribute holding the
#: synchronous object the face runs (``"sync_inbox"``), or ``""`` when it holds none.
ASYNCIO_FACE = "__sa_inbox_asyncio_face__"

#: Class attribute (True) of the stores a worker runs only once bound to an engine
#: (``store.bind(engine)``): :class:`~sa_inbox.InboxStore`.
NEEDS_BIND = "__sa_inbox_needs_bind__"

_SQLALCHEMY_ASYNCIO = (
    "AsyncEngine",
    "AsyncConnection",
    "AsyncSession",
    "async_sessionmaker",
    "async_scoped_session",
)


def sync_face(value: object) -> object | None:
    """The synchronous object behind an asyncio face (an AsyncInbox's Inbox), else None."""
    attribute = getattr(type(value), ASYNCIO_FACE, None)
    return getattr(value, attribute) if attribute else None


def is_asyncio_object(value: object) -> bool:
    """Whether ``value`` belongs to the asyncio half: one of sa-inbox's asyncio faces, or
    SQLAlchemy's ``AsyncEngine``, ``AsyncConnection``, ``AsyncSession`` (or a subclass of
    it), ``async_sessionmaker`` or ``async_scoped_session``."""
    if getattr(type(value), ASYNCIO_FACE, None) is not None:
        return True
    module = sys.modules.get("sqlalchemy.ext.asyncio")
    if module is None:
        return False
    kinds = tuple(getattr(module, name) for name in _SQLALCHEMY_ASYNCIO)
    if isinstance(value, kinds):
        return True
    return isinstance(value, type) and issubclass(value, module.AsyncSession)


def require(value: object, expected: type[T], what: str, *, entry: str, instead: str) -> T:
    """``value``, if it is an ``expected``; for the synchronous half's entry points.

    :param what: the argument as the message names it (``"inbox"``).
    :param entry: the entry point (``"sa_inbox.handle()"``).
    :param instead: what to do with an asyncio object, completing the message
        (``"await sa_inbox.asyncio.handle() for an AsyncInbox"``).
    :raises SyncAsyncMismatch: if ``value`` belongs to the asyncio half.
    :raises InvalidObject: for anything else that is not an ``expected``.
    """
    if isinstance(value, expected) and not is_asyncio_object(value):
        return value
    given = type(value).__name__
    if is_asyncio_object(value):
        raise SyncAsyncMismatch(
            f"{entry} was given {given} as {what}, an object of sa-inbox's asyncio API; it "
            f"takes {_article(expected.__name__)} (the synchronous API): {instead}"
        )
    raise InvalidObject(
        f"{entry} takes {_article(expected.__name__)} as {what}, not {given} ({shown(value)})"
    )


def require_asyncio(value: object, expected: type[T], what: str, *, entry: str, instead: str) -> T:
    """``value``, if it is an ``expected`` (an asyncio class); for the asyncio half's entry
    points.

    :param instead: what to do with a synchronous object, completing the message.
    :raises SyncAsyncMismatch: if ``value`` is not an ``expected`` and is not an asyncio
        object (a synchronous Inbox, Engine, bound store...).
    :raises InvalidObject: for an asyncio object of another kind.
    """
    if isinstance(value, expected):
        return value
    given = type(value).__name__
    if is_asyncio_object(value):
        raise InvalidObject(f"{entry} takes {_article(expected.__name__)} as {what}, not {given}")
    raise SyncAsyncMismatch(
        f"{entry} was given {given} as {what}; it takes {_article(expected.__name__)} "
        f"(sa-inbox's asyncio API): {instead}"
    )


def require_bind(
    value: object, kinds: tuple[type, ...], what: str, *, entry: str, instead: str
) -> Any:
    """``value``, if it is one of ``kinds`` (an Engine, a Connection...); for the synchronous
    half's entry points that take a bind.

    :param instead: what to do with an asyncio object, completing the message.
    :raises SyncAsyncMismatch: for an object of the asyncio half (an AsyncEngine...).
    :raises InvalidBind: for anything else that is not one of ``kinds``.
    """
    if isinstance(value, kinds) and not is_asyncio_object(value):
        return value
    wanted = " or ".join(_article(kind.__name__) for kind in kinds)
    given = type(value).__name__
    if is_asyncio_object(value):
        raise SyncAsyncMismatch(
            f"{entry} was given {given} as {what}, an object of the asyncio API; it takes "
            f"{wanted}: {instead}"
        )
    raise InvalidBind(f"{entry} takes {wanted} as {what}, not {given}")


def require_table(table: object, *, entry: str) -> sa.Table:
    """``table``, if it is a :class:`~sqlalchemy.Table`.

    :raises InvalidTableType: otherwise; for an object holding one (an Inbox, an
        InboxStore) the message says to pass its ``.table``.
    """
    if isinstance(table, sa.Table):
        return table
    hint = (
        f": pass its .table ({_factory_name(table)}.table)"
        if isinstance(getattr(table, "table", None), sa.Table)
        else ""
    )
    raise InvalidTableType(f"{entry} takes a Table, not {_factory_name(table)}{hint}")


def unwrap(value: object, expected: type[T], what: str, *, entry: str) -> T:
    """``value`` itself, or the synchronous ``expected`` behind its asyncio face: for the
    asyncio half's entry points that run the synchronous object (where passing either is
    unambiguous, as an AsyncInbox to ``sa_inbox.asyncio.handle()``).

    :raises InvalidObject: for anything else.
    """
    face = sync_face(value)
    if isinstance(face, expected):
        return face
    if isinstance(value, expected) and not is_asyncio_object(value):
        return value
    raise InvalidObject(
        f"{entry} takes {_article(expected.__name__)} (or its asyncio face) as {what}, not "
        f"{type(value).__name__}"
    )


#: ``check_metadata``'s default: no table name to check.
_NO_TABLE = object()


def check_metadata(
    metadata: object, *, entry: str, table_name: object = _NO_TABLE, schema: object = None
) -> sa.MetaData:
    """``metadata``, if it is a :class:`~sqlalchemy.MetaData` that can take ``table_name``.

    :param table_name: the name of the table to define on it (not given: none checked).
    :raises InvalidTableType: if ``metadata`` is not a MetaData; for a declarative base
        (``Base`` instead of ``Base.metadata``) the message says so.
    :raises InvalidTable: if ``table_name`` is not a non-empty string, ``schema`` is
        neither None nor one, or the MetaData already holds a table of that name
        (SQLAlchemy would refuse a second definition).
    """
    if not isinstance(metadata, sa.MetaData):
        inner = getattr(metadata, "metadata", None)
        hint = (
            f": pass {_factory_name(metadata)}.metadata" if isinstance(inner, sa.MetaData) else ""
        )
        raise InvalidTableType(f"{entry} takes a MetaData, not {_factory_name(metadata)}{hint}")
    if table_name is _NO_TABLE:
        return metadata
    if not isinstance(table_name, str) or not table_name.strip():
        raise InvalidTable(f"{entry}: table_name must be a non-empty string, not {table_name!r}")
    if schema is not None and (not isinstance(schema, str) or not schema.strip()):
        raise InvalidTable(f"{entry}: schema must be None or a non-empty string, not {schema!r}")
    owner = schema if schema is not None else metadata.schema
    key = f"{owner}.{table_name}" if owner else table_name
    if key in metadata.tables:
        raise InvalidTable(
            f"{entry}: the MetaData already holds a table {key!r}: define it once and share "
            "the object, or give another table_name"
        )
    return metadata


def check_session_factory(factory: object, *, entry: str, asynchronous: bool) -> None:
    """Refuse, before any SQL, a session factory ``entry`` cannot use.

    Refused: the other half's factory (an ``async_sessionmaker``, ``async_scoped_session``
    or AsyncSession class for the synchronous API, a ``sessionmaker``, ``scoped_session`` or
    Session class for the asyncio one),
    ``sessionmaker.begin`` / ``Session.begin`` (they make transactions, not sessions), a
    Session instead of a factory, and anything not callable. Any other callable (a factory
    of the caller's) is checked when it is first called.

    :param asynchronous: True for the asyncio half (a factory of AsyncSessions).
    :raises InvalidSessionFactory: as above.
    """
    expected = "an async_sessionmaker" if asynchronous else "a sessionmaker"
    name = type(factory).__name__
    if not callable(factory):
        raise InvalidSessionFactory(
            f"{entry} takes a session factory, {expected}(engine), "
            f"not {name} ({shown(factory, 60)})"
        )
    if getattr(factory, "__name__", None) == "begin":
        raise InvalidSessionFactory(
            f"{entry} was given {getattr(factory, '__qualname__', 'begin')}, which makes a "
            f"transaction, not a session: pass {expected} itself (the runner begins and "
            "commits the transaction)"
        )
    if _is_sync_factory(factory) if asynchronous else is_asyncio_object(factory):
        makes, wanted, other = (
            ("Sessions", "an AsyncSession", "sa_inbox's sync API")
            if asynchronous
            else ("AsyncSessions", "a Session", "sa_inbox.asyncio")
        )
        raise InvalidSessionFactory(
            f"{entry} was given {_factory_name(factory)}, a session factory of the other half "
            f"of the API: it makes {makes}, not {wanted}; pass {expected}(engine), or use "
            f"{other} with this factory"
        )


def _is_sync_factory(factory: object) -> bool:
    """A ``sessionmaker``, a ``scoped_session`` or a Session class."""
    if isinstance(factory, type):
        return issubclass(factory, Session)
    return isinstance(factory, sessionmaker | scoped_session)


def _factory_name(factory: Any) -> str:
    return factory.__name__ if isinstance(factory, type) else type(factory).__name__


def _article(noun: str) -> str:
    return f"an {noun}" if noun[0] in "AEIOU" else f"a {noun}"
