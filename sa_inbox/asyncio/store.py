"""The store-then-process inbox on asyncio: :class:`AsyncInboxStore` and :class:`AsyncWorker`.

:class:`AsyncInboxStore` receives in the caller's AsyncSession or AsyncConnection with the
store's own insert-or-skip (``run_sync``). :class:`AsyncWorker` is the store's
:class:`~sa_inbox.Worker`, every rule included (attempts counted at lease, back-off, dead
letters, the reaper, ordered mode, the visibility timeout, the lease-token guard, release on
stop, the summary), with its threads replaced by tasks: each task runs the worker's loop in a
greenlet, so its database calls are awaited on the event loop, and its waits are
``asyncio`` waits. The handler is ``async def handler(session, message)`` on an AsyncSession.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from ..checks import check_session_factory, require_asyncio, unwrap
from ..handlers import check_handler
from ..store.protocol import Incoming, StoredMessage
from ..store.schema import DEFAULT_CONSUMER
from ..store.store import BoundStore, InboxStore
from ..store.worker import DEFAULT_SHUTDOWN_TIMEOUT, Worker, WorkerRun, WorkerSummary, logger
from . import consumers
from ._bridge import (
    AsyncBind,
    async_session_of,
    call_handler_awaiting,
    in_greenlet,
    on_sync_bind,
    sync_session_factory,
)
from .waiting import LoopWaiting

__all__ = ["CANCEL_GRACE", "AsyncBoundStore", "AsyncHandler", "AsyncInboxStore", "AsyncWorker"]

#: Seconds a cancelled handler gets to roll back before run() returns.
CANCEL_GRACE = 10.0

#: ``async def handler(session, message)``: the business change on an AsyncSession, in the
#: transaction that marks the row ``done``; it must not commit.
AsyncHandler = Callable[[AsyncSession, StoredMessage], Awaitable[Any] | Any]


class AsyncInboxStore:
    """The asyncio face of an :class:`~sa_inbox.InboxStore`.

    :param store: the store (its table).

    Example::

        store = AsyncInboxStore(InboxStore(Base.metadata))
        async with Session.begin() as session:            # the consumer: store, commit, ack
            await store.receive(session, msg.message_id, msg.body, consumer_name="billing")
        await msg.ack()

        await AsyncWorker(store.bind(engine), handle_payment, consumer_name="billing").run()
    """

    __sa_inbox_asyncio_face__ = "sync_store"
    __sa_inbox_needs_bind__ = True

    def __init__(self, store: InboxStore | AsyncInboxStore) -> None:
        #: The synchronous store this one runs.
        self.sync_store = unwrap(store, InboxStore, "store", entry="AsyncInboxStore()")
        self.table = self.sync_store.table

    def receive(
        self, bind: AsyncBind, message_id: str, payload: Any, **kw: Any
    ) -> Coroutine[Any, Any, bool]:
        """Store one message in the caller's transaction; False if it was already stored.

        Keywords and errors as :meth:`sa_inbox.InboxStore.receive`, whose code runs here
        (``run_sync``, one greenlet per receive): the sync and async receives share one path.

        .. seealso:: ``benchmarks/RESULTS.md``, "Receive throughput against pactix 0.2.0".
        """
        return on_sync_bind(bind, self.sync_store.receive, message_id, payload, **kw)

    def receive_many(
        self, bind: AsyncBind, messages: Iterable[Incoming], **kw: Any
    ) -> Coroutine[Any, Any, set[str]]:
        """Store a batch in the caller's transaction; return the ids that were new
        (see :meth:`sa_inbox.InboxStore.receive_many`)."""
        batch = list(messages) if not isinstance(messages, Incoming) else messages
        return on_sync_bind(bind, self.sync_store.receive_many, batch, **kw)

    def bind(
        self,
        engine: AsyncEngine,
        session_factory: Callable[[], AsyncSession] | None = None,
    ) -> AsyncBoundStore:
        """This store on an AsyncEngine, as the store an :class:`AsyncWorker` runs on.

        :param session_factory: makes the AsyncSession handed to the handler (default
            ``async_sessionmaker(engine)``).
        :raises SyncAsyncMismatch: for a synchronous Engine (use
            :meth:`sa_inbox.InboxStore.bind` and the :class:`~sa_inbox.Worker`).
        :raises InvalidSessionFactory: for a ``sessionmaker`` or ``async_sessionmaker.begin``.
        """
        engine = _async_engine(engine, "AsyncInboxStore.bind()")
        if session_factory is not None:
            check_session_factory(
                session_factory, entry="AsyncInboxStore.bind()", asynchronous=True
            )
        factory = session_factory or async_sessionmaker(engine)
        return AsyncBoundStore(self.sync_store, engine.sync_engine, sync_session_factory(factory))

    def counts(
        self, engine: AsyncEngine, consumer_name: str | None = None
    ) -> Coroutine[Any, Any, dict[str, int]]:
        """Rows per status (see :meth:`sa_inbox.InboxStore.counts`).

        :raises SyncAsyncMismatch: for a synchronous Engine, at the call.
        """
        sync_engine = _async_engine(engine, "AsyncInboxStore.counts()").sync_engine
        return in_greenlet(self.sync_store.counts, sync_engine, consumer_name)

    def hand_over(
        self, engine: AsyncEngine, consumer_name: str, handler: object
    ) -> Coroutine[Any, Any, str | None]:
        """Give ``consumer_name`` to ``handler`` (an AsyncWorker's handler taking the name
        over): the asyncio spelling of ``store.consumers.hand_over(engine, ...)``
        (:meth:`sa_inbox.consumers.Consumers.hand_over`).

        :returns: (awaited) the previous owner's name, or None.
        :raises SyncAsyncMismatch: for a synchronous Engine, at the call.
        :raises InvalidTable: for a store built with ``consumers=False``, at the call.
        """
        return consumers.hand_over(
            self.sync_store.consumers,
            engine,
            consumer_name,
            handler,
            entry="AsyncInboxStore.hand_over()",
        )

    def replay(self, engine: AsyncEngine, **filters: Any) -> Coroutine[Any, Any, int]:
        """Reset chosen dead or done rows to pending (see :meth:`sa_inbox.InboxStore.replay`).

        :raises SyncAsyncMismatch: for a synchronous Engine, at the call.
        """
        sync_engine = _async_engine(engine, "AsyncInboxStore.replay()").sync_engine
        return in_greenlet(self.sync_store.replay, sync_engine, **filters)


class AsyncBoundStore(BoundStore):
    """An :class:`~sa_inbox.InboxStore` on an AsyncEngine: what :class:`AsyncWorker` runs
    on (``AsyncInboxStore(store).bind(async_engine)``). The synchronous
    :class:`~sa_inbox.Worker` refuses it: its sessions are the AsyncSessions' own, usable
    only in the asyncio worker's greenlets."""

    __sa_inbox_asyncio_face__ = ""


