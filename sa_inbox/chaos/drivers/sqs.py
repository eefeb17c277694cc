"""The chaos run's SQS driver, on :class:`~sa_inbox.brokers.sqs.Consumer`.

The run's queue ``name`` has the dead-letter queue ``<name>-dead``, the consumer's own (its
dead letters carry their reason). A killed consumer's messages show again once their
:data:`VISIBILITY_TIMEOUT` passes, counted by SQS, and another consumer receives them. Each
receive takes :data:`BATCH_SIZE` messages: every kill returns all the messages of the
receive in hand, counted, so a small batch keeps healthy messages far from
``max_deliveries`` (as the RabbitMQ driver's prefetch).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from itertools import islice

from ..._optional import optional_dependencies
from . import ChaosDriver, Consumption

with optional_dependencies(__name__, "sqs", "boto3"):
    import boto3

    from ...brokers.sqs import DEFAULT_KEY_ATTRIBUTE, Consumer, client_options

__all__ = ["BACKLOG_EVERY", "BATCH_SIZE", "MAX_BACKLOG", "VISIBILITY_TIMEOUT", "Driver"]

#: Seconds before a killed consumer's messages show again (short, for the run).
VISIBILITY_TIMEOUT = 2
#: Messages per receive (``MaxNumberOfMessages``).
BATCH_SIZE = 4
#: Messages the queue may hold (visible, in flight or delayed) before the producer waits.
#: moto's cost of each message sent or received grows with the queue's length (it counts
#: the queue's messages by visibility for every one: its ``queue.attributes``), so a long
#: backlog slows every receive past the heartbeat and the visibility timeout.
MAX_BACKLOG = 100
#: Messages sent between two looks at the backlog.
BACKLOG_EVERY = 20


class Driver(ChaosDriver):
    """The :class:`~sa_inbox.chaos.drivers.ChaosDriver` for ``sqs://`` URLs.

    :param url: an ``sqs://`` URL (:mod:`sa_inbox.brokers.sqs.url`).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = boto3.client("sqs", **client_options(url))

    def _url(self, name: str) -> str | None:
        try:
            return str(self.client.get_queue_url(QueueName=name)["QueueUrl"])
        except self.client.exceptions.QueueDoesNotExist:
            return None

    def prepare(self, name: str, *, max_deliveries: int) -> None:
        """Delete ``name`` and ``name-dead`` if they exist, then create both (the queue's
        visibility timeout :data:`VISIBILITY_TIMEOUT`). The delivery limit is the
        consumer's (``max_deliveries``, passed to :meth:`consume`), not a redrive policy's."""
        self.delete(name)
        self.client.create_queue(QueueName=dead_letter_queue(name))
        self.client.create_queue(
            QueueName=name, Attributes={"VisibilityTimeout": str(VISIBILITY_TIMEOUT)}
        )

    def publish(self, name: str, messages: Iterable[tuple[str, bytes]]) -> None:
        """``SendMessageBatch`` of ten at a time, the message_id as the ``message_id``
        attribute; while the queue holds :data:`MAX_BACKLOG` messages or more, wait."""
        url = self._url(name)
        assert url is not None, f"no queue {name}: prepare() first"
        pending = iter(messages)
        sent = 0
        while chunk := list(islice(pending, 10)):
            if sent % BACKLOG_EVERY == 0:
                while self._held(url) >= MAX_BACKLOG:
                    time.sleep(0.05)
            entries = [
                {
                    "Id": str(n),
                    "MessageBody": body.decode("utf-8"),
                    "MessageAttributes": {
                        DEFAULT_KEY_ATTRIBUTE: {"DataType": "String", "StringValue": key}
                    },
                }
                for n, (key, body) in enumerate(chunk)
            ]
            reply = self.client.send_message_batch(QueueUrl=url, Entries=entries)
            if reply.get("Failed"):
                raise RuntimeError(f"SQS refused sends: {reply['Failed'][:3]}")
            sent += len(chunk)

    def _held(self, url: str) -> int:
        attributes = self.client.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())

    def run_consumer(self, name: str, consumption: Consumption, stop: threading.Event) -> None:
        """Run a :class:`Consumer` of ``name`` until ``stop`` is set."""
        Consumer(
            self.client,
            name,
            **consumption.adapter_options(
                dead_letter=dead_letter_queue(name), retry_delay=lambda count: 0
            ),
            visibility_timeout=VISIBILITY_TIMEOUT,
            batch_size=BATCH_SIZE,
            wait_time=1,
        ).run(stop)

    def unsettled(self, name: str) -> int:
        """Messages visible, in flight or delayed (deleted and dead-lettered ones are gone)."""
        url = self._url(name)
        return 0 if url is None else self._held(url)

    def dead_letters(self, name: str) -> list[str]:
        """The ``message_id`` attribute of each message of ``name-dead`` (``""`` where
        absent). Each is received hidden for a minute, so that it is read once, and made
        visible again once all are read: a later call reads them again."""
        url = self._url(dead_letter_queue(name))
        keys: list[str] = []
        handles: list[str] = []
        while url is not None:
            reply = self.client.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60,
                MessageAttributeNames=[DEFAULT_KEY_ATTRIBUTE],
            )  # fmt: skip
            messages = reply.get("Messages") or []
            if not messages:
                break
            for message in messages:
                attribute = (message.get("MessageAttributes") or {}).get(DEFAULT_KEY_ATTRIBUTE, {})
                keys.append(str(attribute.get("StringValue", "")))
                handles.append(str(message["ReceiptHandle"]))
        for start in range(0, len(handles), 10):
            entries = [
                {"Id": str(n), "ReceiptHandle": handle, "VisibilityTimeout": 0}
                for n, handle in enumerate(handles[start : start + 10])
            ]
            self.client.change_message_visibility_batch(QueueUrl=url, Entries=entries)
        return keys

    def delete(self, name: str) -> None:
        """Delete ``name`` and ``name-dead`` (what :meth:`prepare` made)."""
        for queue in (name, dead_letter_queue(name)):
            url = self._url(queue)
            if url is not None:
                self.client.delete_queue(QueueUrl=url)

    def close(self) -> None:
        """Close the driver's client."""
        self.client.close()


def dead_letter_queue(name: str) -> str:
    """The run's dead-letter queue of ``name``."""
    return f"{name}-dead"
