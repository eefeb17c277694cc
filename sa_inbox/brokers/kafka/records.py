"""A Kafka record as the adapter sees it, whichever client fetched it, and its
:class:`~sa_inbox.brokers.Delivery`.

The dedup key is the **producer's header** (``message_id`` by default, or the one named by
``key_header``), the same on every retry of the publish. A record's topic, partition and
offset say where one copy of the message sits in the log, not which message it is: a
producer retry writes the message again at a new offset, and a replay or a mirror into
another topic gives it other coordinates, so a key built from them lets every such copy
through. They are kept in :attr:`~sa_inbox.brokers.Delivery.broker_ref` (for logs), and a
``key_header`` naming one of them is refused (:func:`check_key_header`). The record's own
Kafka key is the partitioning key (an account, an order: many messages share it), so it is
no dedup key either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ...exc import InvalidArgument
from ..delivery import Delivery
from ..keys import check_key_name, read_key

__all__ = [
    "COORDINATES",
    "DEFAULT_KEY_HEADER",
    "Record",
    "by_partition",
    "check_key_header",
    "make_record",
    "to_delivery",
]

#: The header holding the producer's dedup key, by default.
DEFAULT_KEY_HEADER = "message_id"

#: Names a ``key_header`` may not have: a record's coordinates in the log (as headers,
#: producers do not set them; as keys, they change with every copy of a message).
COORDINATES = frozenset(
    prefix + name
    for name in ("topic", "partition", "offset", "timestamp")
    for prefix in ("", "kafka_", "kafka.", "kafka-", "x-kafka-")
)


def check_key_header(name: object, *, entry: str, what: str = "key_header") -> str:
    """``name`` if it can name the header of the producer's key.

    :param what: the setting as the messages name it.
    :raises InvalidArgument: for an empty name, one with surrounding spaces, or one naming a
        record's coordinates (``offset``, ``partition``, ``topic``, ``timestamp``, with or
        without a ``kafka_`` prefix): those are the delivery's position in the log, which
        changes with every copy of a message (a producer retry, a replay, a mirror), so a
        key built from them would let each copy through as a new message.
    """
    checked = check_key_name(name, what, entry=entry)
    if checked.lower() in COORDINATES:
        raise InvalidArgument(
            f"{entry}: {what}={checked!r} names the record's position in the log, not "
            "the message: a producer retry or a replay writes the same message at another "
            "offset, so every copy would be applied. Use the header in which the producer "
            "puts its own id, set once when the message is created (default "
            f"{DEFAULT_KEY_HEADER!r})"
        )
    return checked


@dataclass(frozen=True)
class Record:
    """One fetched record and its delivery.

    :param topic: the topic.
    :param partition: the partition.
    :param offset: the record's offset in its partition.
    :param value: the record's value, bytes (``b""`` for a null value).
    :param key: the record's Kafka key (the partitioning key), or None.
    :param headers: the record's headers, in order, values as bytes.
    :param delivery: the :class:`~sa_inbox.brokers.Delivery` made by :func:`to_delivery`.
    """

    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    delivery: Delivery

    @property
    def position(self) -> tuple[str, int]:
        """``(topic, partition)``."""
        return self.topic, self.partition

    def counted(self, delivery_count: int) -> Record:
        """This record, its delivery's count set (from the attempts table)."""
        return replace(self, delivery=replace(self.delivery, delivery_count=delivery_count))


def to_delivery(
    topic: str,
    partition: int,
    offset: int,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] | None,
    *,
    key_header: str,
) -> Delivery:
    """The delivery of one record: ``message_id`` from the header ``key_header`` (the last
    one of that name, as Kafka's own header lookups take it; None when absent; None with a
    :attr:`~sa_inbox.brokers.Delivery.key_error` when not UTF-8), ``body`` the value,
    ``headers`` every header decoded as UTF-8 (undecodable bytes replaced),
    ``broker_ref`` ``topic[partition]@offset``, ``delivery_count`` 1 (the consumer sets
    it from the attempts table before the handler runs).
    """
    pairs = list(headers or ())
    raw: bytes | None = None
    for name, header_value in pairs:
        if name == key_header:
            raw = header_value
    message_id, key_error = read_key(raw)
    return Delivery(
        message_id=message_id,
        body=value or b"",
        headers={name: (v or b"").decode("utf-8", "replace") for name, v in pairs},
        broker_ref=f"{topic}[{partition}]@{offset}",
        key_error=key_error,
    )


def make_record(
    topic: str,
    partition: int,
    offset: int,
    value: bytes | None,
    key: bytes | None,
    headers: Any,
    *,
    key_header: str,
) -> Record:
    """A :class:`Record` of one fetched record's fields (each client's edge calls it).

    :param headers: the record's headers as the client gives them: ``(name, value)`` pairs
        (a mapping is taken as its items), values bytes, str or None.
    """
    items = headers.items() if isinstance(headers, Mapping) else headers or ()
    pairs = tuple((str(name), _bytes(v)) for name, v in items)
    return Record(
        topic,
        partition,
        offset,
        value or b"",
        key,
        pairs,
        to_delivery(topic, partition, offset, value, pairs, key_header=key_header),
    )


def _bytes(value: object) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    return bytes(value)  # type: ignore[call-overload,no-any-return]


def by_partition(records: Iterable[Record]) -> Mapping[tuple[str, int], list[Record]]:
    """``records`` grouped by ``(topic, partition)``, each group in offset order."""
    groups: dict[tuple[str, int], list[Record]] = {}
    for record in records:
        groups.setdefault(record.position, []).append(record)
    for group in groups.values():
        group.sort(key=lambda r: r.offset)
    return groups
