"""An SQS message as the inbox sees it: :func:`to_delivery`, and its dead letter's attributes.

The dedup key is the **producer's**, read from a message attribute the user names
(``message_id`` by default): SQS has no headers; a message carries up to 10 typed message
attributes (``String``, ``Number``, ``Binary``), which the Amazon SQS Developer Guide
("Amazon SQS message attributes") names as the place for a message's metadata. SQS's own
``MessageId`` is assigned per ``SendMessage``, so a producer's retry of a send gets a new
one, and the ``ReceiptHandle`` changes on every receive: both go to
:attr:`~sa_inbox.brokers.Delivery.broker_ref` (the ``MessageId``) or stay with the
consumer (the handle), never to the key. ``ApproximateReceiveCount`` is the delivery count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..delivery import DeadLetterReason, Delivery
from ..keys import read_key

__all__ = [
    "DEAD_LETTER_ATTRIBUTE",
    "DEFAULT_KEY_ATTRIBUTE",
    "MAX_ATTRIBUTES",
    "SYSTEM_ATTRIBUTES",
    "Received",
    "dead_letter_attributes",
    "to_delivery",
]

#: The message attribute holding the producer's key, by default.
DEFAULT_KEY_ATTRIBUTE = "message_id"
#: The attribute a dead letter carries (a JSON object: reason, detail, source queue, the
#: producer's key, the receive count, the original's SQS ``MessageId``).
DEAD_LETTER_ATTRIBUTE = "sa_inbox_dead_letter"
#: Message attributes one message may carry (SendMessage, "MessageAttributes").
MAX_ATTRIBUTES = 10
#: The system attributes the consumer asks ``ReceiveMessage`` for.
SYSTEM_ATTRIBUTES = (
    "ApproximateReceiveCount",
    "MessageGroupId",
    "MessageDeduplicationId",
    "SequenceNumber",
)


@dataclass(frozen=True)
class Received:
    """One message as ``ReceiveMessage`` returned it (one receive of it).

    :param message_id: SQS's ``MessageId`` (for logs and dead letters; never the key).
    :param receipt_handle: this receive's handle: the only way to delete the message or
        change its visibility, and stale once the visibility timeout passed and another
        receive took it.
    :param body: the body, text (SQS bodies are Unicode text).
    :param attributes: the system attributes asked for (:data:`SYSTEM_ATTRIBUTES`).
    :param message_attributes: the message attributes, as the client returns them.
    """

    message_id: str
    receipt_handle: str
    body: str
    attributes: Mapping[str, str] = field(default_factory=dict)
    message_attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Received:
        """The message of one entry of ``ReceiveMessage``'s ``Messages``."""
        return cls(
            message_id=str(raw.get("MessageId", "")),
            receipt_handle=str(raw["ReceiptHandle"]),
            body=str(raw.get("Body", "")),
            attributes=dict(raw.get("Attributes") or {}),
            message_attributes=dict(raw.get("MessageAttributes") or {}),
        )

    @property
    def receive_count(self) -> int:
        """``ApproximateReceiveCount``, at least 1 (this receive counted)."""
        try:
            return max(1, int(self.attributes.get("ApproximateReceiveCount", 1)))
        except ValueError:
            return 1

    @property
    def group_id(self) -> str | None:
        """``MessageGroupId`` (FIFO queues; None on a standard queue)."""
        return self.attributes.get("MessageGroupId")

    @property
    def deduplication_id(self) -> str | None:
        """``MessageDeduplicationId`` (FIFO queues): the producer's, or the SHA-256 of the
        body SQS made for it under content-based deduplication."""
        return self.attributes.get("MessageDeduplicationId")


