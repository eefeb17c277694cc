"""RabbitMQ adapter: consume a queue exactly once in effect, with pika or aio-pika.

- :class:`Consumer` (pika ``BlockingConnection``) and :class:`AsyncConsumer`
  (aio-pika): manual ``basic.ack`` after the commit, ``basic.nack(requeue=True)`` to retry,
  dead letters published to the dead-letter queue with the reason in headers, ``basic.qos``
  prefetch, a graceful stop.
- :class:`PikaSettler`, :class:`AioPikaSettler`, :func:`pika_delivery`, :func:`aio_pika_delivery`:
  the pieces, for your own consume loop with :func:`sa_inbox.brokers.process`.
- :class:`Publisher` (pika) and :class:`AsyncPublisher` (aio-pika): the outbox relay's
  publishers, each message confirmed by the broker.
- :func:`declare_queue` / :func:`declare_queue_async`: a quorum queue (it counts deliveries:
  ``x-delivery-count``) and its dead-letter queue.

The key is the producer's AMQP ``message_id`` property (or a header you name); set it in the
producer, the same on every retry of a publish (aio-pika fills in a random one otherwise: see
:mod:`.aio`). Requires the ``rabbitmq`` extra (pika and aio-pika).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._optional import optional_dependencies
from ...exc import InvalidConsumerArgument as InvalidConsumerArgument
from .._renamed import former_names

with optional_dependencies(__name__, "rabbitmq", "pika", "aio_pika"):
    from .aio import AioPikaSettler as AioPikaSettler
    from .aio import AsyncConsumer as AsyncConsumer
    from .aio import aio_pika_delivery as aio_pika_delivery
    from .blocking import Consumer as Consumer
    from .blocking import PikaSettler as PikaSettler
    from .blocking import pika_delivery as pika_delivery
    from .message import DEAD_LETTER_SUFFIX as DEAD_LETTER_SUFFIX
    from .message import DEFAULT_PREFETCH as DEFAULT_PREFETCH
    from .message import DETAIL_HEADER as DETAIL_HEADER
    from .message import QUEUE_HEADER as QUEUE_HEADER
    from .message import REASON_HEADER as REASON_HEADER
    from .message import dead_letter_queue_name as dead_letter_queue_name
    from .message import delivery_count as delivery_count
    from .message import producer_key as producer_key
    from .message import to_delivery as to_delivery
    from .publisher import AsyncPublisher as AsyncPublisher
    from .publisher import Publisher as Publisher
    from .queues import declare_queue as declare_queue
    from .queues import declare_queue_async as declare_queue_async
    from .queues import queue_arguments as queue_arguments

# The former names, kept for one release (not in __all__), with a DeprecationWarning.
if TYPE_CHECKING:
    BlockingConsumer = Consumer
    RabbitMQPublisher = Publisher
    AioPikaPublisher = AsyncPublisher
else:
    __getattr__ = former_names(
        __name__,
        {
            "BlockingConsumer": "Consumer",
            "RabbitMQPublisher": "Publisher",
            "AioPikaPublisher": "AsyncPublisher",
        },
        globals(),
    )

__all__ = [
    "DEAD_LETTER_SUFFIX",
    "DEFAULT_PREFETCH",
    "DETAIL_HEADER",
    "QUEUE_HEADER",
    "REASON_HEADER",
    "AioPikaSettler",
    "AsyncConsumer",
    "AsyncPublisher",
    "Consumer",
    "PikaSettler",
    "Publisher",
    "aio_pika_delivery",
    "dead_letter_queue_name",
    "declare_queue",
    "declare_queue_async",
    "delivery_count",
    "pika_delivery",
    "producer_key",
    "queue_arguments",
    "to_delivery",
]
