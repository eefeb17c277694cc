"""The bridge between the event loop and sa-inbox's synchronous core.

sa-inbox's claim, runner, transaction guard, store and worker are written once, in
synchronous code. SQLAlchemy's asyncio extension runs synchronous code on an async driver
inside a greenlet (``AsyncSession.run_sync``, ``AsyncConnection.run_sync``): a database call
made there is awaited on the event loop without blocking it. This module uses the same
machinery (SQLAlchemy docs, "Asynchronous I/O (asyncio)", "Running Synchronous Methods and
Functions under asyncio") so that only the edges are async: the handler, the broker's
ack/nack, the sleeps and the session factory.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
from sqlalchemy.orm import Session

from .._compat import await_only, greenlet_spawn
from ..exc import AsyncHandlerError, InvalidBind, InvalidSessionFactory
from . import _unawaited

__all__ = [
    "ASYNC_SESSION",
    "AsyncBind",
    "async_session_of",
    "call_handler_awaiting",
    "call_on_loop",
    "in_greenlet",
    "loop_sleep",
    "maybe_await",
    "on_sync_bind",
    "sync_session_factory",
]

T = TypeVar("T")

_unawaited.install()

#: What an async claim runs on, in the caller's transaction.
AsyncBind = AsyncSession | async_scoped_session[Any] | AsyncConnection

#: ``Session.info`` key holding the AsyncSession a sync session belongs to.
ASYNC_SESSION = "sa_inbox.async_session"


async def in_greenlet(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` run in a greenlet, where database I/O and :func:`call_on_loop`
    are awaited on the event loop."""
    return await greenlet_spawn(fn, *args, **kwargs)


def call_on_loop(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` on the event loop from synchronous code in :func:`in_greenlet`."""
    return await_only(awaitable)


def maybe_await(value: object) -> Any:
    """``value`` itself, or what it resolves to if it is awaitable (from :func:`in_greenlet`):
    so that handlers, acks and nacks may be ``async def`` or plain functions."""
    if inspect.isawaitable(value):
        return call_on_loop(value)
    return value


def call_handler_awaiting(handler: Callable[..., Any], *args: Any) -> Any:
    """``handler(*args)``, awaited if it returns an awaitable (from :func:`in_greenlet`),
    refusing a handler that dropped a coroutine without awaiting it.

    On an AsyncSession, ``session.execute(stmt)`` (``scalar``, ``get``, ``flush``,
    ``delete``, ``merge``, ``refresh``, ...) without ``await`` only makes a coroutine, which
    Python discards with a "coroutine ... was never awaited" ``RuntimeWarning``: the
    statement never runs, and the claim would commit and the message be acked without the
    change. The same holds for any ``async def`` function of the application called without
    ``await``. Both a plain (``def``) handler's call and an ``async def`` handler's whole
    run are watched, per task (:mod:`sa_inbox.asyncio._unawaited`: the coroutines
    finalised un-awaited in this task, not in others running meanwhile).

    :raises AsyncHandlerError: if the handler dropped an un-awaited coroutine (nothing is
        committed: the runner rolls back and fails the delivery; the worker records a
        failed attempt). The coroutine's warning is not emitted: the error names it.
    """
    with _unawaited.tracking() as dropped:
        result = handler(*args)
    if dropped:
        if inspect.iscoroutine(result):
            result.close()
        raise _dropped_error(dropped)
    if inspect.isawaitable(result):
        return call_on_loop(_awaited_refusing_drops(result))
    return result


async def _awaited_refusing_drops(awaitable: Awaitable[T]) -> T:
    with _unawaited.tracking() as dropped:
        result = await awaitable
    if dropped:
        raise _dropped_error(dropped)
    return result


def _dropped_error(dropped: list[str]) -> AsyncHandlerError:
    names = ", ".join(f"'{name}'" for name in dict.fromkeys(dropped))
    return AsyncHandlerError(
        f"the handler made a coroutine and never awaited it (coroutine {names} was never "
        "awaited): on an AsyncSession, session.execute() and the other I/O methods must be "
        "awaited, as must every async def function the handler calls (nothing was committed)"
    )


def loop_sleep(seconds: float) -> None:
    """Sleep ``seconds`` on the event loop (from :func:`in_greenlet`): other tasks run meanwhile."""
    call_on_loop(asyncio.sleep(seconds))


async def on_sync_bind(bind: AsyncBind, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(sync_bind, *args, **kwargs)`` on the Session or Connection behind ``bind``.

    :raises InvalidBind: if ``bind`` is not an AsyncSession, async_scoped_session or
        AsyncConnection (before anything is sent).
    """
    if isinstance(bind, async_scoped_session):
        bind = bind()
    if not isinstance(bind, AsyncSession | AsyncConnection):
        raise InvalidBind(
            "bind must be an AsyncSession, async_scoped_session or AsyncConnection, not "
            f"{type(bind).__name__} (use sa_inbox's synchronous API for a Session)"
        )
    return await bind.run_sync(fn, *args, **kwargs)


def sync_session_factory(factory: Callable[[], AsyncSession]) -> Callable[[], Session]:
    """A factory of the sync sessions behind the AsyncSessions that ``factory`` makes.

    Each AsyncSession is kept in its sync session's ``info`` (:func:`async_session_of`).

    :raises InvalidSessionFactory: when called, if ``factory`` cannot be called with no
        arguments or makes anything but an AsyncSession.
    """

    def make() -> Session:
        try:
            session = factory()
        except TypeError as exc:
            raise InvalidSessionFactory(
                f"the session factory {factory!r} cannot be called with no arguments: {exc}; "
                "pass an async_sessionmaker"
            ) from exc
        if not isinstance(session, AsyncSession):
            raise InvalidSessionFactory(
                f"the session factory {factory!r} returned {type(session).__name__}, not an "
                "AsyncSession; pass an async_sessionmaker (not async_sessionmaker.begin)"
            )
        session.sync_session.info[ASYNC_SESSION] = session
        return session.sync_session

    return make


def async_session_of(session: Session) -> AsyncSession:
    """The AsyncSession that :func:`sync_session_factory` made ``session`` for."""
    async_session = session.info[ASYNC_SESSION]
    assert isinstance(async_session, AsyncSession)
    return async_session