def _async_engine(engine: object, entry: str) -> AsyncEngine:
    return require_asyncio(
        engine,
        AsyncEngine,
        "engine",
        entry=entry,
        instead="for an Engine, use the InboxStore itself (its synchronous API)",
    )


class AsyncWorker:
    """Process stored messages with an ``async def`` handler, on asyncio tasks.

    :param store: ``AsyncInboxStore(...).bind(async_engine)``.
    :param handler: ``async def handler(session, message)`` (a plain function is called and
        its result awaited if awaitable); ``session`` is an AsyncSession in the transaction
        that marks the row ``done``. It must not commit.
    :param concurrency: tasks, each leasing and processing its own batches (the sync
        worker's threads).
    :param options: every other keyword of :class:`~sa_inbox.Worker` (``consumer_name``,
        ``batch_size``, ``visibility_timeout``, ``max_attempts``, ``ordered``, ``backoff``,
        ``poll_interval``, ``error_backoff``, ``reap_interval``, ``name``, ``clock``,
        ``on_lease``, ``on_message``, ``transaction``; not ``waiting``: the tasks wait on
        the event loop, :class:`~sa_inbox.asyncio.waiting.LoopWaiting`), with the same
        meaning and checks;
        ``transaction="batch"`` runs the sync worker's batch code
        (:mod:`sa_inbox.store.batch`) in the task's greenlet, savepoints included.
    :raises InvalidHandler: if ``handler`` cannot be called as ``handler(session,
        message)``.
    :raises SyncAsyncMismatch: for a store bound to a synchronous Engine (or an unbound
        store), before anything is sent.
    :raises InvalidArgument: as :class:`~sa_inbox.Worker`.
    """

    def __init__(
        self,
        store: AsyncBoundStore,
        handler: AsyncHandler,
        *,
        consumer_name: str | None = DEFAULT_CONSUMER,
        concurrency: int = 1,
        **options: Any,
    ) -> None:
        store = require_asyncio(
            store,
            AsyncBoundStore,
            "store",
            entry="AsyncWorker()",
            instead="pass AsyncInboxStore(store).bind(async_engine); for a store bound to an "
            "Engine, run the synchronous Worker",
        )
        check_handler(handler, ("session", "message"), asynchronous=True)

        @functools.wraps(handler)
        def sync_handler(session: Session, message: StoredMessage) -> object:
            return call_handler_awaiting(handler, async_session_of(session), message)

        self.handler = handler
        #: The stop signal the tasks wait on, on the event loop (the sync worker's
        #: ``stop_event``).
        self.waiting = LoopWaiting()
        #: Set by a second SIGINT in a run: the run stops at once (made by :meth:`run`).
        self._at_once = asyncio.Event()
        self._interrupts = 0
        #: The synchronous worker whose loops the tasks run: its ``stats``, ``summary``
        #: and ``stop_event`` are this worker's.
        self.sync_worker = Worker(
            store,
            sync_handler,
            consumer_name=consumer_name,
            concurrency=concurrency,
            waiting=self.waiting,
            **options,
        )

    @property
    def stats(self) -> Any:
        """Messages per outcome across runs (see :attr:`sa_inbox.Worker.stats`)."""
        return self.sync_worker.stats

    @property
    def summary(self) -> WorkerSummary:
        """Counts since the worker was made, with the last run's reason."""
        return self.sync_worker.summary

    def stop(self) -> None:
        """Ask every task to finish the message in hand, release the rest and return."""
        self.sync_worker.stop()

    async def run(
        self,
        *,
        until_empty: bool = False,
        max_messages: int | None = None,
        max_seconds: float | None = None,
        handle_signals: bool = True,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    ) -> WorkerSummary:
        """Process messages until stopped, empty, or a limit; return the run's summary.

        Arguments, limits and errors as :meth:`sa_inbox.Worker.run`; ``handle_signals``
        turns SIGTERM and SIGINT into :meth:`stop` through the running loop's
        ``add_signal_handler`` (Unix), and a second SIGINT cancels the tasks at once (the
        rest of their batches given back) and raises :class:`KeyboardInterrupt`.

        :raises ConfigurationError: as :meth:`sa_inbox.Worker.run`: every task stops.
        :raises asyncio.CancelledError: when ``run()`` is cancelled (``asyncio.wait_for``, an
            application's shutdown): the tasks first stop as for :meth:`stop` (the message
            in hand is finished, the rest of each batch released), within
            ``shutdown_timeout``.
        """
        worker = self.sync_worker
        run = worker.begin_run(
            until_empty=until_empty, max_messages=max_messages, max_seconds=max_seconds
        )
        if not await in_greenlet(run.owns_consumer_name):
            return run.finish()
        self._at_once, self._interrupts = asyncio.Event(), 0
        with self._signals(handle_signals):
            tasks = [
                asyncio.create_task(in_greenlet(run.loop, i)) for i in range(worker.concurrency)
            ]
            try:
                await self._join(run, tasks, shutdown_timeout)
            except asyncio.CancelledError:
                # run() itself cancelled (an application shutting down): stop as for a
                # stop request (messages in hand finished, the rest of each batch released)
                # within the shutdown timeout, then let the cancellation through.
                self.stop()
                _, pending = await asyncio.wait(tasks, timeout=shutdown_timeout)
                await self._give_up(run, pending)
                raise
        return run.finish()

    async def _join(
        self, run: WorkerRun, tasks: list[asyncio.Task[None]], shutdown_timeout: float
    ) -> None:
        """Wait for every task; after a stop, at most ``shutdown_timeout`` seconds more (or
        until a second SIGINT: then :class:`KeyboardInterrupt`, once the tasks left are
        cancelled)."""
        stopped = asyncio.create_task(self.waiting.until_set())
        pending = set(tasks)
        try:
            while pending and not stopped.done():
                await asyncio.wait({*pending, stopped}, return_when=asyncio.FIRST_COMPLETED)
                pending = {task for task in pending if not task.done()}
        finally:
            stopped.cancel()
        if pending:
            pending = await self._wait_for_shutdown(pending, shutdown_timeout)
        await self._give_up(run, pending)
        if self._at_once.is_set():
            raise KeyboardInterrupt
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def _wait_for_shutdown(
        self, pending: set[asyncio.Task[None]], shutdown_timeout: float
    ) -> set[asyncio.Task[None]]:
        """The tasks still running after ``shutdown_timeout`` seconds, or at a second
        SIGINT, whichever comes first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + shutdown_timeout
        at_once = asyncio.create_task(self._at_once.wait())
        try:
            while pending and not at_once.done() and loop.time() < deadline:
                await asyncio.wait(
                    {*pending, at_once},
                    timeout=deadline - loop.time(),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                pending = {task for task in pending if not task.done()}
        finally:
            at_once.cancel()
        return pending

    async def _give_up(self, run: WorkerRun, pending: set[asyncio.Task[None]]) -> None:
        """Cancel the tasks whose handler outlasted the shutdown timeout (the message in hand
        is leased again after the visibility timeout) and give back the unstarted rest of
        their batches, taken before the cancellations run."""
        if not pending:
            return
        for task in pending:
            task.cancel()
        why = "stopped at once" if self._at_once.is_set() else "shutdown timeout"
        await in_greenlet(run.abandon, why)
        # Let the cancelled handlers roll back before run() returns: the caller disposes
        # the engine next, and a rollback on a disposed connection would never complete.
        await asyncio.wait(pending, timeout=CANCEL_GRACE)

    @contextlib.contextmanager
    def _signals(self, enabled: bool) -> Iterator[None]:
        if not enabled:
            yield
            return
        loop = asyncio.get_running_loop()
        added = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            # add_signal_handler exists on Unix event loops only (NotImplementedError on
            # Windows' proactor loop) and only in the main thread (RuntimeError/ValueError
            # elsewhere): there the worker runs without signal handling, as the sync
            # worker does outside the main thread, and stops through stop().
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._on_signal, sig)
                added.append(sig)
        try:
            yield
        finally:
            for sig in added:
                loop.remove_signal_handler(sig)

    def _on_signal(self, signum: int) -> None:
        if signum == signal.SIGINT:
            self._interrupts += 1
            if self._interrupts > 1:  # a second Ctrl-C: stop now
                self._at_once.set()
                return
        logger.info(
            "stop requested (signal %s)", signum, extra={"action": "stop", "signal": signum}
        )
        self.stop()
