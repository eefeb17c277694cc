"""The asyncio runner: ``await handle(...)`` and ``await run_in_transaction(...)``.

The same runner as :mod:`sa_inbox.runner` (begin, claim, handler, commit, then ack; retries
of deadlocks and serialization failures; the transaction guard; configuration errors raised,
never nacked), run in a greenlet by :mod:`sa_inbox.asyncio._bridge`: only the edges differ.
The handler gets an :class:`~sqlalchemy.ext.asyncio.AsyncSession` and is awaited; ``ack`` and
``nack`` may be coroutine functions or plain ones; back-off sleeps run on the event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from .. import runner
from ..backoff import Backoff
from ..checks import check_session_factory, unwrap
from ..claim import Inbox
from ..handlers import check_handler, check_settlers
from ..runner import Result
from ._bridge import (
    async_session_of,
    call_handler_awaiting,
    in_greenlet,
    loop_sleep,
    maybe_await,
    sync_session_factory,
)
from .claim import AsyncInbox

__all__ = ["handle", "run_in_transaction"]

T = TypeVar("T")

#: An ``async def`` callable or a plain one (the asyncio runner awaits what it returns).
MaybeAsync = Callable[[], Awaitable[Any] | Any]


async def handle(
    session_factory: Callable[[], AsyncSession],
    inbox: Inbox | AsyncInbox,
    message_id: str,
    consumer_name: str,
    handler: Callable[[AsyncSession], Awaitable[Any] | Any],
    *,
    ack: MaybeAsync,
    nack: MaybeAsync,
    max_retries: int | None = None,
    max_attempts: int | None = None,
    **claim_extra: Any,
) -> Result:
    """Process one delivery exactly once in effect: claim, ``await handler(session)``,
    commit, then ``await ack()``.

    Everything :func:`sa_inbox.handle` does and refuses, on an AsyncSession: see it for the
    outcomes, the retries and the guarantee's limits.

    :param session_factory: an :class:`~sqlalchemy.ext.asyncio.async_sessionmaker` (called
        with no arguments, returning a new AsyncSession); each attempt gets a new one.
    :param inbox: the inbox to claim in, an :class:`~sa_inbox.Inbox` or its
        :class:`~sa_inbox.asyncio.AsyncInbox`.
    :param message_id: the producer-assigned id.
    :param consumer_name: this consumer's name.
    :param handler: ``handler(session)``, the business change on the AsyncSession, an
        ``async def`` (awaited) or a plain function; it must not commit, and it may run more
        than once if the transaction is retried.
    :param ack: acknowledges the delivery (``async def`` or plain), only after the commit or
        for a duplicate.
    :param nack: rejects the delivery for redelivery (``async def`` or plain), after the
        rollback when the handler or the database fails.
    :param max_retries: re-runs of the transaction after a transient error, an int >= 0
        (as :func:`sa_inbox.handle`).
    :param max_attempts: the deprecated spelling of ``max_retries + 1``.
    :param claim_extra: ``message_type``, ``correlation_id``, ``payload_hash``.
    :returns: a :class:`~sa_inbox.Result`.
    :raises InvalidMessageId, InvalidArgument: before anything is sent (InvalidArgument also
        for a keyword argument it does not take).
    :raises ConfigurationError: with neither ack nor nack, as :func:`sa_inbox.handle`:
        :class:`~sa_inbox.exc.InvalidSessionFactory` for a factory that does not make
        AsyncSessions (a ``sessionmaker`` is refused before anything is sent),
        :class:`~sa_inbox.exc.InvalidObject` for an ``inbox`` that is neither or an ``ack``
        or ``nack`` that is not callable,
        :class:`~sa_inbox.exc.InvalidHandler` for a handler that cannot be called as
        ``handler(session)``, :class:`~sa_inbox.exc.MissingTable`,
        :class:`~sa_inbox.exc.AutocommitConnection`,
        :class:`~sa_inbox.exc.ConsumerNameTaken` when another handler owns
        ``consumer_name`` (:mod:`sa_inbox.consumers`; the handler is known by its own name,
        not by the runner's wrapper), before anything is claimed.
    """
    with runner.logged_configuration_errors(message_id):
        runner.check_claim_extra("sa_inbox.asyncio.handle()", handle, claim_extra)
        sync_inbox = unwrap(inbox, Inbox, "inbox", entry="sa_inbox.asyncio.handle()")
        max_retries, _ = runner.retry_options(
            "sa_inbox.asyncio.handle()", max_retries, None, max_attempts=max_attempts
        )
        check_session_factory(session_factory, entry="sa_inbox.asyncio.handle()", asynchronous=True)
        check_handler(handler, ("session",), asynchronous=True)
        check_settlers("sa_inbox.asyncio.handle()", ack=ack, nack=nack)

    @functools.wraps(handler)
    def sync_handler(session: Session) -> object:
        return call_handler_awaiting(handler, async_session_of(session))

    return await in_greenlet(
        runner.handle,
        sync_session_factory(session_factory),
        sync_inbox,
        message_id,
        consumer_name,
        sync_handler,
        ack=lambda: maybe_await(ack()),
        nack=lambda: maybe_await(nack()),
        max_retries=max_retries,
        sleep=loop_sleep,
        **claim_extra,
    )


async def run_in_transaction(
    session_factory: Callable[[], AsyncSession],
    work: Callable[[AsyncSession], Awaitable[T]],
    *,
    max_retries: int | None = None,
    retry_backoff: Backoff | None = None,
    max_attempts: int | None = None,
    backoff: float | None = None,
) -> T:
    """``await work(session)`` in a new AsyncSession and transaction, committing on success,
    retried on transient errors: :func:`sa_inbox.run_in_transaction` on the event loop.

    :param session_factory: an ``async_sessionmaker``.
    :param work: ``async def work(session)``; it must not commit.
    :param max_retries: re-runs after a transient error, an int >= 0.
    :param retry_backoff: a :class:`~sa_inbox.backoff.Backoff`, the waits before the
        re-runs (as :func:`sa_inbox.run_in_transaction`).
    :param max_attempts: the deprecated spelling of ``max_retries + 1``.
    :param backoff: the deprecated spelling of ``retry_backoff=Backoff(backoff, 1.0)``.
    :returns: what ``work`` returned on the attempt that committed.
    :raises: as :func:`sa_inbox.run_in_transaction`; and
        :class:`~sa_inbox.exc.AsyncHandlerError` (rolled back, not retried) if ``work``
        dropped a coroutine without awaiting it (``session.execute(...)`` without ``await``).
    """

    max_retries, retry_backoff = runner.retry_options(
        "sa_inbox.asyncio.run_in_transaction()",
        max_retries,
        retry_backoff,
        max_attempts=max_attempts,
        backoff=backoff,
    )
    check_session_factory(
        session_factory, entry="sa_inbox.asyncio.run_in_transaction()", asynchronous=True
    )

    def sync_work(session: Session) -> T:
        result: T = call_handler_awaiting(work, async_session_of(session))
        return result

    return await in_greenlet(
        runner.run_in_transaction,
        sync_session_factory(session_factory),
        sync_work,
        max_retries=max_retries,
        retry_backoff=retry_backoff,
        sleep=loop_sleep,
    )
