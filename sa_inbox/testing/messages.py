"""The producer's message and a broker's deliveries of it, as the exactly-once checks make
them.

A :class:`Message` is what a producer sends once: its id (set once, when the event is
created), its body and headers. A broker hands it out one or more times, and each
:class:`BrokerDelivery` carries, beside the message, the metadata the broker sets per
delivery: delivery tag and redelivered flag (AMQP ``basic.deliver``), delivery count
(RabbitMQ quorum queues' ``x-delivery-count``, SQS ``ApproximateReceiveCount``, JetStream
``num_delivered``, Redis' times-delivered counter), receipt handle (SQS), partition and offset
(Kafka), stream entry id (Redis) and sequence (JetStream), and the time of receipt. None of
them may be part of a dedup key: :class:`Broker` makes deliveries of one message that differ
in all of them, the way a producer's retry and a broker's redelivery do.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..brokers.delivery import Delivery
from ..exc import InvalidArgument

__all__ = [
    "BROKER_FIELDS",
    "Broker",
    "BrokerDelivery",
    "Message",
    "MessageFactory",
    "make_message",
]


@dataclass(frozen=True)
class Message:
    """One message as its producer sends it.

    :param message_id: the producer's id, set once when the event is created: the AMQP
        ``message_id`` property, the key field an sa-inbox publisher writes to a Redis
        stream, ``Nats-Msg-Id``; ``None`` for a message that carries none.
    :param body: the body, bytes.
    :param headers: headers (stream fields) the producer sets, e.g. the header a consumer
        configured with ``options.key_source`` reads its key from.
    """

    message_id: str | None
    body: bytes = b""
    headers: Mapping[str, Any] = field(default_factory=dict)


#: The broker's per-delivery fields of :class:`BrokerDelivery`, in the order the checks vary
#: them.
BROKER_FIELDS = (
    "delivery_tag",
    "redelivered",
    "delivery_count",
    "receipt_handle",
    "partition",
    "offset",
    "entry_id",
    "sequence",
    "received_at",
)


@dataclass(frozen=True)
class BrokerDelivery:
    """One delivery of a :class:`Message`: the message and the broker's metadata of this
    delivery (see the module's docstring; every field but ``message`` describes the delivery,
    not the message).

    :param message: the producer's message.
    :param delivery_tag: AMQP delivery tag (per channel, new on every delivery).
    :param redelivered: AMQP ``redelivered`` flag.
    :param delivery_count: which delivery of the message this is, 1 for the first.
    :param receipt_handle: SQS receipt handle (new on every receive).
    :param partition: Kafka partition.
    :param offset: Kafka offset (a producer's retry is a new record, at a new offset).
    :param entry_id: Redis stream entry id (new on every ``XADD``).
    :param sequence: JetStream stream sequence (new on every publish).
    :param received_at: when the consumer received it, seconds since the epoch.
    """

    message: Message
    delivery_tag: int
    redelivered: bool
    delivery_count: int
    receipt_handle: str
    partition: int
    offset: int
    entry_id: str
    sequence: int
    received_at: float

    @property
    def message_id(self) -> str | None:
        """The producer's id (``message.message_id``)."""
        return self.message.message_id

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def headers(self) -> Mapping[str, Any]:
        return self.message.headers

    def to_delivery(self, key: str | None) -> Delivery:
        """The :class:`~sa_inbox.brokers.Delivery` a broker adapter would make of it, keyed
        on ``key``."""
        return Delivery(
            message_id=key,
            body=self.body,
            delivery_count=self.delivery_count,
            headers=dict(self.headers),
            broker_ref=f"delivery tag {self.delivery_tag}",
        )


class Broker:
    """Makes the deliveries of messages as a broker would: each one with metadata of its
    own. Not thread-safe (the checks make every delivery from one thread)."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self._clock = 1_700_000_000.0

    def _next(self) -> int:
        return next(self._counter)

    def _now(self) -> float:
        self._clock += 1.5
        return self._clock

    def first(self, message: Message) -> BrokerDelivery:
        """The first delivery of ``message``, published once."""
        n = self._next()
        return BrokerDelivery(
            message=message,
            delivery_tag=n,
            redelivered=False,
            delivery_count=1,
            receipt_handle=f"handle-{uuid.uuid4().hex}",
            partition=0,
            offset=1000 + n,
            entry_id=f"{1_700_000_000_000 + n}-0",
            sequence=n,
            received_at=self._now(),
        )

    def producer_retry(self, message: Message) -> BrokerDelivery:
        """``message`` published again by its producer (a publish whose confirm was lost):
        a new record, with everything the broker sets new, delivered for the first time."""
        return self.first(message)

    def redelivery(self, earlier: BrokerDelivery) -> BrokerDelivery:
        """The broker's redelivery of ``earlier`` (unacked, the consumer gone or the
        visibility timeout over): the same record (partition, offset, entry id, sequence),
        flagged redelivered and counted, under a new delivery tag and receipt handle."""
        return dataclasses.replace(
            earlier,
            delivery_tag=self._next(),
            redelivered=True,
            delivery_count=earlier.delivery_count + 1,
            receipt_handle=f"handle-{uuid.uuid4().hex}",
            received_at=self._now(),
        )

    def varied(self, earlier: BrokerDelivery, name: str) -> BrokerDelivery:
        """``earlier`` with only the broker field ``name`` changed (to find which field a
        key depends on)."""
        value = getattr(earlier, name)
        changed: Any
        if isinstance(value, bool):
            changed = not value
        elif isinstance(value, int):
            changed = value + 7919
        elif isinstance(value, float):
            changed = value + 61.0
        else:
            changed = f"{value}-again"
        return dataclasses.replace(earlier, **{name: changed})


#: What the user's message factory is: called with a new producer id, it returns the
#: :class:`Message` (or only its body) the producer would send for a new event.
MessageFactory = Callable[[str], Any]


def make_message(factory: MessageFactory) -> Message:
    """A new message from ``factory``: a fresh id, minted once as a producer does.

    :param factory: ``factory(message_id)`` returns a :class:`Message` (its own id kept, or
        ``None`` for a keyless one) or the body (``bytes``, or ``str`` sent as UTF-8).
    :raises InvalidArgument: if it returns anything else.
    """
    message_id = str(uuid.uuid4())
    made = factory(message_id)
    if isinstance(made, Message):
        return made
    if isinstance(made, str):
        made = made.encode()
    if isinstance(made, bytes | bytearray):
        return Message(message_id, bytes(made))
    raise InvalidArgument(
        f"the message factory returned {type(made).__name__}: return a "
        "sa_inbox.testing.Message or the body (bytes or str)"
    )
