"""What a transaction records in the outbox, validated before any SQL; what a relay hands a
publisher.

The body is stored as the bytes the broker will carry: ``bytes`` as given, any other value
as compact JSON in UTF-8 (so a ``str`` becomes a JSON string; encode it yourself to send raw
text). Headers are strings to strings, which every adapter's broker carries unchanged: AMQP
header table values, Redis stream fields, NATS headers (text lines, hence no CR or LF).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exc import InvalidMessageId, InvalidOutboxMessage
from ..validation import JSONSerializer, json_text, validate_key

__all__ = ["MAX_DESTINATION_LENGTH", "OutboxMessage", "encode_payload", "validate_headers"]

MAX_DESTINATION_LENGTH = 255


@dataclass(frozen=True)
class OutboxMessage:
    """One outbox row as a relay claimed it, handed to a publisher.

    :param id: the row's id (the relay order).
    :param message_id: the producer's key: the broker message's id (AMQP ``message_id``,
        the stream's key field, ``Nats-Msg-Id``), the same on every publish of the row.
    :param destination: the queue / routing key, stream or subject.
    :param payload: the body, bytes.
    :param headers: the headers, strings to strings.
    :param attempts: this publish attempt, 1 for the first.
    :param created_at: when the transaction recorded it (aware, UTC).
    :param claimed_by: the relay's claim token.
    """

    id: int
    message_id: str
    destination: str
    payload: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    attempts: int = 1
    created_at: datetime.datetime | None = None
    claimed_by: str = ""


def _key(value: object, what: str, max_length: int) -> str:
    try:
        return validate_key(value, what, max_length)
    except InvalidMessageId as exc:
        raise InvalidOutboxMessage(str(exc)) from None


def validate_destination(destination: object) -> str:
    """``destination`` if it is a valid destination name.

    :raises InvalidOutboxMessage: otherwise (see its docstring).
    """
    return _key(destination, "destination", MAX_DESTINATION_LENGTH)


def validate_message_id(message_id: object, max_length: int) -> str:
    """``message_id`` if it is a valid key of at most ``max_length`` characters.

    :raises InvalidOutboxMessage: otherwise.
    """
    return _key(message_id, "message_id", max_length)


def encode_payload(payload: Any, json_serializer: JSONSerializer | None = None) -> bytes:
    """The body's bytes: ``bytes``/``bytearray``/``memoryview`` as they are, anything else
    as JSON in UTF-8: ``json_serializer(payload)``, or by default compact JSON
    (``separators=(",", ":")``, NaN and Infinity refused).

    :raises InvalidOutboxMessage: if the value is not JSON-serialisable.
    """
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload)
    text = json_text(payload, json_serializer, InvalidOutboxMessage, separators=(",", ":"))
    return text.encode("utf-8")


def validate_headers(headers: object) -> dict[str, str]:
    """A copy of ``headers`` if it maps valid names to strings without NUL, CR or LF.

    :raises InvalidOutboxMessage: otherwise.
    """
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidOutboxMessage(f"headers must be a mapping, not {type(headers).__name__}")
    checked: dict[str, str] = {}
    for name, value in headers.items():
        name = _key(name, "header name", 255)
        if ":" in name or any(ch.isspace() for ch in name):
            raise InvalidOutboxMessage(f"header name {name!r} contains ':' or whitespace")
        if not isinstance(value, str):
            raise InvalidOutboxMessage(f"header {name!r} must be a str, not {type(value).__name__}")
        if any(ch in value for ch in "\x00\r\n"):
            raise InvalidOutboxMessage(f"header {name!r} contains NUL, CR or LF")
        checked[name] = value
    return checked
