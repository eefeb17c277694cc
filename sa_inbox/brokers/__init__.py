"""Broker adapters: consume from RabbitMQ, Redis Streams, NATS JetStream, Kafka or SQS
exactly once.

Each adapter (an optional extra on the broker's own client library) turns the broker's
message into a :class:`Delivery` and settles it through :func:`process` /
:func:`process_async`, which hold the rules every broker shares (see
:mod:`sa_inbox.brokers.process`) and report each dead letter to the inbox's hooks. The
settings every consumer shares (the delivery limit, the back-off, the dead letter, where
the key is read) are one :class:`DeliveryOptions`.
:mod:`sa_inbox.brokers.dead_letters` counts, lists and replays the dead letters on each
broker.
"""

from __future__ import annotations

from ..exc import DeliveryLimitExceeded as DeliveryLimitExceeded
from .delivery import DeadLetterReason as DeadLetterReason
from .delivery import Delivery as Delivery
from .delivery import Disposition as Disposition
from .delivery import Settlement as Settlement
from .delivery import Settler as Settler
from .options import DeliveryOptions as DeliveryOptions
from .process import DEFAULT_MAX_DELIVERIES as DEFAULT_MAX_DELIVERIES
from .process import process as process
from .process import process_async as process_async
from .signals import stop_on_signals as stop_on_signals

__all__ = [
    "DEFAULT_MAX_DELIVERIES",
    "DeadLetterReason",
    "Delivery",
    "DeliveryLimitExceeded",
    "DeliveryOptions",
    "Disposition",
    "Settlement",
    "Settler",
    "process",
    "process_async",
    "stop_on_signals",
]
