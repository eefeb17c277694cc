"""The decision every broker adapter shares: process, skip as duplicate, retry, dead-letter.

:func:`process` (threads) and :func:`process_async` (asyncio) run one :class:`Delivery`
through :func:`sa_inbox.handle` / :func:`sa_inbox.asyncio.handle` (claim, handler, commit,
ack) and settle it with the adapter's :class:`Settler`. They differ only in their edges; the
rules are the functions below them:

1. no producer key → dead letter ``MISSING_MESSAGE_ID``; an invalid one (or a value that is
   no text: :attr:`Delivery.key_error`) → ``INVALID_MESSAGE_ID`` (nothing claimed, nothing
   processed);
2. a delivery past ``max_deliveries`` (consumers died while handling it) still claims first:
   a committed message is acked as a duplicate; otherwise the claim is rolled back and the
   delivery dead-lettered (``DELIVERY_LIMIT``) without running the handler;
3. the handler runs; after the commit the delivery is acked; on failure it is retried, or
   dead-lettered (``DELIVERY_LIMIT``) if this was the last delivery allowed;
4. a :class:`~sa_inbox.ConfigurationError` is raised to the caller unsettled (it would fail
   every message; the broker redelivers the delivery when the consumer stops);
5. a failure because the database cannot be reached (:func:`sa_inbox.outage.is_unavailable`)
   is neither retried nor counted: the delivery is held while the consumer's
   :class:`~sa_inbox.outage.OutageGate` probes the database with back-off, then run again
   (see :mod:`sa_inbox.outage`); a consumer stopped meanwhile gets
   :class:`~sa_inbox.exc.DatabaseUnavailable`, the delivery unsettled. A pool timeout
   (:class:`sqlalchemy.exc.TimeoutError`: every connection of the pool checked out for
   ``pool_timeout`` seconds) is this process's own contention, neither the database's
   outage nor the message's failure: the delivery waits the gate's back-off and runs
   again, uncounted, with no probe and no outage logged. (Every delivery held through an
   outage runs again at its end, all at once on an asyncio consumer: without this, the
   pool timeouts of that herd began new "outages" and spent deliveries.)
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..claim import Inbox
from ..consumers import stands_for
from ..exc import DatabaseUnavailable, DeliveryLimitExceeded, InvalidArgument, InvalidMessageId
from ..outage import (
    OutageGate,
    Verdict,
    database_of,
    guarded,
    is_unavailable,
    probe_sessions,
    probe_sessions_async,
)
from ..runner import Outcome, Result, handle
from ..steps import drive, drive_async
from ..validation import positive_int
from .delivery import DeadLetterReason, Delivery, Disposition, Settlement, Settler
from .startup import NO_CONSUMER_NAME, check_consumer

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

__all__ = ["DEFAULT_MAX_DELIVERIES", "DeliveryLimitExceeded", "process", "process_async"]

logger = logging.getLogger("sa_inbox.brokers")

#: Deliveries of one message before it is dead-lettered (the first one counts).
DEFAULT_MAX_DELIVERIES = 5

#: Called with each delivery and its settlement (metrics, the chaos run's tally).
OnSettled = Callable[[Settlement], Any]


@dataclass(frozen=True)
class Options:
    """The arguments of :func:`process` / :func:`process_async` that an adapter keeps for
    all its deliveries (all but the delivery, settler and handler)."""

    session_factory: Callable[[], Any]
    inbox: Inbox
    consumer_name: str
    max_deliveries: int
    on_settled: OnSettled | None
    outage: OutageGate

    @classmethod
    def of(
        cls,
        session_factory: Callable[[], Any],
        inbox: Inbox,
        consumer_name: str,
        max_deliveries: int,
        on_settled: OnSettled | None,
    ) -> Options:
        """The options of one consumer, with an outage gate of its own."""
        gate = OutageGate(consumer_name, hooks=inbox.hooks)
        return cls(session_factory, inbox, consumer_name, max_deliveries, on_settled, gate)

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments, for ``process(delivery, settler, handler=h, **kwargs)``."""
        return {each.name: getattr(self, each.name) for each in fields(Options)}


