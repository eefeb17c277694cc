"""One call per handler: the inbox pattern's three tests, on the user's own database.

:func:`check_exactly_once` takes the user's consumer (an sa-inbox handler, a broker adapter
configured as in production, or a consumer of their own), a session factory on their real
database, a message factory and a function reading the message's business state, and runs:

1. **key stability** (no SQL): the consumer's key of one message, fed a producer's retry, a
   broker's redelivery and deliveries differing in one broker field each (delivery tag,
   redelivered flag, delivery count, receipt handle, partition, offset, entry id, sequence,
   time of receipt), must not change; two messages must not share one;
2. **sequential duplicate**: a message, then the producer's retry of it: the state changes
   once; the second delivery is acked without running the handler; the first was acked only
   once its change was committed, in one transaction;
3. **concurrent duplicate**: ``workers`` deliveries of one message (threads, or asyncio
   tasks for an ``async def`` consumer), each held just before its claim until all are
   there (:mod:`.observe`): exactly one applies it, the others skip and ack, nothing hangs;
4. **crash between commit and ack**: a child process (:func:`os.fork`, so nothing needs to
   be importable) applies a message and is SIGKILLed at its ack; the redelivery applies
   nothing and is acked;
5. **crash before commit**: a child killed at its commit leaves nothing behind, the
   redelivery applies the message, and each named ``outbound`` function called in both
   carries the same idempotency key (:func:`sa_inbox.idempotency_key`) both times.

Each finding names a failure mode of :mod:`.modes` with the rule and the fix; any finding
raises :class:`~sa_inbox.exc.ExactlyOnceViolation`, whose message is the report.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa

from ..brokers.process import DEFAULT_MAX_DELIVERIES
from ..brokers.startup import check_consumer
from ..checks import check_session_factory, is_asyncio_object
from ..consumers import handler_name
from ..exc import ExactlyOnceViolation, InvalidArgument, InvalidHandler, SyncAsyncMismatch
from ..handlers import check_handler
from .adapters import profile_of
from .checks import (
    check_concurrent,
    check_crash_after_commit,
    check_crash_before_commit,
    check_key,
    check_outbound_seen,
    check_sequential,
)
from .messages import MessageFactory
from .observe import observing
from .outbound import Recorder, resolve
from .report import CHECKS, Report
from .run import Run
from .targets import ConsumerTarget, HandlerTarget, KeyFunction, Target

__all__ = ["check_exactly_once", "check_exactly_once_async"]

ENTRY = "check_exactly_once()"


def check_exactly_once(
    handler: Any = None,
    /,
    *,
    consumer: Callable[..., Any] | str | None = None,
    session_factory: Callable[[], Any] | None = None,
    inbox: Any = None,
    consumer_name: str | None = None,
    message: MessageFactory,
    state: Callable[..., Any],
    key: KeyFunction | None = None,
    outbound: Iterable[str] = (),
    workers: int = 4,
    timeout: float = 60.0,
) -> Report:
    """Run the exactly-once checks on one consumer (see the module's docstring).

    Exactly one of ``handler`` and ``consumer``:

    :param handler: an sa-inbox handler ``handler(session, delivery)`` (``def`` or ``async
        def``, or its import path ``"module:function"``), run by
        :func:`sa_inbox.brokers.process` as every broker adapter runs it; needs
        ``session_factory``, ``inbox`` and ``consumer_name``. Or a broker adapter made as in
        production (``rabbitmq.Consumer(...)``, ``redis.Consumer(...)``; it connects to
        nothing), whose settings and key reading are used (:mod:`.adapters`).
    :param consumer: a consumer of your own, ``consume(delivery, ack)`` (``def``, or ``async
        def`` awaiting ``ack()``), or its import path: it gets a
        :class:`~sa_inbox.testing.BrokerDelivery`, claims and commits by itself and calls
        ``ack()`` once the delivery is settled; raising hands the delivery back.
    :param session_factory: a ``sessionmaker`` (``async_sessionmaker``) on the real
        database, where the checks read the state (an adapter's own by default). SQLite
        must be a file: the checks use several connections and processes.
    :param inbox: the handler's :class:`~sa_inbox.Inbox` (or AsyncInbox).
    :param consumer_name: the handler's consumer name.
    :param message: ``message(message_id)`` returns the :class:`~sa_inbox.testing.Message`
        a producer would send for a new event (or its body, ``bytes``/``str``), keyed on the
        new id it is given; every message it makes must have the same effect.
    :param state: ``state(session, message)`` (``def``, or ``async def`` for an
        AsyncSession) returns the message's business state: what the handler changes for
        that message (the count of its ledger rows, the balance of an account of its own),
        comparable with ``==`` and the same for every message delivered once.
    :param key: the key your adapter code derives from a delivery, ``key(delivery)``, if
        not the producer's ``message_id`` (handlers only).
    :param outbound: import paths (``"myapp.billing:charge"``) of functions the handler
        calls outside the database; each call is recorded (see :mod:`.outbound`).
    :param workers: deliveries of the concurrent duplicate, >= 2.
    :param timeout: seconds one delivery (or child process) may take before it counts as
        hung.
    :returns: the :class:`~sa_inbox.testing.Report`, when every check passed.
    :raises ExactlyOnceViolation: (an AssertionError) with the report, when one failed.
    :raises InvalidArgument: for arguments the checks cannot use, before any SQL
        (:class:`~sa_inbox.exc.InvalidHandler`, :class:`~sa_inbox.exc.SyncAsyncMismatch`,
        :class:`~sa_inbox.exc.InvalidSessionFactory` likewise); a state that differs between
        two new messages, when seen.
    :raises ConfigurationError: from sa-inbox (a missing table...), as it is.
    """
    __tracebackhide__ = True
    prepared = _prepare(
        handler,
        consumer=consumer,
        session_factory=session_factory,
        inbox=inbox,
        consumer_name=consumer_name,
        message=message,
        state=state,
        key=key,
        outbound=outbound,
        workers=workers,
        timeout=timeout,
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        report = asyncio.run(_run_and_close(*prepared))
    else:
        raise InvalidArgument(
            f"{ENTRY} was called inside a running event loop: await "
            "sa_inbox.testing.check_exactly_once_async() there"
        )
    if not report.passed:
        raise ExactlyOnceViolation(report)
    return report


async def check_exactly_once_async(
    handler: Any = None,
    /,
    *,
    consumer: Callable[..., Any] | str | None = None,
    session_factory: Callable[[], Any] | None = None,
    inbox: Any = None,
    consumer_name: str | None = None,
    message: MessageFactory,
    state: Callable[..., Any],
    key: KeyFunction | None = None,
    outbound: Iterable[str] = (),
    workers: int = 4,
    timeout: float = 60.0,
) -> Report:
    """:func:`check_exactly_once` on the running event loop (an ``async def`` test whose
    engine belongs to that loop).

    :raises: as :func:`check_exactly_once`.
    """
    __tracebackhide__ = True
    run, recorder, report = _prepare(
        handler,
        consumer=consumer,
        session_factory=session_factory,
        inbox=inbox,
        consumer_name=consumer_name,
        message=message,
        state=state,
        key=key,
        outbound=outbound,
        workers=workers,
        timeout=timeout,
    )
    try:
        await _checks(run, recorder, report)
    finally:
        run.close_threads()
    if not report.passed:
        raise ExactlyOnceViolation(report)
    return report


async def _run_and_close(run: Run, recorder: Recorder, report: Report) -> Report:
    """The checks on an event loop of their own; its connections closed on it after."""
    try:
        await _checks(run, recorder, report)
    finally:
        run.close_threads()
        engine = _bind(run.session_factory)
        if run.asynchronous_factory and engine is not None:
            await engine.dispose()
    return report


async def _checks(run: Run, recorder: Recorder, report: Report) -> Report:
    with observing(), recorder.active():
        check_key(run, report)
        if not await check_sequential(run, report):
            for name, _ in CHECKS[2:]:
                report.skip(name, "the sequential duplicate found no baseline")
            return report
        await check_concurrent(run, report)
        if run.stuck:
            for name, _ in CHECKS[3:]:
                report.skip(name, "a concurrent delivery never ended")
            return report
        await check_crash_after_commit(run, report)
        await check_crash_before_commit(run, report, outbound=bool(recorder.paths))
        if recorder.paths:
            check_outbound_seen(run, report, recorder.paths)
        else:
            report.note("crash_before_commit", "side effects not checked: no outbound=")
    return report


# -- arguments ---------------------------------------------------------------------------------


def _prepare(
    handler: Any,
    *,
    consumer: Any,
    session_factory: Any,
    inbox: Any,
    consumer_name: str | None,
    message: Any,
    state: Any,
    key: Any,
    outbound: Iterable[str],
    workers: int,
    timeout: float,
) -> tuple[Run, Recorder, Report]:
    """Check every argument (no SQL) and make the run."""
    if (handler is None) == (consumer is None):
        raise InvalidArgument(
            f"{ENTRY} takes either a handler (or broker adapter) or consumer=, not "
            f"{'both' if handler is not None else 'neither'}"
        )
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 2:
        raise InvalidArgument(f"{ENTRY}: workers must be an int >= 2, not {workers!r}")
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise InvalidArgument(f"{ENTRY}: timeout must be a number of seconds > 0")
    if not callable(message):
        raise InvalidArgument(f"{ENTRY}: message must be a factory, message(message_id)")
    if not callable(state):
        raise InvalidArgument(f"{ENTRY}: state must be a function, state(session, message)")
    check_handler(state, ("session", "message"), f"{ENTRY}'s state", asynchronous=True)
    if consumer is not None:
        target, session_factory = _own(consumer, session_factory, inbox, consumer_name, key)
    else:
        target, session_factory = _handler(handler, session_factory, inbox, consumer_name, key)
    asynchronous_factory = is_asyncio_object(session_factory)
    if asynchronous_factory != target.asynchronous and consumer is not None:
        kind = "an async def" if target.asynchronous else "a def"
        makes = "AsyncSessions" if asynchronous_factory else "Sessions"
        raise SyncAsyncMismatch(
            f"{ENTRY}: the consumer is {kind} but the session factory makes {makes}: give "
            "it the factory of its own half"
        )
    if inspect.iscoroutinefunction(state) and not asynchronous_factory:
        raise SyncAsyncMismatch(
            f"{ENTRY}: an async def state needs an async_sessionmaker; make it a def"
        )
    _refuse_memory_sqlite(session_factory)
    recorder = Recorder(outbound)
    run = Run(
        target,
        session_factory,
        state,
        message,
        asynchronous_factory=asynchronous_factory,
        workers=workers,
        timeout=float(timeout),
    )
    return run, recorder, Report(_subject(target, session_factory, workers))


def _imported(value: Any) -> Any:
    """``value``, or the object its import path ``"module:attr"`` names."""
    return resolve(value)[2] if isinstance(value, str) else value


def _own(
    consumer: Any, session_factory: Any, inbox: Any, consumer_name: Any, key: Any
) -> tuple[Target, Any]:
    consume = _imported(consumer)
    if inbox is not None or consumer_name is not None or key is not None:
        raise InvalidArgument(
            f"{ENTRY}: inbox=, consumer_name= and key= are a handler's; a consumer of your "
            "own claims and keys by itself"
        )
    if session_factory is None:
        raise InvalidArgument(f"{ENTRY}: consumer= needs session_factory= (to read state)")
    check_handler(consume, ("delivery", "ack"), f"{ENTRY}'s consumer", asynchronous=True)
    asynchronous = inspect.iscoroutinefunction(consume)
    check_session_factory(session_factory, entry=ENTRY, asynchronous=asynchronous)
    return ConsumerTarget(consume, name=handler_name(consume)), session_factory


def _handler(
    handler: Any, session_factory: Any, inbox: Any, consumer_name: Any, key: Any
) -> tuple[Target, Any]:
    handler = _imported(handler)
    profile = profile_of(handler)
    if profile is not None:
        if inbox is not None or consumer_name is not None or key is not None:
            raise InvalidArgument(
                f"{ENTRY}: a broker adapter brings its own inbox, consumer name and key "
                "reading; pass only the adapter"
            )
        # a registered adapter's profile (register_adapter) is checked as a consumer is
        check_consumer(
            ENTRY,
            session_factory=profile.session_factory,
            inbox=profile.inbox,
            handler=profile.handler,
            consumer_name=profile.consumer_name,
            max_deliveries=profile.max_deliveries,
            asynchronous=profile.asynchronous,
        )
        target = HandlerTarget(
            profile.handler,
            session_factory=profile.session_factory,
            inbox=profile.inbox,
            consumer_name=profile.consumer_name,
            asynchronous=profile.asynchronous,
            to_delivery=profile.to_delivery,
            max_deliveries=profile.max_deliveries,
            name=profile.name,
        )
        return target, session_factory or profile.session_factory
    missing = [
        name
        for name, value in (
            ("session_factory", session_factory),
            ("inbox", inbox),
            ("consumer_name", consumer_name),
        )
        if value is None
    ]
    if missing:
        raise InvalidArgument(f"{ENTRY}: a handler needs {', '.join(missing)}")
    if not callable(handler):
        raise InvalidHandler(
            f"{ENTRY} takes a handler(session, delivery), a broker adapter or its import "
            f"path, not {type(handler).__name__}"
        )
    if key is not None and not callable(key):
        raise InvalidArgument(f"{ENTRY}: key must be a function, key(delivery)")
    asynchronous = is_asyncio_object(session_factory) or inspect.iscoroutinefunction(handler)
    check_consumer(
        ENTRY,
        session_factory=session_factory,
        inbox=inbox,
        handler=handler,
        consumer_name=consumer_name,
        max_deliveries=DEFAULT_MAX_DELIVERIES,
        asynchronous=asynchronous,
    )
    target = HandlerTarget(
        handler,
        session_factory=session_factory,
        inbox=inbox,
        consumer_name=consumer_name,
        asynchronous=asynchronous,
        key=key,
        name=handler_name(handler),
    )
    return target, session_factory


def _bind(session_factory: Any) -> Any:
    """The engine a ``sessionmaker`` (``async_sessionmaker``) binds, or None."""
    kw = getattr(session_factory, "kw", None)
    return kw.get("bind") if isinstance(kw, dict) else None


def _refuse_memory_sqlite(session_factory: Any) -> None:
    engine = _bind(session_factory)
    url = getattr(engine, "url", None)
    if not isinstance(url, sa.URL) or url.get_backend_name() != "sqlite":
        return
    if url.database in (None, "", ":memory:") or "mode=memory" in str(url):
        raise InvalidArgument(
            f"{ENTRY}: an in-memory SQLite database lives in one connection; the "
            "checks need several connections and a child process: use a file "
            "(sqlite:///path/test.db)"
        )


def _subject(target: Target, session_factory: Any, workers: int) -> str:
    engine = _bind(session_factory)
    where = f" on {engine.url.render_as_string(hide_password=True)}" if engine is not None else ""
    name = f" (consumer {target.consumer_name!r})" if target.consumer_name else ""
    return f"{target.name}{name}{where}"
