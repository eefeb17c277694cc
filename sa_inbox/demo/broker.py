"""A simulated message broker: one shared queue, acks, nacks and redeliveries.

The broker lives in the demo's main process. Deliveries go to the worker processes
through one shared :func:`multiprocessing.Queue` (each worker takes the next copy when it
is free, so two adjacent copies of a message are usually taken by two workers at once);
workers talk back through a second queue of events. A copy stays *unacked* until its
:class:`Ack`: a :class:`Nack` (the handler failed) or a :class:`ConnectionLost` (the
worker crashed while holding it) puts it back at the end of the queue, marked
``redelivered``, as AMQP brokers do. A copy nacked :data:`MAX_DELIVERIES` times is
dead-lettered (dropped and counted), so a message that always fails cannot loop forever.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import queue
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from multiprocessing.queues import Queue

from .stream import Delivery

__all__ = [
    "Ack",
    "Broker",
    "Channel",
    "ConnectionLost",
    "Event",
    "Nack",
    "Report",
    "WorkerExit",
    "WorkerReady",
]

#: Deliveries of one copy before the broker gives up on it and dead-letters it.
MAX_DELIVERIES = 10
#: Seconds a worker waits for a delivery before checking that the main process lives.
PARENT_CHECK_INTERVAL = 1.0


@dataclass(frozen=True)
class Ack:
    """The worker acknowledged delivery ``tag``: the broker forgets it."""

    tag: int


@dataclass(frozen=True)
class Nack:
    """The worker rejected delivery ``tag`` for redelivery."""

    tag: int


@dataclass(frozen=True)
class ConnectionLost:
    """The worker's connection died while it held delivery ``tag`` unacked."""

    tag: int


@dataclass(frozen=True)
class Report:
    """What a worker did with one delivery (for the statistics, not for the broker).

    :param tag: the delivery tag.
    :param message_id: the payment's id.
    :param outcome: ``"processed"``, ``"duplicate"`` or ``"failed"``.
    :param crashed: the worker crashed after the commit, before the ack.
    :param pid: the worker's process id.
    :param started_ns: :func:`time.monotonic_ns` when the worker took the delivery.
    :param ended_ns: :func:`time.monotonic_ns` when it acked, nacked or crashed. The
        monotonic clock is system-wide, so intervals of different processes compare.
    """

    tag: int
    message_id: str
    outcome: str
    crashed: bool
    pid: int
    started_ns: int
    ended_ns: int


@dataclass(frozen=True)
class WorkerReady:
    """Worker ``worker`` is connected to the database and waits for deliveries."""

    worker: int


@dataclass(frozen=True)
class WorkerExit:
    """A worker stopped.

    :param worker: the worker's index.
    :param transient_retries: transactions it rolled back and retried (busy, deadlock).
    :param error: the traceback if it stopped on an unexpected error, else None.
    """

    worker: int
    transient_retries: int
    error: str | None = None


#: Everything a worker sends to the main process.
Event = Ack | Nack | ConnectionLost | Report | WorkerReady | WorkerExit


@dataclass(frozen=True)
class Channel:
    """A worker's end of the broker: picklable, handed to each worker process."""

    deliveries: Queue[Delivery | None]
    events: Queue[Event]

    def get(self) -> Delivery | None:
        """The next delivery, waiting for one; None means "no more, stop".

        :raises SystemExit: if the main process died (killed without a chance to stop
            the workers): the worker exits instead of waiting forever.
        """
        while True:
            try:
                return self.deliveries.get(timeout=PARENT_CHECK_INTERVAL)
            except queue.Empty:
                parent = multiprocessing.parent_process()
                if parent is not None and not parent.is_alive():
                    self.events.cancel_join_thread()  # nobody reads the events any more
                    raise SystemExit(1) from None

    def send(self, event: Event) -> None:
        """Send ``event`` to the main process."""
        self.events.put(event)


class Broker:
    """The broker's state, in the main process.

    :param context: the multiprocessing context the queues belong to (spawn).
    """

    def __init__(self, context: BaseContext) -> None:
        self.channel = Channel(context.Queue(), context.Queue())
        self._unacked: dict[int, Delivery] = {}
        #: Copies put back in the queue, after a nack or a lost connection.
        self.redeliveries = 0
        self.nacks = 0
        #: Copies dropped after :data:`MAX_DELIVERIES` failed deliveries.
        self.dead_letters = 0

    @property
    def unacked(self) -> int:
        """Copies published or redelivered and not acked yet."""
        return len(self._unacked)

    def publish(self, deliveries: Iterable[Delivery]) -> None:
        """Put ``deliveries`` in the queue, in order."""
        for delivery in deliveries:
            self._unacked[delivery.tag] = delivery
            self.channel.deliveries.put(delivery)

    def settle(self, event: Ack | Nack | ConnectionLost) -> Delivery | None:
        """Apply a worker's ack, nack or lost connection; return the redelivery if any
        (None after an ack, or when the copy is dead-lettered)."""
        delivery = self._unacked.pop(event.tag)
        if isinstance(event, Ack):
            return None
        if isinstance(event, Nack):
            self.nacks += 1
            if delivery.attempt >= MAX_DELIVERIES:
                self.dead_letters += 1
                return None
        redelivery = dataclasses.replace(
            delivery,
            redelivered=True,
            attempt=delivery.attempt + 1,
            # A crash happens once per copy; a nacked copy has not crashed yet.
            crash_before_ack=delivery.crash_before_ack and isinstance(event, Nack),
        )
        self.redeliveries += 1
        self.publish([redelivery])
        return redelivery

    def close(self, workers: int) -> None:
        """Tell each of ``workers`` workers to stop once the queue is drained."""
        for _ in range(workers):
            self.channel.deliveries.put(None)

    def shutdown(self, *, wait: bool) -> None:
        """Close the queues; ``wait=False`` drops what is still buffered (after an error)."""
        for channel_queue in (self.channel.deliveries, self.channel.events):
            if not wait:
                channel_queue.cancel_join_thread()
            channel_queue.close()
