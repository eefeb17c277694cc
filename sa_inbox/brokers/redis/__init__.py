"""Redis Streams: consume a stream through a consumer group exactly once in effect.

:class:`Consumer` (redis-py, threads) and :class:`AsyncConsumer`
(``redis.asyncio``) read entries with ``XREADGROUP``, take over entries a dead or failing
consumer left pending with ``XAUTOCLAIM`` after the visibility timeout, count deliveries with
``XPENDING``, ``XACK`` after the database commit, and move poison entries to a dead-letter
stream (``<stream>:dead``) with ``XADD`` + ``XACK`` in one Lua script (atomic; a
``MULTI``/``EXEC`` would still ack when the ``XADD`` fails, see :mod:`.core`). The dedup key
is the producer's: a stream field (``message_id`` by default), never the entry id.

Producer side: put the key in the entry, the same on every retry of the publish::

    client.xadd("payments", {"message_id": payment_id, "body": json.dumps(payment)})

:class:`Publisher` does it for the outbox relay, on a redis-py client or a
``redis.asyncio`` one.

Needs the ``redis`` extra (``pip install sa-inbox[redis]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._optional import optional_dependencies
from ...exc import InvalidStreamSettings as InvalidStreamSettings
from .._renamed import former_names

with optional_dependencies(__name__, "redis", "redis"):
    from .aio import AsyncConsumer as AsyncConsumer
    from .consumer import Consumer as Consumer
    from .core import DEAD_LETTER_FIELDS as DEAD_LETTER_FIELDS
    from .core import DEFAULT_BATCH_SIZE as DEFAULT_BATCH_SIZE
    from .core import DEFAULT_BLOCK_TIMEOUT as DEFAULT_BLOCK_TIMEOUT
    from .core import DEFAULT_BODY_FIELD as DEFAULT_BODY_FIELD
    from .core import DEFAULT_KEY_FIELD as DEFAULT_KEY_FIELD
    from .core import DEFAULT_VISIBILITY_TIMEOUT as DEFAULT_VISIBILITY_TIMEOUT
    from .core import StreamSettings as StreamSettings
    from .core import to_delivery as to_delivery
    from .publisher import Publisher as Publisher

# The former names, kept for one release (not in __all__), with a DeprecationWarning.
if TYPE_CHECKING:
    RedisStreamConsumer = Consumer
    AsyncRedisStreamConsumer = AsyncConsumer
    RedisStreamPublisher = Publisher
else:
    __getattr__ = former_names(
        __name__,
        {
            "RedisStreamConsumer": "Consumer",
            "AsyncRedisStreamConsumer": "AsyncConsumer",
            "RedisStreamPublisher": "Publisher",
        },
        globals(),
    )

__all__ = [
    "DEAD_LETTER_FIELDS",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_BLOCK_TIMEOUT",
    "DEFAULT_BODY_FIELD",
    "DEFAULT_KEY_FIELD",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "AsyncConsumer",
    "Consumer",
    "Publisher",
    "StreamSettings",
    "to_delivery",
]
