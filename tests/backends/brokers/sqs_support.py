"""What the SQS tests and their consumer child share: the queues of one test on the live
moto server, sends, and reading what a queue holds."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

from sa_inbox.brokers import Settlement
from sa_inbox.brokers.sqs import DEAD_LETTER_ATTRIBUTE, client_options

#: A client that gives up quickly on a server that is gone (the reconnect tests).
CLIENT_CONFIG = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=2)


def sqs_client(url: str) -> Any:
    """A boto3 SQS client for an ``sqs://`` URL."""
    return boto3.client("sqs", config=CLIENT_CONFIG, **client_options(url))


@dataclass(frozen=True)
class Queues:
    """One test's queue and its dead-letter queue (URLs), FIFO or standard."""

    client: Any
    url: str
    dead_url: str
    name: str
    dead_name: str

    @classmethod
    def make(
        cls,
        client: Any,
        *,
        fifo: bool = False,
        visibility_timeout: int = 2,
        redrive: int | None = None,
        attributes: dict[str, str] | None = None,
    ) -> Queues:
        """A fresh queue and dead-letter queue; with ``redrive``, the queue's redrive policy
        sends to the dead-letter queue after that many receives."""
        token = uuid.uuid4().hex[:12]
        suffix = ".fifo" if fifo else ""
        name, dead_name = f"sa-inbox-{token}{suffix}", f"sa-inbox-{token}-dead{suffix}"
        kind = {"FifoQueue": "true"} if fifo else {}
        dead_url = client.create_queue(QueueName=dead_name, Attributes=kind)["QueueUrl"]
        queue_attributes = {**kind, "VisibilityTimeout": str(visibility_timeout)}
        if redrive is not None:
            arn = client.get_queue_attributes(QueueUrl=dead_url, AttributeNames=["QueueArn"])
            policy = {
                "deadLetterTargetArn": arn["Attributes"]["QueueArn"],
                "maxReceiveCount": redrive,
            }
            queue_attributes["RedrivePolicy"] = json.dumps(policy)
        queue_attributes.update(attributes or {})
        url = client.create_queue(QueueName=name, Attributes=queue_attributes)["QueueUrl"]
        return cls(client, url, dead_url, name, dead_name)

    def delete(self) -> None:
        for url in (self.url, self.dead_url):
            with contextlib.suppress(Exception):  # gone with a restarted server
                self.client.delete_queue(QueueUrl=url)

    def send(
        self,
        payments: list[tuple[str | None, str]],
        *,
        group: Callable[[str | None], str] | None = None,
        deduplication: Callable[[str | None], str] | None = None,
    ) -> None:
        """Send each ``(message_id, amount)`` (None: no key attribute) in order."""
        for n, (message_id, amount) in enumerate(payments):
            send: dict[str, Any] = {"QueueUrl": self.url, "MessageBody": amount}
            if message_id is not None:
                send["MessageAttributes"] = {
                    "message_id": {"DataType": "String", "StringValue": message_id}
                }
            if self.url.endswith(".fifo"):
                send["MessageGroupId"] = group(message_id) if group else "g"
                send["MessageDeduplicationId"] = (
                    deduplication(message_id) if deduplication else f"{n}-{uuid.uuid4().hex}"
                )
            self.client.send_message(**send)

    def counts(self, url: str | None = None) -> tuple[int, int]:
        """``(visible, in flight)`` messages of the queue (moto counts them exactly)."""
        reply = self.client.get_queue_attributes(
            QueueUrl=url or self.url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return (
            int(reply["ApproximateNumberOfMessages"]),
            int(reply["ApproximateNumberOfMessagesNotVisible"]),
        )

    def dead_letters(self) -> list[dict[str, Any]]:
        """The dead-letter queue's messages (received, hidden 30 s, not deleted): each one's
        key attribute, body, receive count and sa-inbox record (if any)."""
        letters: list[dict[str, Any]] = []
        while True:
            reply = self.client.receive_message(
                QueueUrl=self.dead_url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=30,
                MessageAttributeNames=["All"],
            )
            messages = reply.get("Messages") or []
            if not messages:
                return letters
            for message in messages:
                attributes = message.get("MessageAttributes") or {}
                record = attributes.get(DEAD_LETTER_ATTRIBUTE, {}).get("StringValue")
                key = attributes.get("message_id", {}).get("StringValue")
                letters.append(
                    {"key": key, "body": message["Body"], "record": json.loads(record or "null")}
                )


def drain(
    poll: Callable[[], list[Settlement]], count: int, seconds: float = 30
) -> list[Settlement]:
    """Poll until ``count`` settlements (of any kind) came, within ``seconds``."""
    settled: list[Settlement] = []
    deadline = time.monotonic() + seconds
    while len(settled) < count:
        assert time.monotonic() < deadline, f"only {len(settled)} of {count} settled: {settled}"
        settled += poll()
    return settled


def queues(client: Any, **kw: Any) -> Iterator[Queues]:
    """A fixture body: :meth:`Queues.make`, deleted after."""
    made = Queues.make(client, **kw)
    yield made
    made.delete()