def process(
    delivery: Delivery,
    settler: Settler,
    *,
    session_factory: Callable[[], Session],
    inbox: Inbox,
    consumer_name: str,
    handler: Callable[[Session, Delivery], object],
    max_deliveries: int = DEFAULT_MAX_DELIVERIES,
    on_settled: OnSettled | None = None,
    outage: OutageGate | None = None,
) -> Settlement:
    """Process one broker delivery exactly once in effect, and settle it.

    :param delivery: the delivery, made by the broker's adapter.
    :param settler: the adapter's ack / retry / dead-letter for this delivery (plain
        methods; use :func:`process_async` for awaitable ones).
    :param session_factory: a ``sessionmaker``.
    :param inbox: the inbox to claim in.
    :param consumer_name: this consumer's name (the claim is per consumer).
    :param handler: ``handler(session, delivery)``, the business change; it must not commit
        and may run more than once if the transaction is retried (deadlocks).
    :param max_deliveries: deliveries allowed, >= 1; see the module's rules.
    :param on_settled: called with the :class:`Settlement` after the settler returned.
    :param outage: the consumer's gate for database outages (its sleep sees the consumer's
        stop); None: a gate of this call, which sleeps and is never stopped.
    :returns: the :class:`Settlement`.
    :raises ConfigurationError: unsettled (see :func:`sa_inbox.handle`).
    :raises DatabaseUnavailable: unsettled, if ``outage`` was stopped during an outage.
    :raises InvalidMessageId: if ``consumer_name`` is invalid (a configuration error).
    :raises InvalidArgument: if ``max_deliveries`` is not an int >= 1.
    :raises InvalidObject: (a ConfigurationError) for objects of the wrong kind or half,
        before anything: see :func:`sa_inbox.brokers.startup.check_consumer`.
    """
    run = _Run.start(
        delivery, session_factory, inbox, consumer_name, handler, max_deliveries, asynchronous=False
    )
    gate, probe = run.gate(outage), probe_sessions(session_factory)

    def call(need: Any) -> object:
        if need is _HANDLE:
            with guarded():
                return handle(*run.handle_args, ack=settler.ack, nack=_nothing)
        if isinstance(need, BaseException):
            return gate.wait(need, probe)
        return (gate.sleep or time.sleep)(need)

    settlement = run.rejected or run.after(drive(_attempts(gate), call, ()))
    _settle_failure(settlement, settler)
    return _settled(settlement, _reporting(run.inbox, consumer_name, on_settled))


async def process_async(
    delivery: Delivery,
    settler: Settler,
    *,
    session_factory: Callable[[], AsyncSession],
    inbox: Inbox | Any,
    consumer_name: str,
    handler: Callable[[AsyncSession, Delivery], Awaitable[Any] | Any],
    max_deliveries: int = DEFAULT_MAX_DELIVERIES,
    on_settled: OnSettled | None = None,
    outage: OutageGate | None = None,
) -> Settlement:
    """:func:`process` on asyncio: the handler gets an AsyncSession and is awaited.

    :param settler: ack / retry / dead-letter, ``async def`` or plain methods (awaited when
        they return an awaitable).
    :param session_factory: an ``async_sessionmaker``.
    :param inbox: the Inbox, or its AsyncInbox face.
    :param handler: ``async def handler(session, delivery)`` (or a plain function).
    :param outage: as for :func:`process`; its sleep is an ``async def``.
    :raises: as :func:`process`.
    """
    from ..asyncio.runner import handle as handle_async

    run = _Run.start(
        delivery, session_factory, inbox, consumer_name, handler, max_deliveries, asynchronous=True
    )
    gate, probe = run.gate(outage), probe_sessions_async(session_factory)

    async def call(need: Any) -> object:
        if need is _HANDLE:
            with guarded():
                return await handle_async(*run.handle_args, ack=settler.ack, nack=_nothing)
        if isinstance(need, BaseException):
            return await gate.wait_async(need, probe)
        return await _awaited((gate.sleep or asyncio.sleep)(need))

    settlement = run.rejected or run.after(await drive_async(_attempts(gate), call, ()))
    await _awaited(_settle_failure(settlement, settler))
    return _settled(settlement, _reporting(run.inbox, consumer_name, on_settled))


# -- the rules, shared by both ----------------------------------------------------------

#: What :func:`_attempts` yields for a run of ``handle()``.
_HANDLE = object()


