"""One run of the exactly-once checks: the user's state function read through their session
factory, deliveries made in worker threads (a synchronous consumer) or asyncio tasks (an
asynchronous one), the ack each delivery is given, and deliveries in a killed child process.

Everything here is awaited on one event loop; a synchronous consumer's deliveries and state
reads run in threads of a pool the run owns, shut down before each fork (a process forked
while other threads run may deadlock in the child).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..exc import ConfigurationError, InvalidArgument
from .child import ChildReport, Pipe, run_child
from .messages import Broker, BrokerDelivery, Message, MessageFactory, make_message
from .observe import CURRENT, Gate, OutboundCall, Watch
from .targets import Settled, Target

__all__ = ["Delivered", "Run"]

T = TypeVar("T")

#: No state to compare at the ack.
NOTHING: Any = object()
_THREADS = "sa-inbox-check"


@dataclass
class Delivered:
    """One delivery as the checks saw it.

    :param delivery: what was delivered.
    :param watch: what the database saw of it.
    :param settled: how it ended.
    :param left_running: threads or tasks it started and left running.
    """

    delivery: BrokerDelivery
    watch: Watch
    settled: Settled
    left_running: list[str] = field(default_factory=list)

    @property
    def acked(self) -> bool:
        return self.watch.acks > 0

    @property
    def failed(self) -> bool:
        """It failed (handed back for redelivery, dead-lettered, or raised)."""
        return self.settled.outcome in ("retry", "dead_lettered", "raised")

    def describe(self) -> str:
        """How it ended, in a few words (the error's type and text)."""
        settled = self.settled
        text = _OUTCOMES.get(settled.outcome, settled.outcome)
        if settled.error is not None:
            text += f" ({type(settled.error).__name__}: {_short(settled.error)})"
        elif settled.reason:
            text += f" ({settled.reason})"
        return text


#: How each outcome reads in a report.
_OUTCOMES = {
    "processed": "processed and acked",
    "duplicate": "acked as a duplicate",
    "retry": "handed back for redelivery",
    "dead_lettered": "dead-lettered",
    "raised": "raised",
    "returned": "returned",
}


def _short(error: BaseException, limit: int = 300) -> str:
    """The error's text on one line: a driver error's own message (without SQLAlchemy's
    statement and parameters)."""
    text = " ".join(str(getattr(error, "orig", None) or error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def outbound_lines(calls: Sequence[OutboundCall]) -> list[dict[str, Any]]:
    """The calls as the child reports them."""
    return [{"name": c.name, "keys": list(c.keys), "text": c.text} for c in calls]


async def _dispose(session_factory: Any) -> None:
    """Close the pooled connections of an ``async_sessionmaker``'s engine (the pool opens
    new ones when asked)."""
    kw = getattr(session_factory, "kw", None)
    engine = kw.get("bind") if isinstance(kw, dict) else None
    if engine is not None:
        await engine.dispose()


@contextmanager
def _watching(watch: Watch) -> Iterator[None]:
    """Make ``watch`` the delivery's :data:`~.observe.CURRENT` watch for the block; after
    it, however it ends, let the next delivery through ``watch``'s gate."""
    token = CURRENT.set(watch)
    try:
        yield
    finally:
        CURRENT.reset(token)
        if watch.gate is not None:
            watch.gate.end(watch)


class Run:
    """The objects under test and the means to deliver to them.

    :param target: the consumer.
    :param session_factory: a ``sessionmaker`` or ``async_sessionmaker`` on the database.
    :param state: ``state(session, message)``, ``def`` or ``async def``.
    :param message_factory: see :func:`~sa_inbox.testing.messages.make_message`.
    :param asynchronous_factory: whether ``session_factory`` makes AsyncSessions.
    :param workers: deliveries of the concurrent duplicate.
    :param timeout: seconds any one delivery (or child process) may take.
    """

    def __init__(
        self,
        target: Target,
        session_factory: Callable[[], Any],
        state: Callable[..., Any],
        message_factory: MessageFactory,
        *,
        asynchronous_factory: bool,
        workers: int,
        timeout: float,
    ) -> None:
        self.target = target
        self.session_factory = session_factory
        self.state = state
        self.state_is_async = inspect.iscoroutinefunction(state)
        self.message_factory = message_factory
        self.asynchronous_factory = asynchronous_factory
        self.workers = workers
        self.timeout = timeout
        self.broker = Broker()
        #: The state of a fresh message, and of one delivered once (the sequential test's).
        self.before: Any = NOTHING
        self.once: Any = NOTHING
        #: The outbound functions called so far (their paths).
        self.called: set[str] = set()
        self._ids: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None
        #: Set when a delivery never finished: later checks cannot run beside it.
        self.stuck = False
        #: The broker fields a consumer of one's own keys on, once a check found them.
        self.key_fields: list[str] | None = None

    # -- messages and state -----------------------------------------------------------------

    def new_message(self) -> Message:
        """A new message from the factory.

        :raises InvalidArgument: if its id was seen before (a producer mints one per event).
        """
        message = make_message(self.message_factory)
        if message.message_id is not None:
            if message.message_id in self._ids:
                raise InvalidArgument(
                    f"the message factory returned the id {message.message_id!r} twice: "
                    "each call stands for a new event, with an id of its own (use the "
                    "message_id it is given)"
                )
            self._ids.add(message.message_id)
        return message

    def read_sync(self, message: Message) -> Any:
        """``state(session, message)`` in a new session of a synchronous factory."""
        with self.session_factory() as session:
            try:
                return self.state(session, message)
            finally:
                session.rollback()

    async def read_async(self, message: Message) -> Any:
        """``state(session, message)`` in a new AsyncSession (a plain ``def`` state through
        ``run_sync``)."""
        async with self.session_factory() as session:
            try:
                if self.state_is_async:
                    return await self.state(session, message)
                return await session.run_sync(lambda s: self.state(s, message))
            finally:
                await session.rollback()

    async def read(self, message: Message) -> Any:
        """The message's state now."""
        if self.asynchronous_factory:
            return await self.read_async(message)
        return await self.in_thread(self.read_sync, message)

    async def in_thread(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in a thread of the run's pool."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers + 1, thread_name_prefix=_THREADS)
        return await asyncio.get_running_loop().run_in_executor(self._pool, function, *args)

    def close_threads(self, wait: bool = True) -> None:
        """Shut the thread pool down (before a fork, and at the end)."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait and not self.stuck, cancel_futures=True)
            self._pool = None

    # -- acks ------------------------------------------------------------------------------

    def _ack_problems(self, watch: Watch, state_at_ack: Any, before: Any) -> None:
        if watch.uncommitted:
            watch.ack_problems.append(
                f"{watch.uncommitted} changed row(s) of the delivery were not committed yet"
            )
        if before is not NOTHING and state_at_ack == before:
            watch.ack_problems.append(
                f"the message's state read from another session was still {before!r}"
            )

    def ack_sync(
        self,
        watch: Watch,
        message: Message,
        before: Any,
        then: Callable[[Watch], None] | None = None,
    ) -> Callable[[], None]:
        """The ``ack`` of a synchronous delivery: counted and checked (changes not committed
        yet; with ``before``, the message's change not visible yet), then ``then(watch)``."""

        def ack() -> None:
            watch.acks += 1
            state = NOTHING if before is NOTHING else self.read_sync(message)
            self._ack_problems(watch, state, before)
            if then is not None:
                then(watch)

        return ack

    def ack_async(
        self,
        watch: Watch,
        message: Message,
        before: Any,
        then: Callable[[Watch], None] | None = None,
    ) -> Callable[[], Awaitable[None]]:
        """:meth:`ack_sync` for an asyncio delivery."""

        async def ack() -> None:
            watch.acks += 1
            state = NOTHING if before is NOTHING else await self.read_async(message)
            self._ack_problems(watch, state, before)
            if then is not None:
                then(watch)

        return ack

    # -- deliveries ----------------------------------------------------------------------

    def _work(
        self, delivery: BrokerDelivery, watch: Watch, ack: Callable[[], None]
    ) -> tuple[Settled, list[str]]:
        threads = set(threading.enumerate())
        with _watching(watch):
            try:
                settled = self.target.deliver(delivery, ack)
            except ConfigurationError:
                raise
            except Exception as exc:
                settled = Settled("raised", exc)
        left = [
            thread.name
            for thread in set(threading.enumerate()) - threads
            if thread.is_alive() and not thread.name.startswith(_THREADS)
        ]
        return settled, left

    async def _work_async(
        self, delivery: BrokerDelivery, watch: Watch, ack: Callable[[], Awaitable[None]]
    ) -> tuple[Settled, list[str]]:
        tasks = asyncio.all_tasks()
        with _watching(watch):
            try:
                settled = await self.target.deliver_async(delivery, ack)
            except ConfigurationError:
                raise
            except Exception as exc:
                settled = Settled("raised", exc)
        current = asyncio.current_task()
        left = [
            task.get_name()
            for task in asyncio.all_tasks() - tasks
            if task is not current and not task.done()
        ]
        return settled, left

    async def deliver(
        self, delivery: BrokerDelivery, *, before: Any = NOTHING, gate: Gate | None = None
    ) -> Delivered:
        """Deliver once, in a worker of its own (a thread, or a task).

        :param before: the message's state before it was ever applied, when this delivery
            must apply it: its ack then checks the change is visible.
        :param gate: the gate its claim waits at.
        :raises ConfigurationError: from sa-inbox, as it is.
        """
        watch = Watch(gate, self.target.bookkeeping)
        message = delivery.message
        if self.target.asynchronous:
            settled, left = await asyncio.create_task(
                self._work_async(delivery, watch, self.ack_async(watch, message, before))
            )
        else:
            settled, left = await self.in_thread(
                self._work, delivery, watch, self.ack_sync(watch, message, before)
            )
        self.called.update(call.name for call in watch.outbound)
        return Delivered(delivery, watch, settled, left)

    async def deliver_together(
        self, deliveries: Sequence[BrokerDelivery], gate: Gate
    ) -> tuple[list[Delivered], int]:
        """Deliver each at once in its own worker, their claims held at ``gate``.

        :returns: the deliveries that ended, and how many had not ended after the timeout
            (still running: the run is then :attr:`stuck`).
        """
        pending = {asyncio.ensure_future(self.deliver(d, gate=gate)) for d in deliveries}
        done, still = await asyncio.wait(pending, timeout=self.timeout)
        if still:
            self.stuck = True
            for future in still:
                future.cancel()
        return [future.result() for future in done], len(still)

    async def fork(
        self, delivery: BrokerDelivery, *, crash: str, before: Any = NOTHING
    ) -> ChildReport:
        """Deliver in a child process that SIGKILLs itself at ``crash``: ``"ack"`` (when the
        consumer acks) or ``"commit"`` (at the commit of the delivery's changes, before it
        reaches the database). Its lines: ``at`` (the crash point) with ``ack_problems``,
        ``commits`` and ``outbound``; or ``settled`` (it ended first) or ``error``."""
        self.close_threads()
        if self.asynchronous_factory:
            await _dispose(self.session_factory)  # its connections closed, not inherited
        message = delivery.message

        def report(pipe: Pipe, at: str) -> Callable[[Watch], None]:
            return lambda w: pipe.die(
                at=at,
                ack_problems=w.ack_problems,
                commits=w.commits,
                outbound=outbound_lines(w.outbound),
            )

        def settled_line(pipe: Pipe, watch: Watch, settled: Settled) -> None:
            error = settled.error
            pipe.say(
                settled=settled.outcome,
                error=None if error is None else f"{type(error).__name__}: {_short(error)}",
                acks=watch.acks,
                commits=watch.commits,
                outbound=outbound_lines(watch.outbound),
            )

        def body(pipe: Pipe) -> None:
            watch = Watch(ignore=self.target.bookkeeping)
            if crash == "commit":
                watch.on_commit = report(pipe, "commit")
            then = report(pipe, "ack") if crash == "ack" else None
            settled, _ = self._work(delivery, watch, self.ack_sync(watch, message, before, then))
            settled_line(pipe, watch, settled)

        async def body_async(pipe: Pipe) -> None:
            watch = Watch(ignore=self.target.bookkeeping)
            if crash == "commit":
                watch.on_commit = report(pipe, "commit")
            then = report(pipe, "ack") if crash == "ack" else None
            ack = self.ack_async(watch, message, before, then)
            settled, _ = await self._work_async(delivery, watch, ack)
            settled_line(pipe, watch, settled)

        return await run_child(
            body_async if self.target.asynchronous else body,
            asynchronous=self.target.asynchronous,
            timeout=self.timeout,
        )
