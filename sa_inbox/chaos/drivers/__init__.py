"""What the chaos run needs from each broker, and the registry of drivers by URL scheme.

A driver wraps one broker adapter of :mod:`sa_inbox.brokers` (its synchronous consumer where
the client has one) with the few extra operations the run needs: declare a fresh queue /
stream with its dead-letter path, publish, and count what is left unsettled.
"""

from __future__ import annotations

import abc
import importlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from ...brokers import Delivery, DeliveryOptions, Settlement
from ...brokers.schemes import BROKERS
from ...claim import Inbox
from ...exc import UnsupportedBroker

__all__ = ["SCHEMES", "ChaosDriver", "Consumption", "driver_for"]


@dataclass(frozen=True)
class Consumption:
    """What a consumer process consumes with: the broker adapter's arguments that every
    driver passes alike (:meth:`ChaosDriver.consume`'s keywords)."""

    session_factory: Callable[[], Session]
    inbox: Inbox
    consumer_name: str
    handler: Callable[[Session, Delivery], object]
    max_deliveries: int
    on_settled: Callable[[Settlement], Any]

    def adapter_options(self, **delivery: Any) -> dict[str, Any]:
        """The keyword arguments of a broker consumer: the objects, and its
        :class:`~sa_inbox.brokers.DeliveryOptions` from ``max_deliveries``, ``on_settled``
        and ``delivery`` (more of its fields)."""
        options = DeliveryOptions(
            max_deliveries=self.max_deliveries, on_settled=self.on_settled, **delivery
        )
        return {
            "session_factory": self.session_factory,
            "inbox": self.inbox,
            "consumer_name": self.consumer_name,
            "handler": self.handler,
            "options": options,
        }


class ChaosDriver(abc.ABC):
    """One broker, as the chaos run drives it. ``name`` is the run's queue / stream name."""

    @abc.abstractmethod
    def prepare(self, name: str, *, max_deliveries: int) -> None:
        """Make a fresh, empty queue / stream ``name`` and its dead-letter queue / stream
        (deleting any left from an earlier run), as the adapter's docs tell users to."""

    @abc.abstractmethod
    def publish(self, name: str, messages: Iterable[tuple[str, bytes]]) -> None:
        """Publish each ``(message_id, body)``, the message_id as the producer's dedup key
        (the AMQP property, the stream field / header the adapter reads by default)."""

    def consume(
        self,
        name: str,
        *,
        session_factory: Callable[[], Session],
        inbox: Inbox,
        consumer_name: str,
        handler: Callable[[Session, Delivery], object],
        max_deliveries: int,
        on_settled: Callable[[Settlement], Any],
        stop: threading.Event,
    ) -> None:
        """Consume ``name`` through the adapter until ``stop`` is set (runs in a consumer
        process that the run may SIGKILL at any point): :meth:`run_consumer` with these.
        Deliveries a killed consumer left unsettled must come back to the others
        (connection close, XAUTOCLAIM, ack wait): the adapter's visibility timeout should be
        short (a few seconds) here."""
        consumption = Consumption(
            session_factory, inbox, consumer_name, handler, max_deliveries, on_settled
        )
        self.run_consumer(name, consumption, stop)

    @abc.abstractmethod
    def run_consumer(self, name: str, consumption: Consumption, stop: threading.Event) -> None:
        """Run the broker's consumer of ``name`` with ``consumption`` until ``stop`` is set."""

    @abc.abstractmethod
    def unsettled(self, name: str) -> int:
        """Messages of ``name`` neither acked nor dead-lettered yet (ready + in flight)."""

    @abc.abstractmethod
    def dead_letters(self, name: str) -> list[str]:
        """The message_ids in ``name``'s dead-letter queue / stream."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the driver's own connections."""


#: URL scheme → module (under this package) whose ``Driver(url)`` is the driver.
SCHEMES = BROKERS


def driver_for(url: str) -> ChaosDriver:
    """The driver for a broker URL (``amqp://``, ``redis://``, ``nats://``, ``sqs://``).

    :raises UnsupportedBroker: for another scheme.
    :raises ImportError: if the broker's client library (its extra) is not installed.
    """
    scheme = url.split("://", 1)[0].lower()
    if scheme not in SCHEMES:
        raise UnsupportedBroker(
            f"no chaos driver for {scheme!r} URLs; expected one of {sorted(SCHEMES)}"
        )
    module = importlib.import_module(f"{__name__}.{SCHEMES[scheme]}")
    driver: ChaosDriver = module.Driver(url)
    return driver