@dataclass(frozen=True)
class _Run:
    """One delivery's run, before its first ``handle()``: the checked inbox and rule 1's
    settlement (None for a keyed delivery)."""

    delivery: Delivery
    session_factory: Callable[[], Any]
    inbox: Inbox
    consumer_name: str
    max_deliveries: int
    rejected: Settlement | None
    handler: Callable[[Any], Any]

    @classmethod
    def start(
        cls,
        delivery: Delivery,
        session_factory: Callable[[], Any],
        inbox: Inbox,
        consumer_name: str,
        handler: Callable[..., Any],
        max_deliveries: int,
        *,
        asynchronous: bool,
    ) -> _Run:
        """Check the arguments (:func:`check_consumer`) and apply rule 1.

        :raises ConfigurationError: see :func:`process`.
        """
        inbox = check_consumer(
            f"sa_inbox.brokers.{'process_async' if asynchronous else 'process'}()",
            session_factory=session_factory,
            inbox=inbox,
            handler=handler,
            consumer_name=NO_CONSUMER_NAME,  # checked by the claim, once per delivery
            max_deliveries=max_deliveries,
            asynchronous=asynchronous,
        ).inbox
        rejected = _refuse_unkeyed(delivery, inbox, consumer_name, max_deliveries)
        call = _guarded(handler, delivery, max_deliveries)
        return cls(delivery, session_factory, inbox, consumer_name, max_deliveries, rejected, call)

    @property
    def handle_args(self) -> tuple[Any, ...]:
        """``handle()``'s arguments but the ack and nack."""
        message_id = self.delivery.message_id
        return (self.session_factory, self.inbox, message_id, self.consumer_name, self.handler)

    def gate(self, outage: OutageGate | None) -> OutageGate:
        """The consumer's outage gate, or one of this call; knowing its database."""
        gate = outage or OutageGate(self.consumer_name, hooks=self.inbox.hooks)
        if gate.database is None and self.rejected is None:
            gate.database = database_of(self.session_factory)
        return gate

    def after(self, result: Result) -> Settlement:
        """Rule 3: the settlement for ``handle()``'s last result."""
        return _after(result, self.delivery, self.max_deliveries)


def _attempts(gate: OutageGate) -> Generator[object, Any, Result]:
    """Rule 5 as a step (:mod:`.steps`): yields :data:`_HANDLE` for a run of
    ``handle()`` and gets its :class:`Result`; yields the outage's error and gets the
    gate's :class:`Verdict`; yields a pool back-off (float seconds) and gets the sleep's
    reply (True: stopped). Returns the result to settle.

    :raises DatabaseUnavailable: if the consumer was stopped while waiting.
    """
    reachable = contended = 0
    while True:
        result: Result = yield _HANDLE
        if not _outage(result):
            return result
        assert result.error is not None
        if _pool_exhausted(result.error):
            contended += 1
            _stopped(result, (yield gate.backoff.jittered(contended)))
            continue
        reachable = _ride_out((yield result.error), result, reachable)
        if reachable > 1:
            return result


def _refuse_unkeyed(
    delivery: Delivery, inbox: Inbox, consumer_name: str, max_deliveries: int
) -> Settlement | None:
    """Rule 1: a dead-letter settlement for a delivery without a valid key, else None."""
    positive_int(max_deliveries, "max_deliveries", InvalidArgument)
    inbox.validate("x", consumer_name)  # an invalid consumer_name is the caller's error
    if delivery.message_id is None and delivery.key_error is not None:
        return Settlement(
            Disposition.DEAD_LETTERED,
            delivery,
            DeadLetterReason.INVALID_MESSAGE_ID,
            InvalidMessageId(delivery.key_error),
        )
    if delivery.message_id is None:
        return Settlement(Disposition.DEAD_LETTERED, delivery, DeadLetterReason.MISSING_MESSAGE_ID)
    try:
        inbox.validate(delivery.message_id, consumer_name)
    except InvalidMessageId as exc:
        return Settlement(
            Disposition.DEAD_LETTERED, delivery, DeadLetterReason.INVALID_MESSAGE_ID, exc
        )
    return None


def _outage(result: Result) -> bool:
    """Rule 5: whether ``handle()`` failed because the database could not be reached."""
    return result.outcome is Outcome.FAILED and is_unavailable(result.error)


def _pool_exhausted(error: BaseException | None) -> bool:
    """Rule 5: whether ``error`` (or an error it was raised from) is a pool timeout."""
    for _ in range(8):
        if error is None:
            return False
        if isinstance(error, sa.exc.TimeoutError):
            return True
        error = error.__cause__
    return False


def _stopped(result: Result, stopped: object) -> None:
    """Rule 5: raise if the consumer was stopped while a delivery waited for the pool.

    :raises DatabaseUnavailable: the delivery unsettled.
    """
    if stopped is True:
        raise DatabaseUnavailable(
            f"message {result.message_id}: stopped while waiting for a connection of the "
            "pool; left unsettled"
        ) from result.error


def _ride_out(verdict: Verdict, result: Result, reachable: int) -> int:
    """Rule 5, after the gate: the count of runs again with the database answering at once
    (the second such failure is the message's, settled by rule 3).

    :raises DatabaseUnavailable: if the consumer was stopped during the outage.
    """
    if verdict is Verdict.STOPPED:
        raise DatabaseUnavailable(
            f"message {result.message_id}: stopped while the database could not be reached; "
            "left unsettled"
        ) from result.error
    return reachable + 1 if verdict is Verdict.REACHABLE else 0


