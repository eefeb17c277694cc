"""The client the NATS consumer and publisher take: nats-py's JetStream context
(``nc.jetstream()``), an asyncio client only."""

from __future__ import annotations

from ..startup import ClientKind

__all__ = ["CLIENT"]

#: nats-py's JetStream context, told from its connection by ``pull_subscribe``.
CLIENT = ClientKind(
    broker="NATS",
    method="pull_subscribe",
    asyncio_module="nats",
    blocking="a JetStream context",
    asyncio="a JetStream context (nc.jetstream())",
)
