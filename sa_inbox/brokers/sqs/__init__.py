"""Amazon SQS: consume a queue exactly once in effect (extra ``sa-inbox[sqs]``).

:class:`Consumer` (boto3, threads) and :class:`AsyncConsumer` (aiobotocore) receive with
``ReceiveMessage``, claim each message in the inbox in the same transaction as the handler's
change, and delete the committed messages of each receive with ``DeleteMessageBatch`` after
the commit. A heartbeat keeps a slow handler's message hidden (``ChangeMessageVisibility``);
``ApproximateReceiveCount`` is the delivery count; poison messages go to a dead-letter queue
(the consumer's, or the queue's redrive policy); FIFO groups keep their order. The key is
the producer's message attribute (``message_id`` by default), never SQS's ``MessageId``.
See :class:`~sa_inbox.brokers.sqs.base.ConsumerBase` for every rule.

Producer side: put the key in a message attribute, the same on every retry of the send::

    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(payment), MessageAttributes={
        "message_id": {"DataType": "String", "StringValue": payment_id}})

:class:`Publisher` / :class:`AsyncPublisher` do it for the outbox relay
(``sa-inbox relay --broker sqs://...``); ``sqs://`` URLs are read by
:func:`~sa_inbox.brokers.sqs.url.client_options`.
"""

from __future__ import annotations

from ..._optional import optional_dependencies

with optional_dependencies(__name__, "sqs", "boto3", "aiobotocore", "greenlet"):
    from .aio import AsyncConsumer as AsyncConsumer
    from .consumer import Consumer as Consumer
    from .core import DEFAULT_BATCH_SIZE as DEFAULT_BATCH_SIZE
    from .core import DEFAULT_RETRY_DELAY as DEFAULT_RETRY_DELAY
    from .core import DEFAULT_VISIBILITY_TIMEOUT as DEFAULT_VISIBILITY_TIMEOUT
    from .core import DEFAULT_WAIT_TIME as DEFAULT_WAIT_TIME
    from .core import QueueSettings as QueueSettings
    from .message import DEAD_LETTER_ATTRIBUTE as DEAD_LETTER_ATTRIBUTE
    from .message import DEFAULT_KEY_ATTRIBUTE as DEFAULT_KEY_ATTRIBUTE
    from .message import to_delivery as to_delivery
    from .publisher import DEFAULT_GROUP_HEADER as DEFAULT_GROUP_HEADER
    from .publisher import AsyncPublisher as AsyncPublisher
    from .publisher import Publisher as Publisher
    from .url import client_options as client_options

__all__ = [
    "DEAD_LETTER_ATTRIBUTE",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_GROUP_HEADER",
    "DEFAULT_KEY_ATTRIBUTE",
    "DEFAULT_RETRY_DELAY",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "DEFAULT_WAIT_TIME",
    "AsyncConsumer",
    "AsyncPublisher",
    "Consumer",
    "Publisher",
    "QueueSettings",
    "client_options",
    "to_delivery",
]
