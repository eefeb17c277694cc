"""What the pika and aio-pika consumers share: their settings, checked once when the
consumer is made, the arguments they pass to :func:`~sa_inbox.brokers.process` /
``process_async``, and the run of keyless deliveries they hold."""

from __future__ import annotations

from typing import Any

from ...exc import InvalidArgument
from ...validation import positive_seconds
from ..keys import KeylessStreak
from ..options import DeliveryOptions, options_of
from ..startup import check_consumer
from .message import check_prefetch, dead_letter_queue_name

__all__ = [
    "CONFIGURATION_REPLY_CODES",
    "DEFAULT_KEYLESS_WAIT",
    "QueueConsumer",
    "is_configuration_close",
]

#: AMQP reply codes of a channel or connection closed for the consumer's own settings, which
#: no reconnect mends (AMQP 0-9-1 reference, "Constants"): 403 access-refused, 404
#: not-found (the queue does not exist), 405 resource-locked (an exclusive queue of another
#: connection), 530 not-allowed (the vhost). Anything else (320 connection-forced by
#: ``rabbitmqctl close_connection`` or a shutdown, 406 precondition-failed by
#: ``consumer_timeout``, a heartbeat timeout, a reset socket) is reconnected.
CONFIGURATION_REPLY_CODES = frozenset({403, 404, 405, 530})


def is_configuration_close(reply_code: object) -> bool:
    """Whether a close with ``reply_code`` is the consumer's setting (see
    :data:`CONFIGURATION_REPLY_CODES`)."""
    return reply_code in CONFIGURATION_REPLY_CODES


#: Why a RabbitMQ consumer refuses ``DeliveryOptions.retry_delay``: ``basic.nack`` with
#: ``requeue=True`` puts the message back at once (AMQP 0-9-1, ``basic.nack``); a delayed
#: retry needs a delayed-message exchange or a TTL queue of the application's own.
NO_RETRY_DELAY = "RabbitMQ requeues a nacked message at once"

#: Seconds a consumer holding keyless deliveries waits for the next delivery before it
#: dead-letters them as the producer's; the run counts on (see :mod:`sa_inbox.brokers.keys`).
DEFAULT_KEYLESS_WAIT = 1.0


class QueueConsumer:
    """The base of :class:`~.blocking.Consumer` and :class:`~.aio.AsyncConsumer`.

    :param queue: the queue to consume.
    :param prefetch: ``basic.qos`` prefetch count, >= 1.
    :param keyless_wait: seconds without a delivery after which held keyless deliveries are
        dead-lettered (the run counts on).
    :param options: the shared settings; ``key_source`` is a header (None: the AMQP
        ``message_id`` property), ``dead_letter`` a queue (None: ``<queue>.dead-letter``).
    :param asynchronous: True for the aio-pika consumer.
    :param process: ``session_factory``, ``inbox``, ``consumer_name`` and ``handler`` for
        ``process()``.
    :raises InvalidArgument: if ``prefetch`` is not an int >= 1, ``keyless_wait`` not a
        number of seconds > 0, ``options`` not a DeliveryOptions or it sets ``retry_delay``
        (RabbitMQ requeues a nacked message at once).
    :raises ConfigurationError: for objects the consumer cannot use
        (:func:`~sa_inbox.brokers.startup.check_consumer`).
    """

    def __init__(
        self,
        queue: str,
        *,
        prefetch: int,
        keyless_wait: float,
        options: DeliveryOptions | None,
        asynchronous: bool,
        **process: Any,
    ) -> None:
        entry = f"{type(self).__name__}()"
        shared = options_of(options, entry, refused=[("retry_delay", NO_RETRY_DELAY)])
        self.readiness = check_consumer(
            entry,
            session_factory=process["session_factory"],
            inbox=process["inbox"],
            handler=process["handler"],
            consumer_name=process["consumer_name"],
            max_deliveries=shared.limit(),
            asynchronous=asynchronous,
        )
        self.queue = queue
        self.prefetch = check_prefetch(prefetch)
        self.key_header = shared.key_source
        self.max_keyless = shared.max_keyless
        self.keyless_wait = positive_seconds(keyless_wait, "keyless_wait", InvalidArgument)
        self.dead_letter_queue = shared.dead_letter or dead_letter_queue_name(queue)
        self.process_options = {
            **process,
            "inbox": self.readiness.inbox,
            "max_deliveries": shared.limit(),
            "on_settled": shared.on_settled,
        }
        self._streak = KeylessStreak(shared.key("message_id"), self.max_keyless)

    @property
    def holds_every_slot(self) -> bool:
        """Whether the held keyless deliveries fill the prefetch count: RabbitMQ sends this
        consumer nothing more until one is settled ("Consumer Prefetch"), so the consumer
        reads on with ``basic.get``, which the prefetch count does not limit (AMQP 0-9-1:
        ``basic.qos`` limits the deliveries of ``basic.consume``)."""
        held = len(self._streak.held)
        return held > 0 and held >= self.prefetch and not self._streak.full
