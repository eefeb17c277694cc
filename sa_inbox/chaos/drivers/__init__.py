"""What the chaos run needs from each broker, and the registry of drivers by URL scheme.

A driver wraps one broker adapter of :mod:`sa_inbox.brokers` (its synchronous consumer where
the client has one) with the few extra operations the run needs: declare a fresh queue /
stream with its dead-letter path, publish, and count what is left unsettled.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from sqlalchemy.orm import Session

from ...brokers import Delivery, Settlement
from ...claim import Inbox
from ...exc import UnsupportedBroker

__all__ = ["SCHEMES", "ChaosDriver", "driver_for"]


class ChaosDriver(Protocol):
    """One broker, as the chaos run drives it. ``name`` is the run's queue / stream name."""

    def prepare(self, name: str, *, max_deliveries: int) -> None:
        """Make a fresh, empty queue / stream ``name`` and its dead-letter queue / stream
        (deleting any left from an earlier run), as the adapter's docs tell users to."""

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
        process that the run may SIGKILL at any point). Deliveries a killed consumer left
        unsettled must come back to the others (connection close, XAUTOCLAIM, ack wait):
        the adapter's visibility timeout should be short (a few seconds) here."""

    def unsettled(self, name: str) -> int:
        """Messages of ``name`` neither acked nor dead-lettered yet (ready + in flight)."""

    def dead_letters(self, name: str) -> list[str]:
        """The message_ids in ``name``'s dead-letter queue / stream."""

    def close(self) -> None:
        """Close the driver's own connections."""


#: URL scheme → module (under this package) whose ``Driver(url)`` is the driver.
SCHEMES = {
    "amqp": "rabbitmq",
    "amqps": "rabbitmq",
    "redis": "redis",
    "nats": "nats",
    "sqs": "sqs",
    "sqss": "sqs",
}


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


_ = threading  # re-exported name used in the protocol's signature