def _guarded(handler: Callable[..., Any], delivery: Delivery, max_deliveries: int) -> Any:
    """Rule 2: the handler as ``handle()`` calls it, refusing a delivery past the limit.

    ``handle()`` claims before it calls this, so a committed message never gets here (it is
    a duplicate), and the refusal rolls the claim back. It owns the consumer name as
    ``handler`` does (:func:`~sa_inbox.consumers.stands_for`): every consumer of the name
    has its own ``call``.
    """

    def call(session: Any) -> Any:
        if delivery.delivery_count > max_deliveries:
            raise DeliveryLimitExceeded(
                f"delivered {delivery.delivery_count} times, more than max_deliveries="
                f"{max_deliveries}"
            )
        return handler(session, delivery)

    return stands_for(call, handler)


def _after(result: Result, delivery: Delivery, max_deliveries: int) -> Settlement:
    """Rule 3: the settlement for ``handle()``'s result (acked already unless FAILED)."""
    if result.outcome is Outcome.PROCESSED:
        return Settlement(Disposition.PROCESSED, delivery)
    if result.outcome is Outcome.DUPLICATE:
        return Settlement(Disposition.DUPLICATE, delivery)
    if delivery.delivery_count >= max_deliveries:
        return Settlement(
            Disposition.DEAD_LETTERED, delivery, DeadLetterReason.DELIVERY_LIMIT, result.error
        )
    return Settlement(Disposition.RETRY, delivery, error=result.error)


def _settle_failure(settlement: Settlement, settler: Settler) -> Awaitable[None] | None:
    """Retries or dead-letters a failed delivery (what the settler returns, to await)."""
    if settlement.disposition is Disposition.RETRY:
        return settler.retry()
    if settlement.disposition is Disposition.DEAD_LETTERED:
        assert settlement.reason is not None
        return settler.dead_letter(settlement.reason, _detail(settlement))
    return None


def _detail(settlement: Settlement) -> str:
    """One line for the dead letter: the reason, and the error if there is one."""
    delivery = settlement.delivery
    text = f"{settlement.reason.value if settlement.reason else 'dead letter'}"
    if settlement.error is not None:
        text += f": {type(settlement.error).__name__}: {settlement.error}"
    text += f" (delivery {delivery.delivery_count}"
    text += f", {delivery.broker_ref})" if delivery.broker_ref else ")"
    return text.replace("\n", " ")[:1000]


def _reporting(inbox: Inbox, consumer_name: str, on_settled: OnSettled | None) -> OnSettled:
    """``on_settled``, after the inbox's hooks are told of a dead letter
    (:meth:`~sa_inbox.hooks.InboxHooks.dead_lettered`): every adapter's dead letters pass
    here once their settler published them, so each is counted once, with its reason."""

    def settled(settlement: Settlement) -> Any:
        if settlement.disposition is Disposition.DEAD_LETTERED and settlement.reason is not None:
            inbox.hooks.dead_lettered(consumer_name, settlement.reason.value)
        return None if on_settled is None else on_settled(settlement)

    return settled


def _settled(settlement: Settlement, on_settled: OnSettled | None) -> Settlement:
    delivery = settlement.delivery
    logger.log(
        logging.WARNING
        if settlement.disposition in (Disposition.RETRY, Disposition.DEAD_LETTERED)
        else logging.DEBUG,
        "message %s (%s, delivery %d): %s%s",
        delivery.message_id,
        delivery.broker_ref or "-",
        delivery.delivery_count,
        settlement.disposition.value,
        f" ({settlement.reason.value})" if settlement.reason else "",
        extra={
            "action": settlement.disposition.value,
            "message_id": delivery.message_id,
            "delivery_count": delivery.delivery_count,
            **_dead_letter_event(settlement),
        },
    )
    if on_settled is not None:
        on_settled(settlement)
    return settlement


def _dead_letter_event(settlement: Settlement) -> dict[str, str]:
    """The log record's event name and reason for a dead letter (:data:`sa_inbox.hooks.EVENTS`)."""
    if settlement.reason is None:
        return {}
    return {"event": "inbox.delivery.dead_lettered", "reason": settlement.reason.value}


def _nothing() -> None:
    """``handle()``'s nack: the settlement decides between retry and dead letter after."""


async def _awaited(value: object) -> object:
    """``value``, awaited if it is awaitable (a settler's or sleep's plain or async reply)."""
    return await value if inspect.isawaitable(value) else value
