"""What the pika and aio-pika consumers share: their queue settings, checked once, and the
arguments they pass to :func:`~sa_inbox.brokers.process` / ``process_async``."""

from __future__ import annotations

from typing import Any

from .message import check_prefetch, dead_letter_queue_name

__all__ = ["QueueConsumer"]


class QueueConsumer:
    """The base of :class:`~.blocking.BlockingConsumer` and :class:`~.aio.AsyncConsumer`.

    :param queue: the queue to consume.
    :param prefetch: ``basic.qos`` prefetch count, >= 1.
    :param key_header: the header with the producer's key, or None for ``message_id``.
    :param dead_letter_queue: the dead-letter queue, or None for the default name.
    :param process: the keyword arguments of ``process()`` besides the delivery and settler.
    :raises InvalidConsumerArgument: if ``prefetch`` is not an int >= 1.
    """

    def __init__(
        self,
        queue: str,
        *,
        prefetch: int,
        key_header: str | None,
        dead_letter_queue: str | None,
        **process: Any,
    ) -> None:
        self.queue = queue
        self.prefetch = check_prefetch(prefetch)
        self.key_header = key_header
        self.dead_letter_queue = dead_letter_queue or dead_letter_queue_name(queue)
        self.process_options = process
