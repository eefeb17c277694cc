"""The chaos run's RabbitMQ driver, on :class:`~sa_inbox.brokers.rabbitmq.Consumer`.

The queue is a quorum queue with its dead-letter queue (:func:`~sa_inbox.brokers.rabbitmq.
declare_queue`). Redelivery after a kill is immediate: a SIGKILLed consumer's socket is
closed by the kernel, RabbitMQ closes its channel and requeues its unacked deliveries at once
(RabbitMQ docs, "Consumer Acknowledgements and Publisher Confirms", section "Automatic
Requeueing"), counting them in ``x-delivery-count``; no visibility timeout to wait out.
Each consumer prefetches :data:`PREFETCH` deliveries: every kill returns them all, counted
(see :class:`~sa_inbox.brokers.rabbitmq.Consumer`), so a small prefetch keeps
healthy messages far from ``max_deliveries``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from ..._optional import optional_dependencies
from . import ChaosDriver, Consumption

with optional_dependencies(__name__, "rabbitmq", "pika", "aio_pika"):
    import pika
    import pika.exceptions

    from ...brokers.rabbitmq import Consumer, dead_letter_queue_name, declare_queue

__all__ = ["CONSUMERS_GONE_TIMEOUT", "PREFETCH", "Driver"]

#: Deliveries each consumer holds unacked at once (``basic.qos``).
PREFETCH = 4

#: How long :meth:`Driver.unsettled` waits for the queue's consumers to be gone (seconds).
CONSUMERS_GONE_TIMEOUT = 10.0


class Driver(ChaosDriver):
    """The :class:`~sa_inbox.chaos.drivers.ChaosDriver` for ``amqp://`` / ``amqps://`` URLs.

    :param url: the broker's URL, with its vhost (``amqp://user:pass@host:port/vhost``).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self._connection: Any = None
        self._channel: Any = None

    @property
    def channel(self) -> Any:
        """The driver's own channel (publisher confirms), opened on first use, and opened
        again if the broker dropped the connection meanwhile.

        A ``BlockingConnection`` sends heartbeats only while the program calls into it; the
        driver's connection idles for minutes while the consumers work, so RabbitMQ closes
        it after two missed heartbeats (RabbitMQ docs, "Detecting Dead TCP Connections with
        Heartbeats"; 60 s by default) and pika learns it only at the next use
        (``StreamLostError``, seen in a 90,000-payment run). The liveness check here is
        ``process_data_events(0)``: it does the pending I/O without waiting.
        """
        if self._channel is not None and self._channel.is_open:
            try:
                self._connection.process_data_events(time_limit=0)
            except pika.exceptions.AMQPError:
                self._connection = self._channel = None
        if self._channel is None or not self._channel.is_open:
            self._connection = pika.BlockingConnection(pika.URLParameters(self.url))
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
        return self._channel

    def prepare(self, name: str, *, max_deliveries: int) -> None:
        """Delete ``name`` and its dead-letter queue, declare them afresh (quorum queues).
        ``max_deliveries`` is the consumers' to enforce; the queue sets no broker limit."""
        self.channel.queue_delete(name)
        self.channel.queue_delete(dead_letter_queue_name(name))
        declare_queue(self.channel, name)

    def publish(self, name: str, messages: Iterable[tuple[str, bytes]]) -> None:
        """Publish each message persistent, ``message_id`` set, each confirmed by the broker.

        :raises pika.exceptions.UnroutableError: if the queue does not exist.
        """
        channel = self.channel
        for message_id, body in messages:
            properties = pika.BasicProperties(message_id=message_id, delivery_mode=2)
            channel.basic_publish("", name, body, properties, mandatory=True)

    def run_consumer(self, name: str, consumption: Consumption, stop: threading.Event) -> None:
        """Run a :class:`~sa_inbox.brokers.rabbitmq.Consumer` on ``name`` until ``stop`` is
        set (a watcher thread calls its thread-safe
        :meth:`~sa_inbox.brokers.rabbitmq.Consumer.stop`)."""
        options = consumption.adapter_options()
        consumer = Consumer(self.url, name, **options, prefetch=PREFETCH)
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                if stop.wait(0.1):
                    consumer.stop()
                    return

        watcher = threading.Thread(target=watch, name="sa-inbox-chaos-stop", daemon=True)
        watcher.start()
        try:
            consumer.run()
        finally:
            done.set()
            watcher.join()

    def unsettled(self, name: str) -> int:
        """Messages of ``name`` not yet acked nor dead-lettered.

        AMQP tells only the *ready* count (``queue.declare`` passive ``message_count``), not
        the unacked ones in consumers' hands; those return to ready when their consumers'
        channels close. So this waits (up to ``CONSUMERS_GONE_TIMEOUT`` s) until the queue
        has no consumer, and then the ready count is every unsettled message.

        :raises TimeoutError: if consumers are still attached after the wait.
        """
        deadline = time.monotonic() + CONSUMERS_GONE_TIMEOUT
        while True:
            state = self.channel.queue_declare(name, passive=True).method
            if state.consumer_count == 0:
                return int(state.message_count)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{state.consumer_count} consumers still on {name!r}")
            time.sleep(0.05)

    def dead_letters(self, name: str) -> list[str]:
        """The message_ids in ``name``'s dead-letter queue, read without taking them: got
        unacked on a channel of their own, which is then closed (RabbitMQ requeues them)."""
        _ = self.channel  # connected
        channel = self._connection.channel()
        try:
            ids: list[str] = []
            while True:
                method, properties, _ = channel.basic_get(dead_letter_queue_name(name))
                if method is None:
                    return ids
                ids.append(properties.message_id or "")  # "": dead-lettered for having none
        finally:
            channel.close()

    def close(self) -> None:
        """Close the driver's connection."""
        if self._connection is not None and self._connection.is_open:
            self._connection.close()
        self._connection = self._channel = None
