"""Broker URL schemes and the broker each one names: the adapter package under
:mod:`sa_inbox.brokers`, and the ``pip install 'sa-inbox[extra]'`` extra of its client."""

from __future__ import annotations

__all__ = ["BROKERS"]

#: URL scheme → broker.
BROKERS = {
    "amqp": "rabbitmq",
    "amqps": "rabbitmq",
    "redis": "redis",
    "rediss": "redis",
    "nats": "nats",
    "tls": "nats",
    "kafka": "kafka",
    "sqs": "sqs",
    "sqss": "sqs",
}
