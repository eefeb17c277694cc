"""The NATS JetStream adapter (extra ``sa-inbox[nats]``, on nats-py; asyncio only, as nats-py).

:class:`AsyncConsumer` runs a durable **pull** consumer (:func:`consume`, the function it
replaces, is deprecated): each message is claimed in the inbox in the same transaction as
the handler's change, committed, then acked (``ack_sync``); a failure is ``nak``-ed with a back-off;
after ``max_deliveries`` (JetStream's ``num_delivered``), or without the producer's key
header, the message is published to a dead-letter subject with its reason and
``term``-inated. The key is the producer's header (``Nats-Msg-Id`` by
default, or one you name, e.g. ``Idempotency-Key``), never the stream sequence.

Producer side::

    await js.publish("payments.in", body, headers={"Nats-Msg-Id": payment_id})

Consumer side::

    consumer = AsyncConsumer(
        js, "PAYMENTS", "billing",
        session_factory=async_sessionmaker(engine), inbox=inbox, handler=apply,
        options=DeliveryOptions(dead_letter="payments.dead"),
    )
    await consumer.run()  # until consumer.stop()

nats-py has no synchronous client, so there is no sync consumer; a sync handler can run as
``await session.run_sync(lambda s: handler(s, delivery))`` (what the chaos driver,
:mod:`sa_inbox.chaos.drivers.nats`, does). The outbox relay's publishers are
:class:`AsyncPublisher` (on your JetStream context), :class:`ConnectingJetStreamPublisher`
(on a connection of its own) and :class:`Publisher` (for the synchronous relay, on an event
loop of its own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._optional import optional_dependencies
from ...exc import NoPubAckError as NoPubAckError
from .._renamed import former_names

with optional_dependencies(__name__, "nats", "nats"):
    from ..options import RetryDelay as RetryDelay
    from .consumer import DEFAULT_ACK_WAIT as DEFAULT_ACK_WAIT
    from .consumer import DEFAULT_BATCH as DEFAULT_BATCH
    from .consumer import DEFAULT_FETCH_TIMEOUT as DEFAULT_FETCH_TIMEOUT
    from .consumer import AsyncConsumer as AsyncConsumer
    from .consumer import StopFlag as StopFlag
    from .consumer import check as check
    from .consumer import consume as consume
    from .consumer import consumer_config as consumer_config
    from .consumer import ensure_consumer as ensure_consumer
    from .delivery import DEAD_LETTER_DETAIL as DEAD_LETTER_DETAIL
    from .delivery import DEAD_LETTER_MESSAGE_ID as DEAD_LETTER_MESSAGE_ID
    from .delivery import DEAD_LETTER_NATS_MSG_ID as DEAD_LETTER_NATS_MSG_ID
    from .delivery import DEAD_LETTER_REASON as DEAD_LETTER_REASON
    from .delivery import DEAD_LETTER_SEQUENCE as DEAD_LETTER_SEQUENCE
    from .delivery import DEAD_LETTER_STREAM as DEAD_LETTER_STREAM
    from .delivery import DEAD_LETTER_SUBJECT as DEAD_LETTER_SUBJECT
    from .delivery import DEFAULT_KEY_HEADER as DEFAULT_KEY_HEADER
    from .delivery import dead_letter_headers as dead_letter_headers
    from .delivery import to_delivery as to_delivery
    from .publisher import DEFAULT_PUBLISH_TIMEOUT as DEFAULT_PUBLISH_TIMEOUT
    from .publisher import AsyncPublisher as AsyncPublisher
    from .publisher import ConnectingJetStreamPublisher as ConnectingJetStreamPublisher
    from .publisher import Publisher as Publisher
    from .settler import DEFAULT_ACK_TIMEOUT as DEFAULT_ACK_TIMEOUT
    from .settler import JetStreamSettler as JetStreamSettler
    from .settler import backoff as backoff

# The former names, kept for one release (not in __all__), with a DeprecationWarning.
if TYPE_CHECKING:
    JetStreamPublisher = AsyncPublisher
    BlockingJetStreamPublisher = Publisher
else:
    __getattr__ = former_names(
        __name__,
        {"JetStreamPublisher": "AsyncPublisher", "BlockingJetStreamPublisher": "Publisher"},
        globals(),
    )

__all__ = [
    "DEAD_LETTER_DETAIL",
    "DEAD_LETTER_MESSAGE_ID",
    "DEAD_LETTER_NATS_MSG_ID",
    "DEAD_LETTER_REASON",
    "DEAD_LETTER_SEQUENCE",
    "DEAD_LETTER_STREAM",
    "DEAD_LETTER_SUBJECT",
    "DEFAULT_ACK_TIMEOUT",
    "DEFAULT_ACK_WAIT",
    "DEFAULT_BATCH",
    "DEFAULT_FETCH_TIMEOUT",
    "DEFAULT_KEY_HEADER",
    "DEFAULT_PUBLISH_TIMEOUT",
    "AsyncConsumer",
    "AsyncPublisher",
    "ConnectingJetStreamPublisher",
    "JetStreamSettler",
    "Publisher",
    "RetryDelay",
    "StopFlag",
    "backoff",
    "check",
    "consume",
    "consumer_config",
    "dead_letter_headers",
    "ensure_consumer",
    "to_delivery",
]
