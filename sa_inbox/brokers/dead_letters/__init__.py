"""Dead letters on the broker: count them, list them, and replay them to where they came from.

The broker adapters dead-letter a delivery they must not process (no key, an invalid key,
past ``max_deliveries``) to a dead-letter queue (RabbitMQ), stream (Redis) or stream bound
to a dead-letter subject (NATS JetStream), with its reason, detail and source. This package
reads those, on the three brokers, with the same calls::

    from sa_inbox.brokers import dead_letters

    dead_letters.count("amqp://guest:guest@localhost/", "payments.dead-letter")   # 3
    dead_letters.peek("redis://localhost/0", "payments:dead", reason="delivery_limit")
    result = dead_letters.replay(
        "nats://localhost:4222", "PAYMENTS_DEAD", dry_run=False, reason="delivery_limit"
    )
    result.moved                                                                  # 2

:func:`replay` publishes each dead letter to its source with its original key, confirmed by
the broker, **before** it removes the dead letter, so a replay killed halfway duplicates a
message (the inbox skips the copy) and never loses one; see :func:`replay` for each
broker's steps. Replay once the cause is fixed (the handler, the producer's key): a message
that fails again is dead-lettered again.

The command line is ``sa-inbox dead-letters count | list | replay --broker URL --queue Q``,
and ``sa-inbox stats --check --dead-letters URL/QUEUE`` fails while one is not empty.

**FastStream and Celery** consume the same broker queues, so the same calls serve them:

* RabbitMQ: they dead-letter with ``basic.reject(requeue=False)`` through the queue's
  dead-letter exchange, so the dead letter has no sa-inbox reason (``reason`` None: replay it
  without ``reason``) and its source is RabbitMQ's own ``x-death`` entry. A Celery task keeps
  its ``retries`` header, so a replayed task that had used up ``max_deliveries`` runs once
  more before it is rejected again.
* Redis Streams (FastStream): the middleware's dead letters are the adapter's, reason and
  source included.
* NATS (FastStream): the middleware ``term``\\ s a dead letter (no dead-letter stream of
  sa-inbox's; the original stays in its stream, named by the ``MSG_TERMINATED`` advisory),
  so there is nothing here to replay: republish from the advisory's ``stream_seq``.

Needs the broker's extra (``rabbitmq``, ``redis`` or ``nats``) only for that broker.
"""

from __future__ import annotations

from .model import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from .model import DeadLetter as DeadLetter
from .model import ReplayResult as ReplayResult
from .replay import count as count
from .replay import peek as peek
from .replay import replay as replay
from .replay import sample as sample
from .target import DeadLetterTarget as DeadLetterTarget

__all__ = [
    "DEFAULT_TIMEOUT",
    "DeadLetter",
    "DeadLetterTarget",
    "ReplayResult",
    "count",
    "peek",
    "replay",
    "sample",
]
