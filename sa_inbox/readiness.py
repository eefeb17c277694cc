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

from .checks import check_session_factory
from .claim import Inbox
from .dialects import classifier_for, is_autocommit
from .exc import AutocommitConnection, InvalidSessionFactory
from .handlers import check_handler
from .runner import new_session

if TYPE_CHECKING:  # the synchronous half never imports sqlalchemy.ext.asyncio
    from sqlalchemy.ext.asyncio import AsyncSession

__all__ = ["check_ready", "check_ready_async", "inbox_tables", "probe_tables"]


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
    :param entry: the consumer, as error messages name it (``"BlockingConsumer.check()"``).
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
) -> None:
    """:func:`check_ready` for the asyncio half: an ``async_sessionmaker``, a handler that
    may be ``async def``; the queries run on the factory's AsyncSession.

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


def inbox_tables(inbox: Inbox) -> list[sa.Table]:
    """The tables a claim in ``inbox`` writes: its own, and the collisions table when it
    records collisions (``on_collision="record"``)."""
    recorded = inbox.collisions.collisions if inbox.collisions is not None else None
    return [inbox.table, *([recorded] if recorded is not None else [])]


def probe_tables(session: Session, tables: Iterable[sa.Table]) -> None:
    """Read each table with one query returning no row, then roll back.

    :raises AutocommitConnection: if a table's connection is autocommit
        (:func:`sa_inbox.dialects.is_autocommit`).
    :raises MissingTable: for a table or column the database does not have.
    """
    try:
        for table in tables:
            query = sa.select(sa.literal(1)).select_from(table).where(sa.false())
            query = query.add_columns(*table.primary_key.columns)
            conn = session.connection(bind_arguments={"clause": query})
            if is_autocommit(conn):
                raise AutocommitConnection(
                    f"the connection for table {table.name!r} commits each statement on its "
                    "own (AUTOCOMMIT or the driver's autocommit): a claim would commit apart "
                    "from the business change; use a transactional engine"
                )
            with classifier_for(conn.dialect.name).translate_configuration_errors():
                session.execute(query)
    finally:
        session.rollback()
