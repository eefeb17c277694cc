"""The outbox relay's SQS publishers: ``SendMessage`` with the outbox's message_id.

SQS rules relied on (Amazon SQS API Reference, ``SendMessage``): the reply (its
``MessageId``) comes once SQS stored the message; a message carries at most 10 message
attributes; its body is Unicode text. On a FIFO queue (a name ending in ``.fifo``)
``MessageGroupId`` is required and orders the messages of a group, and a
``MessageDeduplicationId`` (at most 128 characters of ``a-z A-Z 0-9`` and punctuation)
makes SQS drop a send of the same id within 5 minutes ("Exactly-once processing in Amazon
SQS").
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping
from typing import Any

from ...exc import InvalidArgument, InvalidOutboxMessage
from ...outbox.message import OutboxMessage
from .core import Call, drive, is_connection_error
from .message import DEFAULT_KEY_ATTRIBUTE, MAX_ATTRIBUTES

__all__ = ["DEFAULT_GROUP_HEADER", "AsyncPublisher", "Publisher", "deduplication_id"]

#: The outbox header whose value is a FIFO message's ``MessageGroupId``, by default.
DEFAULT_GROUP_HEADER = "message_group_id"
#: Characters SQS takes in a ``MessageDeduplicationId`` ("alphanumeric characters and
#: punctuation"), and its length limit.
_DEDUPLICATION_CHARACTERS = frozenset(string.ascii_letters + string.digits + string.punctuation)
_DEDUPLICATION_LENGTH = 128


def deduplication_id(message_id: str) -> str:
    """A FIFO ``MessageDeduplicationId`` for an outbox ``message_id``: itself when SQS takes
    it, else its SHA-256 in hex (the same for every publish of the row)."""
    if len(message_id) <= _DEDUPLICATION_LENGTH and set(message_id) <= _DEDUPLICATION_CHARACTERS:
        return message_id
    return hashlib.sha256(message_id.encode("utf-8")).hexdigest()


class _SendMessage:
    """What both publishers build: the ``SendMessage`` arguments of an outbox row."""

    def __init__(self, client: Any, *, key_attribute: str, group_header: str) -> None:
        self.client = client
        self.key_attribute = key_attribute
        self.group_header = group_header
        self._urls: dict[str, str] = {}

    def url_call(self, destination: str) -> Call | None:
        """``GetQueueUrl`` for a queue name not resolved yet; None for a URL or a known name."""
        if destination.startswith(("http://", "https://")) or destination in self._urls:
            return None
        return Call("get_queue_url", {"QueueName": destination})

    def remember(self, destination: str, reply: Mapping[str, Any]) -> None:
        self._urls[destination] = str(reply["QueueUrl"])

    def send_call(self, message: OutboxMessage) -> Call:
        """``SendMessage`` of ``message``: the body as text, the headers and the key as
        ``String`` message attributes; on a FIFO queue the group (the header
        ``group_header``, else the queue's name: one group, the queue's order) and the
        deduplication id (:func:`deduplication_id`).

        :raises InvalidOutboxMessage: for a body that is not UTF-8 text, or more than 10 attributes
            (the relay counts an attempt: the row's fault).
        """
        destination = message.destination
        url = self._urls.get(destination, destination)
        try:
            body = message.payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidOutboxMessage(
                f"an SQS message body is text: the payload is not UTF-8 ({exc})"
            ) from None
        headers = dict(message.headers)
        group = headers.pop(self.group_header, None)
        attributes = {
            name: {"DataType": "String", "StringValue": value} for name, value in headers.items()
        }
        attributes[self.key_attribute] = {"DataType": "String", "StringValue": message.message_id}
        if len(attributes) > MAX_ATTRIBUTES:
            raise InvalidOutboxMessage(
                f"an SQS message carries at most {MAX_ATTRIBUTES} message attributes: "
                f"{len(attributes)} (the headers and {self.key_attribute})"
            )
        send: dict[str, Any] = {
            "QueueUrl": url,
            "MessageBody": body,
            "MessageAttributes": attributes,
        }
        if url.rstrip("/").endswith(".fifo"):
            send["MessageGroupId"] = group or url.rstrip("/").rpartition("/")[2]
            send["MessageDeduplicationId"] = deduplication_id(message.message_id)
        return Call("send_message", send)

    def is_unavailable(self, error: BaseException) -> bool:
        """Whether ``error`` says SQS could not be reached or could not take the message
        now (a connection refused, reset or timed out; a 5xx or throttling reply): the relay
        counts no attempt. A refusal (``QueueDoesNotExist``, an invalid attribute, a body
        too large) is the message's. See :func:`sa_inbox.outbox.publisher.broker_unavailable`."""
        return is_connection_error(error) or isinstance(error, OSError)


class Publisher(_SendMessage):
    """Publishes outbox messages to SQS queues (an outbox
    :class:`~sa_inbox.outbox.publisher.Publisher`) on a boto3 client.

    Each message is one ``SendMessage`` to ``message.destination`` (a queue name, resolved
    once with ``GetQueueUrl``, or a queue URL); the outbox's ``message_id`` goes in the
    message attribute ``key_attribute``, the one :class:`~sa_inbox.brokers.sqs.Consumer`
    reads the producer's key from, on standard and FIFO queues alike. On a FIFO queue the
    row's header ``group_header`` is the ``MessageGroupId`` (without it, the queue's name:
    the whole queue one group) and the ``message_id`` the ``MessageDeduplicationId``, so
    SQS itself drops a row the relay publishes again within 5 minutes (a relay killed
    between the send and its mark); the inbox drops it after that.

    :param client: a boto3 SQS client.
    :param key_attribute: the message attribute of the producer's key (default
        ``message_id``).
    :param group_header: the outbox header holding a FIFO message's group (default
        ``message_group_id``; not sent as an attribute).
    """

    def __init__(
        self,
        client: Any,
        *,
        key_attribute: str = DEFAULT_KEY_ATTRIBUTE,
        group_header: str = DEFAULT_GROUP_HEADER,
    ) -> None:
        super().__init__(client, key_attribute=key_attribute, group_header=group_header)

    def publish(self, message: OutboxMessage) -> None:
        """``SendMessage``; its reply (SQS's ``MessageId``) is the confirm.

        :raises botocore.exceptions.ClientError: SQS refused it (or could not take it now:
            see :meth:`is_unavailable`).
        :raises botocore.exceptions.BotoCoreError: SQS could not be reached.
        """
        lookup = self.url_call(message.destination)
        if lookup is not None:
            self.remember(message.destination, drive(_one(lookup), self.client))
        drive(_one(self.send_call(message)), self.client)

    def close(self) -> None:
        """Close the client's connections."""
        close = getattr(self.client, "close", None)
        if close is not None:
            close()


class AsyncPublisher(_SendMessage):
    """:class:`Publisher` on an aiobotocore client, for
    :class:`~sa_inbox.asyncio.AsyncOutboxRelay` (``publish`` is ``async def``).

    :param client: an entered aiobotocore SQS client, or None to make one from ``url`` at
        the first publish (closed by :meth:`close`).
    :param url: an ``sqs://`` URL (:mod:`sa_inbox.brokers.sqs.url`), with ``client`` None.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        url: str | None = None,
        key_attribute: str = DEFAULT_KEY_ATTRIBUTE,
        group_header: str = DEFAULT_GROUP_HEADER,
    ) -> None:
        super().__init__(client, key_attribute=key_attribute, group_header=group_header)
        if client is None and url is None:
            raise InvalidArgument("AsyncPublisher needs a client or an sqs:// url")
        self.url = url
        self._context: Any = None

    async def _client(self) -> Any:
        if self.client is None:
            from aiobotocore.session import get_session

            from .url import client_options

            assert self.url is not None
            self._context = get_session().create_client("sqs", **client_options(self.url))
            self.client = await self._context.__aenter__()
        return self.client

    async def publish(self, message: OutboxMessage) -> None:
        """``SendMessage``, awaited; as :meth:`Publisher.publish`."""
        from .aio import drive_async

        client = await self._client()
        lookup = self.url_call(message.destination)
        if lookup is not None:
            self.remember(message.destination, await drive_async(_one(lookup), client))
        await drive_async(_one(self.send_call(message)), client)

    async def close(self) -> None:
        """Close the client this publisher made (a client given to it is the caller's)."""
        context, self._context = self._context, None
        if context is not None:
            self.client = None
            await context.__aexit__(None, None, None)


def _one(call: Call) -> Any:
    """A step of one call, returning its reply."""
    reply = yield call
    return reply
