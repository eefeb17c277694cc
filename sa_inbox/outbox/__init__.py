"""The transactional outbox: what a handler publishes commits with its change, or not at all.

- :class:`Outbox` (:class:`sa_inbox.asyncio.AsyncOutbox` on asyncio):
  ``outbox.publish(session, destination, payload, headers=..., message_id=None)`` records a
  message in the caller's transaction, with a UUIDv7 ``message_id`` assigned once, here;
- :class:`OutboxRelay` (:class:`sa_inbox.asyncio.AsyncOutboxRelay`, ``sa-inbox relay``):
  claims committed rows with the inbox store's ``SKIP LOCKED`` claim, publishes each with
  the broker's confirm, marks it dispatched; retries a refused message with back-off, dead
  after ``max_attempts``; a broker that cannot be reached costs no attempt (the rows wait,
  the relay backs off); per-destination order on request. At least once: a relay killed
  between the confirm and the mark publishes the row again, and the consumer's inbox drops
  the copy;
- :meth:`RelayCore.replay <sa_inbox.outbox.relay.RelayCore.replay>` (``sa-inbox outbox
  replay``): dead rows sent again once the cause is fixed;
- :func:`purge_dispatched`: deletes old dispatched rows with the retention machinery.

This package imports no asyncio code (a sync install needs no greenlet). Publishers live
with their broker: :mod:`sa_inbox.brokers.rabbitmq`, :mod:`sa_inbox.brokers.redis`,
:mod:`sa_inbox.brokers.nats`.
"""

from __future__ import annotations

from ..exc import AsyncPublisherInSyncRelay as AsyncPublisherInSyncRelay
from ..exc import InvalidOutboxMessage as InvalidOutboxMessage
from ..exc import InvalidRelayArgument as InvalidRelayArgument
from .ids import uuid7 as uuid7
from .message import OutboxMessage as OutboxMessage
from .outbox import Outbox as Outbox
from .publisher import Publisher as Publisher
from .purge import purge_dispatched as purge_dispatched
from .relay import OutboxRelay as OutboxRelay
from .relay import RelayBatch as RelayBatch
from .schema import DEFAULT_OUTBOX_TABLE as DEFAULT_OUTBOX_TABLE
from .schema import outbox_table as outbox_table

__all__ = [
    "DEFAULT_OUTBOX_TABLE",
    "AsyncPublisherInSyncRelay",
    "InvalidOutboxMessage",
    "Outbox",
    "OutboxMessage",
    "OutboxRelay",
    "Publisher",
    "RelayBatch",
    "outbox_table",
    "purge_dispatched",
    "uuid7",
]