def attribute_value(attribute: Mapping[str, Any] | None) -> object:
    """The value of one message attribute: the ``StringValue`` of a ``String`` (or custom
    ``String.x``) attribute, the ``BinaryValue`` bytes of a ``Binary`` one; for a ``Number``
    the value as :class:`Number` (no key: ``7`` and ``"7"`` from two producers would be one
    message); None when absent."""
    if attribute is None:
        return None
    data_type = str(attribute.get("DataType", "String"))
    if data_type.startswith("Binary"):
        return attribute.get("BinaryValue")
    if data_type.startswith("Number"):
        return Number(str(attribute.get("StringValue", "")))
    return attribute.get("StringValue")


class Number(str):
    """A ``Number`` attribute's value: text to SQS, a number to its producer; no key."""


def to_delivery(
    message: Received,
    *,
    queue: str,
    key_attribute: str = DEFAULT_KEY_ATTRIBUTE,
    deduplication_id_key: bool = False,
) -> Delivery:
    """The :class:`~sa_inbox.brokers.Delivery` of one received message.

    :param queue: the queue's name, for ``broker_ref``.
    :param key_attribute: the message attribute holding the producer's key.
    :param deduplication_id_key: take the key from ``MessageDeduplicationId`` instead (see
        :class:`~sa_inbox.brokers.sqs.Consumer`).
    :returns: ``message_id`` from the key (None when absent; None with a ``key_error``
        for a ``Number`` attribute or bytes that are not UTF-8), ``body`` the body in UTF-8,
        ``delivery_count`` ``ApproximateReceiveCount``, ``headers`` the message attributes'
        values, ``broker_ref`` ``<queue>/<MessageId>``.
    """
    if deduplication_id_key:
        value: object = message.deduplication_id
    else:
        value = attribute_value(message.message_attributes.get(key_attribute))
    key: str | None
    key_error: str | None
    if isinstance(value, Number):
        key, key_error = None, f"the key is a Number attribute ({value!s:.60}), not a String"
    else:
        key, key_error = read_key(value)
    return Delivery(
        message_id=key,
        body=message.body.encode("utf-8"),
        delivery_count=message.receive_count,
        headers={
            name: attribute_value(attribute)
            for name, attribute in message.message_attributes.items()
        },
        broker_ref=f"{queue}/{message.message_id}",
        key_error=key_error,
    )


def sendable(attributes: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Received message attributes as ``SendMessage`` takes them (``DataType`` and the one
    value; the client's empty list fields dropped)."""
    sent: dict[str, dict[str, Any]] = {}
    for name, attribute in attributes.items():
        data_type = str(attribute.get("DataType", "String"))
        value_field = "BinaryValue" if data_type.startswith("Binary") else "StringValue"
        sent[name] = {"DataType": data_type, value_field: attribute.get(value_field, "")}
    return sent


def dead_letter_attributes(
    message: Received,
    delivery: Delivery,
    reason: DeadLetterReason,
    detail: str,
    *,
    source: str,
    key_attribute: str,
) -> dict[str, dict[str, Any]]:
    """The message attributes of ``message``'s dead letter: the original's, plus
    :data:`DEAD_LETTER_ATTRIBUTE` (a JSON object: ``reason``, ``detail``, ``source``,
    ``message_id``, ``receive_count``, ``sqs_message_id``).

    A message may carry :data:`MAX_ATTRIBUTES` attributes: when the original has all ten,
    the key attribute is kept and the last others are left out to make room (their names
    are listed under ``dropped`` in the JSON object).
    """
    original = sendable(message.message_attributes)
    original.pop(DEAD_LETTER_ATTRIBUTE, None)  # a replayed dead letter, dead again
    dropped: list[str] = []
    while len(original) >= MAX_ATTRIBUTES:
        name = next(n for n in reversed(original) if n != key_attribute)
        dropped.append(name)
        del original[name]
    record: dict[str, Any] = {
        "reason": reason.value,
        "detail": detail,
        "source": source,
        "message_id": delivery.message_id,
        "receive_count": delivery.delivery_count,
        "sqs_message_id": message.message_id,
    }
    if dropped:
        record["dropped"] = dropped
    original[DEAD_LETTER_ATTRIBUTE] = {"DataType": "String", "StringValue": json.dumps(record)}
    return original
