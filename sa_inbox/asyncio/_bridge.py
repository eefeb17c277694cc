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
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
from sqlalchemy.orm import Session

from .._compat import await_only, greenlet_spawn
from ..exc import AsyncHandlerError, InvalidBind, InvalidSessionFactory, SyncAsyncMismatch
from ..guard import enlisted_connections
from ..pool_guard import BUSY_POLL_SECONDS, BUSY_WAIT_SECONDS, statement_running
from . import _unawaited

__all__ = [
    "ASYNC_SESSION",
    "AsyncBind",
    "AwaitOnly",
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


def call_handler_awaiting(handler: Callable[..., Any], session: AsyncSession, *args: Any) -> Any:
    """``handler(session, *args)``, awaited if it returns an awaitable (from
    :func:`in_greenlet`), refusing a handler that returned with part of its work unfinished.

    On an AsyncSession, ``session.execute(stmt)`` (``scalar``, ``get``, ``flush``,
    ``delete``, ``merge``, ``refresh``, ...) without ``await`` only makes a coroutine, which
    Python discards with a "coroutine ... was never awaited" ``RuntimeWarning``: the
    statement never runs. The same holds for any ``async def`` function of the application
    called without ``await``. And work put in a task (``asyncio.create_task``,
    ``ensure_future``, ``shield``, a ``gather`` left when another of its awaitables raised)
    runs during or after the commit, or fails with nobody looking. Either way the claim
    would commit and the message be acked without the change. A plain (``def``) handler's
    call and an ``async def`` handler's whole run are watched, per task
    (:mod:`sa_inbox.asyncio._unawaited`: only what this handler's own code started, not
    what other tasks do meanwhile).

    The tasks a handler leaves running, whether it returns or raises, are stopped before
    the runner goes on (:func:`_stop_left_tasks`): no statement of theirs is still running
    on the session's connection when the transaction is rolled back.

    :param session: the AsyncSession of the owned transaction, passed to the handler first.
    :raises AsyncHandlerError: if the handler dropped an un-awaited coroutine, or returned
        with a task it created still running or failed with an exception it never
        retrieved (those tasks are stopped first: nothing of theirs commits; the runner
        rolls back and fails the delivery; the worker records a failed attempt). A dropped
        coroutine's warning is not emitted: the error names it.
    :raises BaseException: what the handler raised, once the tasks it left are stopped (a
        note on the error names them).
    """
    with _unawaited.tracking() as started:
        try:
            result = handler(session, *args)
        except BaseException as exc:
            if started.left_behind():
                call_on_loop(_stopped_after_failure(started, session, exc))
            raise
    if started.dropped or started.left_behind():
        if inspect.iscoroutine(result):
            result.close()
        call_on_loop(_refuse_unfinished(started, session))
    if inspect.isawaitable(result):
        return call_on_loop(_awaited_refusing_unfinished(result, session))
    return result


#: Seconds the tasks a handler left get to finish cancelling.
TASK_CANCEL_SECONDS = 10.0


async def _awaited_refusing_unfinished(awaitable: Awaitable[T], session: AsyncSession) -> T:
    with _unawaited.tracking() as started:
        try:
            result = await awaitable
        except BaseException as exc:
            await _stopped_after_failure(started, session, exc)
            raise
    await _refuse_unfinished(started, session)
    return result


async def _stop_left_tasks(
    started: _unawaited.Unfinished, session: AsyncSession
) -> list[asyncio.Task[Any]]:
    """Stop the tasks the handler left running; returns every task it left behind.

    While one of them is running a statement on the session's connection (its driver
    reports it: :func:`sa_inbox.pool_guard.statement_running`), it is let finish, up to
    :data:`~sa_inbox.pool_guard.BUSY_WAIT_SECONDS`: the statement is rolled back with the
    transaction. Cancelling it mid-flight would cost the connection (SQLAlchemy invalidates
    a connection whose statement was cancelled: its state is unknown) and, on SQLite, leave
    its write lock held until the statement's cursor is garbage-collected (a closed
    connection with a statement left unfinalized stays open). Then each task still running
    is cancelled and waited for, up to :data:`TASK_CANCEL_SECONDS`. Left running, a task's
    statement would meet the runner's rollback: asyncpg refuses a ``ROLLBACK`` while
    another operation is in progress, and SQLAlchemy's adapter then forgets a transaction
    the server keeps open (``asyncio.gather`` leaves its other awaitables running when one
    of them raises: asyncio docs, "Running Tasks Concurrently").
    """
    left = started.left_behind()
    running = [task for task in left if not task.done()]
    if not running:
        return left
    connections = enlisted_connections(session.sync_session)
    deadline = time.monotonic() + BUSY_WAIT_SECONDS
    while (
        statement_running(connections)
        and not all(task.done() for task in running)
        and time.monotonic() < deadline
    ):
        await asyncio.sleep(BUSY_POLL_SECONDS)
    for task in running:
        task.cancel()
    await asyncio.wait(running, timeout=TASK_CANCEL_SECONDS)
    return left


async def _stopped_after_failure(
    started: _unawaited.Unfinished, session: AsyncSession, error: BaseException
) -> None:
    """Stop the tasks a failed handler left (:func:`_stop_left_tasks`); the handler's own
    error stays the attempt's failure, with a note naming them."""
    left = await _stop_left_tasks(started, session)
    for task in left:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the handler's error is the one reported
    if left:
        names = ", ".join(_task_name(task) for task in left)
        error.add_note(f"sa-inbox stopped {len(left)} task(s) the handler left behind: {names}")


async def _refuse_unfinished(started: _unawaited.Unfinished, session: AsyncSession) -> None:
    """Raise :class:`AsyncHandlerError` if the handler left anything unfinished, once the
    tasks it left are stopped (:func:`_stop_left_tasks`)."""
    if not started.dropped and not started.left_behind():
        return
    left = await _stop_left_tasks(started, session)
    failures = [t.exception() for t in left if t.done() and not t.cancelled()]
    problems = []
    if started.dropped:
        names = ", ".join(f"'{name}'" for name in dict.fromkeys(started.dropped))
        problems.append(
            f"made a coroutine and never awaited it (coroutine {names} was never awaited)"
        )
    if left:
        names = ", ".join(_task_name(task) for task in left)
        problems.append(
            f"returned with {len(left)} task(s) it created unfinished or failed unseen ({names})"
        )
    raise AsyncHandlerError(
        f"the handler {' and '.join(problems)}: on an AsyncSession, session.execute() and the "
        "other I/O methods must be awaited, as must every async def function the handler "
        "calls and every task it creates, before it returns (nothing was committed)"
    ) from next((f for f in failures if f is not None), None)


def _task_name(task: asyncio.Task[Any]) -> str:
    coro = task.get_coro()
    return f"{task.get_name()}: {getattr(coro, '__qualname__', coro)}"


def loop_sleep(seconds: float) -> None:
    """Sleep ``seconds`` on the event loop (from :func:`in_greenlet`): other tasks run meanwhile."""
    call_on_loop(asyncio.sleep(seconds))


def on_sync_bind(
    bind: AsyncBind, fn: Callable[..., T], *args: Any, **kwargs: Any
) -> Coroutine[Any, Any, T]:
    """``fn(sync_bind, *args, **kwargs)`` on the Session or Connection behind ``bind``, as a
    coroutine to await; ``bind`` is checked now, before the coroutine is made.

    :raises InvalidBind: at the call, if ``bind`` is not an AsyncSession,
        async_scoped_session or AsyncConnection (a synchronous Session among them).
    """
    if isinstance(bind, async_scoped_session):
        bind = bind()
    if not isinstance(bind, AsyncSession | AsyncConnection):
        raise InvalidBind(
            "bind must be an AsyncSession, async_scoped_session or AsyncConnection, not "
            f"{type(bind).__name__}: for a Session or Connection use sa-inbox's synchronous "
            "API (the Inbox, InboxStore or Outbox itself, not its asyncio face)"
        )
    return _run_on_sync_bind(bind, fn, *args, **kwargs)


async def _run_on_sync_bind(
    bind: AsyncSession | AsyncConnection, fn: Callable[..., T], *args: Any, **kwargs: Any
) -> T:
    # sa-inbox's own coroutine (not SQLAlchemy's run_sync): one left un-awaited is ours
    return await bind.run_sync(fn, *args, **kwargs)


class AwaitOnly(Coroutine[Any, Any, T]):
    """A coroutine that refuses to be read as true or false: ``if router.is_processed(...):``
    in synchronous code (a coroutine object is always true) raises at once instead of
    skipping every message as processed.

    It is a :class:`collections.abc.Coroutine` delegating to ``coro``, so ``await``,
    ``asyncio.run`` and ``asyncio.create_task`` take it as they take ``coro`` (asyncio
    accepts any such coroutine: ``asyncio.iscoroutine``).

    :param coro: the coroutine to run.
    :param entry: the entry point, as the error names it (``"AsyncShardedInbox.is_processed()"``).
    :param instead: what synchronous code uses instead, completing the message.
    """

    __slots__ = ("_coro", "_entry", "_instead")

    def __init__(self, coro: Coroutine[Any, Any, T], entry: str, instead: str) -> None:
        self._coro = coro
        self._entry = entry
        self._instead = instead

    def send(self, value: Any) -> Any:
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, T]:
        return self._coro.__await__()

    def __bool__(self) -> bool:
        self._coro.close()  # it will never run: no "never awaited" warning on top
        raise SyncAsyncMismatch(
            f"{self._entry} returns a coroutine, which is always true and does nothing "
            f"until awaited: await it (sa-inbox's asyncio API), or {self._instead}"
        )


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
