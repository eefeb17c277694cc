"""Readiness: what a consumer checks before its first message, and a health endpoint after.

A consumer set up wrongly (the inbox table missing, ``Session.begin`` for a session factory,
an autocommit engine, a handler of the wrong shape) would fail every message; found at the
first message, it passes a readiness probe while the queue fills. :func:`check_ready`
(threads) and :func:`check_ready_async` (asyncio) run the same checks up front: the broker
adapters' ``run()`` / ``consume()`` call them before consuming, and their ``check()`` runs
them on demand. Each table costs one query that reads no row (``SELECT 1 FROM t WHERE
1 != 1``), in a transaction rolled back at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .checks import check_session_factory, require, unwrap
from .claim import Inbox
from .dialects import classifier_for, is_autocommit
from .exc import AutocommitConnection, InvalidSessionFactory, MissingTable
from .handlers import check_handler
from .runner import engine_of, new_session
from .validation import first_line

if TYPE_CHECKING:  # the synchronous half never imports sqlalchemy.ext.asyncio
    from sqlalchemy.ext.asyncio import AsyncSession

__all__ = ["check_owner", "check_ready", "check_ready_async", "inbox_tables", "probe_tables"]


def check_ready(
    session_factory: Callable[[], Session],
    tables: Iterable[sa.Table],
    *,
    entry: str,
    handler: object = None,
    handler_arguments: Sequence[str] = ("session", "message"),
) -> None:
    """Check that a consumer can process messages; return None or raise.

    :param session_factory: a ``sessionmaker``; it is called once.
    :param tables: the tables the consumer writes (the inbox's, a store's, an outbox's):
        each is read with one query returning no row, through the factory's session.
    :param entry: the consumer, as error messages name it (``"Consumer.check()"``).
    :param handler: the handler, checked to be callable as ``handler(*handler_arguments)``
        (:func:`sa_inbox.handlers.check_handler`); None skips it.
    :raises InvalidSessionFactory: for a factory of the asyncio half, ``Session.begin``, or
        one that makes no new Session.
    :raises AutocommitConnection: if a table's connection commits each statement on its own.
    :raises MissingTable: if a table (or a column it declares) does not exist.
    :raises InvalidHandler: see :func:`~sa_inbox.handlers.check_handler`.
    """
    if handler is not None:
        check_handler(handler, handler_arguments)
    check_session_factory(session_factory, entry=entry, asynchronous=False)
    with new_session(session_factory) as session:
        probe_tables(session, tables)


async def check_ready_async(
    session_factory: Callable[[], AsyncSession],
    tables: Iterable[sa.Table],
    *,
    entry: str,
    handler: object = None,
    handler_arguments: Sequence[str] = ("session", "message"),
    owner: tuple[Inbox, str | None] | None = None,
) -> None:
    """:func:`check_ready` for the asyncio half: an ``async_sessionmaker``, a handler that
    may be ``async def``; the queries run on the factory's AsyncSession, and with ``owner``
    (the inbox and consumer name) :func:`check_owner`'s check too.

    :raises InvalidSessionFactory: for a ``sessionmaker`` or anything making no
        AsyncSession. Otherwise as :func:`check_ready`.
    """
    from sqlalchemy.ext.asyncio import AsyncSession

    if handler is not None:
        check_handler(handler, handler_arguments, asynchronous=True)
    check_session_factory(session_factory, entry=entry, asynchronous=True)
    session: Any = session_factory()
    if not isinstance(session, AsyncSession):
        raise InvalidSessionFactory(
            f"{entry}: the session factory {session_factory!r} returned "
            f"{type(session).__name__}, not an AsyncSession; pass an async_sessionmaker"
        )
    async with session:
        await session.run_sync(probe_tables, list(tables))
        if owner is not None:
            await session.run_sync(_ensure_owner, owner[0], owner[1], handler)


def inbox_tables(inbox: Inbox) -> list[sa.Table]:
    """The tables a claim in ``inbox`` writes: its own, the collisions table when it
    records collisions (``on_collision="record"``), and the consumers table when it checks
    the owner of each consumer name (:mod:`sa_inbox.consumers`).

    :param inbox: an :class:`~sa_inbox.Inbox` or its AsyncInbox (unwrapped).
    :raises InvalidObject: for anything else.
    """
    inbox = unwrap(inbox, Inbox, "inbox", entry="inbox_tables()")
    recorded = inbox.collisions.collisions if inbox.collisions is not None else None
    owners = inbox.consumers.table if inbox.consumers is not None else None
    return [inbox.table, *(t for t in (recorded, owners) if t is not None)]


def check_owner(
    session_factory: Callable[[], Session],
    inbox: Inbox,
    consumer_name: str | None,
    handler: object,
) -> None:
    """Make ``handler`` the owner of ``consumer_name`` in ``inbox``'s consumers table, or
    check that it is (:meth:`sa_inbox.consumers.Consumers.ensure`); nothing without a
    consumers table, a consumer name or a handler.

    :raises ConsumerNameTaken: if another handler owns the name.
    """
    if inbox.consumers is None or consumer_name is None or handler is None:
        return
    with new_session(session_factory) as session:
        _ensure_owner(session, inbox, consumer_name, handler)


def _ensure_owner(
    session: Session, inbox: Inbox, consumer_name: str | None, handler: object
) -> None:
    if inbox.consumers is None or consumer_name is None or handler is None:
        return
    inbox.consumers.ensure(engine_of(session, inbox.table), consumer_name, handler)


def probe_tables(session: Session, tables: Iterable[sa.Table]) -> None:
    """Read each table with one query returning no row, then roll back.

    :raises AutocommitConnection: if a table's connection is autocommit
        (:func:`sa_inbox.dialects.is_autocommit`).
    :raises MissingTable: for a table or column the database does not have.
    :raises InvalidSessionFactory: for a Session with no engine for a table (the Session
        class itself, an unbound ``sessionmaker``).
    :raises SyncAsyncMismatch: for an AsyncSession (run it with ``session.run_sync``), and
        :class:`~sa_inbox.exc.InvalidObject` for anything but a Session, before any SQL.
    """
    session = require(
        session,
        Session,
        "session",
        entry="probe_tables()",
        instead="await session.run_sync(probe_tables, tables), or check_ready_async()",
    )
    try:
        for table in tables:
            query = sa.select(sa.literal(1)).select_from(table).where(sa.false())
            query = query.add_columns(*table.primary_key.columns)
            try:
                conn = session.connection(bind_arguments={"clause": query})
            except sa.exc.UnboundExecutionError as exc:
                raise InvalidSessionFactory(
                    f"the session factory's Session has no engine for table {table.name!r}: "
                    "pass sessionmaker(engine) (or bind the table's MetaData), not the "
                    "Session class or an unbound sessionmaker"
                ) from exc
            if is_autocommit(conn):
                raise AutocommitConnection(
                    f"the connection for table {table.name!r} commits each statement on its "
                    "own (AUTOCOMMIT or the driver's autocommit): a claim would commit apart "
                    "from the business change; use a transactional engine"
                )
            try:
                with classifier_for(conn.dialect.name).translate_configuration_errors():
                    session.execute(query)
            except MissingTable as exc:
                missing = f"table {table.name!r}: {first_line(exc)}{_defined_by(table)}"
                raise MissingTable(missing) from exc
    finally:
        session.rollback()


def _defined_by(table: sa.Table) -> str:
    """How to define a missing table of sa-inbox's own that the application defines
    through a function of ours (``Table.info["sa_inbox.defined_by"]``)."""
    defined_by = table.info.get("sa_inbox.defined_by")
    if defined_by is None:
        return ""
    return f"; it is defined by {defined_by}: call it before metadata.create_all()"
