"""What the exactly-once checks deliver to: the three shapes of a user's consumer.

* :class:`HandlerTarget`: an sa-inbox handler, ``handler(session, delivery)`` (``def`` or
  ``async def``), run by :func:`sa_inbox.brokers.process` / ``process_async``, the rules
  every broker adapter runs it by, with the user's inbox and consumer name. Its key is the
  producer's ``message_id``, or what the user's ``key(delivery)`` returns.
* the same for a **broker adapter** configured as in production (a RabbitMQ or a Redis
  Streams ``Consumer``...): its settings and its own key reading, through the profiles
  of :mod:`.adapters`.
* :class:`ConsumerTarget`: a consumer of the user's own, ``consume(delivery, ack)``
  (``def`` or ``async def``), which claims, commits and acks by itself: given a
  :class:`~sa_inbox.testing.BrokerDelivery` and the ``ack`` to call once the delivery is
  settled (awaited by an ``async def`` consumer); raising from it hands the delivery back
  (a nack).

Each reports a :class:`Settled`. A :class:`~sa_inbox.exc.ConfigurationError` from sa-inbox
(a missing table, a session factory of the other half) is raised to the caller as it is.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..brokers.delivery import DeadLetterReason, Delivery
from ..brokers.process import DEFAULT_MAX_DELIVERIES, process, process_async
from ..checks import unwrap
from ..claim import Inbox
from ..exc import ConfigurationError
from .messages import BrokerDelivery
from .observe import CURRENT

__all__ = ["ConsumerTarget", "HandlerTarget", "Settled", "Target"]

#: ``key(delivery)``: the dedup key a consumer derives from a broker delivery.
KeyFunction = Callable[[BrokerDelivery], "str | None"]


@dataclass(frozen=True)
class Settled:
    """How one delivery ended.

    :param outcome: ``"processed"``, ``"duplicate"``, ``"retry"`` or ``"dead_lettered"``
        (sa-inbox handlers and adapters), ``"returned"`` or ``"raised"`` (own consumers).
    :param error: the handler's (consumer's) exception, if any.
    :param reason: why it was dead-lettered, if it was.
    """

    outcome: str
    error: BaseException | None = None
    reason: str | None = None


class Target:
    """One consumer under test (see the module's docstring)."""

    #: Shown in the report.
    name: str = ""
    #: Whether its deliveries run as asyncio tasks (else threads).
    asynchronous: bool = False
    #: Whether the checks count its handler's calls.
    counts_handler: bool = False
    #: The consumer name its claims are made under, if known.
    consumer_name: str | None = None
    #: sa-inbox's bookkeeping tables (see :attr:`~sa_inbox.testing.observe.Watch.ignore`).
    bookkeeping: frozenset[Any] = frozenset()

    def key(self, delivery: BrokerDelivery) -> str | None:
        """The dedup key it derives from ``delivery``.

        :raises NotImplementedError: for a consumer that reads its key itself.
        """
        raise NotImplementedError

    @property
    def knows_key(self) -> bool:
        """Whether :meth:`key` says what the consumer keys on."""
        return False

    def deliver(self, delivery: BrokerDelivery, ack: Callable[[], None]) -> Settled:
        """Deliver once, in this thread."""
        raise NotImplementedError

    async def deliver_async(
        self, delivery: BrokerDelivery, ack: Callable[[], Awaitable[None]]
    ) -> Settled:
        """Deliver once, in this task."""
        raise NotImplementedError


class _Settler:
    """The broker's side of :func:`~sa_inbox.brokers.process`: ack, retry, dead letter."""

    def __init__(self, ack: Callable[[], Any]) -> None:
        self.ack = ack
        self.dead_letter_reason: str | None = None

    def retry(self) -> None:
        return None

    def dead_letter(self, reason: DeadLetterReason, detail: str) -> None:
        self.dead_letter_reason = f"{reason.value}: {detail}"


def _counting(handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler``, counting its calls on the current delivery's watch (known to
    :mod:`sa_inbox.consumers` by the handler's own name)."""
    if inspect.iscoroutinefunction(handler):

        @functools.wraps(handler)
        async def counted_async(session: Any, delivery: Delivery) -> Any:
            _count()
            return await handler(session, delivery)

        return counted_async

    @functools.wraps(handler)
    def counted(session: Any, delivery: Delivery) -> Any:
        _count()
        return handler(session, delivery)

    return counted


def _count() -> None:
    watch = CURRENT.get()
    if watch is not None:
        watch.handler_calls += 1


class HandlerTarget(Target):
    """An sa-inbox handler (or an adapter's settings), run as the adapters run it.

    :param handler: ``handler(session, delivery)``.
    :param session_factory: a ``sessionmaker`` or ``async_sessionmaker``.
    :param inbox: the Inbox (or AsyncInbox) it claims in.
    :param consumer_name: its consumer name.
    :param asynchronous: True to run it with ``process_async`` on AsyncSessions.
    :param to_delivery: makes the :class:`~sa_inbox.brokers.Delivery` of a broker delivery
        (an adapter's own key reading); default: keyed on ``key`` or the producer's id.
    :param key: the user's key function (see :meth:`Target.key`).
    :param max_deliveries: as the adapter's.
    :param name: for the report.
    """

    counts_handler = True

    def __init__(
        self,
        handler: Callable[..., Any],
        *,
        session_factory: Callable[[], Any],
        inbox: Inbox | Any,
        consumer_name: str,
        asynchronous: bool,
        to_delivery: Callable[[BrokerDelivery], Delivery] | None = None,
        key: KeyFunction | None = None,
        max_deliveries: int = DEFAULT_MAX_DELIVERIES,
        name: str = "",
    ) -> None:
        self.handler = _counting(handler)
        self.session_factory = session_factory
        self.inbox = inbox
        self.consumer_name = consumer_name
        self.asynchronous = asynchronous
        self.max_deliveries = max_deliveries
        self.name = name
        consumers = getattr(
            unwrap(inbox, Inbox, "inbox", entry="check_exactly_once()"), "consumers", None
        )
        self.bookkeeping = frozenset([consumers.table] if consumers is not None else [])
        key_of = key or _producer_id
        self._to_delivery = to_delivery or (lambda d: d.to_delivery(key_of(d)))

    @property
    def knows_key(self) -> bool:
        return True

    def key(self, delivery: BrokerDelivery) -> str | None:
        return self._to_delivery(delivery).message_id

    def _options(self) -> dict[str, Any]:
        return {
            "session_factory": self.session_factory,
            "inbox": self.inbox,
            "consumer_name": self.consumer_name,
            "handler": self.handler,
            "max_deliveries": self.max_deliveries,
        }

    def deliver(self, delivery: BrokerDelivery, ack: Callable[[], None]) -> Settled:
        settler = _Settler(ack)
        settlement = process(self._to_delivery(delivery), settler, **self._options())
        return _settled(settlement.disposition.value, settlement.error, settler)

    async def deliver_async(
        self, delivery: BrokerDelivery, ack: Callable[[], Awaitable[None]]
    ) -> Settled:
        settler = _Settler(ack)
        settlement = await process_async(self._to_delivery(delivery), settler, **self._options())
        return _settled(settlement.disposition.value, settlement.error, settler)


def _producer_id(delivery: BrokerDelivery) -> str | None:
    return delivery.message_id


def _settled(outcome: str, error: BaseException | None, settler: _Settler) -> Settled:
    return Settled(outcome, error, settler.dead_letter_reason)


class ConsumerTarget(Target):
    """A consumer of the user's own: ``consume(delivery, ack)`` (see the module's docstring).

    :param consume: the consumer.
    :param name: for the report.
    """

    def __init__(self, consume: Callable[..., Any], *, name: str = "") -> None:
        self.consume = consume
        self.asynchronous = inspect.iscoroutinefunction(consume)
        self.name = name

    def deliver(self, delivery: BrokerDelivery, ack: Callable[[], None]) -> Settled:
        try:
            self.consume(delivery, ack)
        except ConfigurationError:
            raise
        except Exception as exc:
            return Settled("raised", exc)
        return Settled("returned")

    async def deliver_async(
        self, delivery: BrokerDelivery, ack: Callable[[], Awaitable[None]]
    ) -> Settled:
        try:
            await self.consume(delivery, ack)
        except ConfigurationError:
            raise
        except Exception as exc:
            return Settled("raised", exc)
        return Settled("returned")
