"""The session extension on ``async_sessionmaker`` and ``AsyncSession``.

SQLAlchemy's session events are registered on the synchronous side of an AsyncSession
(SQLAlchemy docs, "Using events with the asyncio extension"): :func:`install` gives an
``async_sessionmaker`` a ``sync_session_class`` of its own carrying the listeners, so other
sessions of the process are not affected; :func:`register_claim` registers on the
AsyncSession's ``sync_session``. :class:`~sa_inbox.DuplicateMessage` comes out of
``await session.flush()`` / ``execute()`` / ``commit()`` unchanged.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from .. import session as sync_extension
from .._compat import session_options
from ..checks import unwrap
from ..claim import Inbox
from ..exc import InvalidBind
from .claim import AsyncInbox

__all__ = ["install", "register_claim"]

#: Marks a ``sync_session_class`` made by :func:`install`.
_OWN_CLASS = "__sa_inbox_async_sync_session__"


def install(target: async_sessionmaker[Any] | AsyncSession) -> None:
    """Install the session extension on an ``async_sessionmaker`` or one AsyncSession.

    Idempotent. For an ``async_sessionmaker`` whose ``sync_session_class`` is a plain
    Session class, a subclass is made and configured (``maker.configure(
    sync_session_class=...)``), so that installing never affects sessions made elsewhere.

    :raises InvalidBind: for anything else (use :func:`sa_inbox.install` for a
        ``sessionmaker``).
    """
    if isinstance(target, AsyncSession):
        sync_extension.install(target.sync_session)
        return
    if not isinstance(target, async_sessionmaker):
        raise InvalidBind(
            f"install() takes an async_sessionmaker or AsyncSession, not {type(target).__name__}"
        )
    base: type[Session] = session_options(target).get("sync_session_class") or Session
    if not getattr(base, _OWN_CLASS, False):
        base = type(f"Inbox{base.__name__}", (base,), {_OWN_CLASS: True})
        target.configure(sync_session_class=base)
    sync_extension.install(base)


def register_claim(
    session: AsyncSession,
    inbox: Inbox | AsyncInbox,
    message_id: str,
    consumer_name: str,
    **extra: Any,
) -> None:
    """Put a claim into the AsyncSession's unit of work (see :func:`sa_inbox.register_claim`).

    Nothing is sent now: the claim is emitted before any business row at the next flush,
    DML statement or commit, which raises :class:`~sa_inbox.DuplicateMessage` for a
    duplicate.

    :param inbox: an :class:`~sa_inbox.Inbox` or its :class:`~sa_inbox.asyncio.AsyncInbox`.
    :raises InvalidBind: if ``session`` is not an AsyncSession.
    :raises InvalidObject: if ``inbox`` is neither.
    :raises InboxError, InvalidMessageId: as :func:`sa_inbox.register_claim`.
    """
    if not isinstance(session, AsyncSession):
        raise InvalidBind(f"register_claim() takes an AsyncSession, not {type(session).__name__}")
    sync_inbox = unwrap(inbox, Inbox, "inbox", entry="sa_inbox.asyncio.register_claim()")
    sync_extension.register_claim(
        session.sync_session, sync_inbox, message_id, consumer_name, **extra
    )
