"""The chaos run's Redis Streams driver, on :class:`~sa_inbox.brokers.redis.Consumer`.

The run's stream ``name`` is read by the consumer group :data:`GROUP`; its dead letters go
to ``<name>:dead``, the adapter's default. A killed consumer's pending entries are taken over
by the others with ``XAUTOCLAIM`` once idle for :data:`VISIBILITY_TIMEOUT` seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from itertools import islice
from typing import Any

from ..._optional import optional_dependencies
from . import ChaosDriver, Consumption

with optional_dependencies(__name__, "redis", "redis"):
    import redis

    from ...brokers.redis import DEFAULT_KEY_FIELD, Consumer

__all__ = ["GROUP", "VISIBILITY_TIMEOUT", "Driver"]

#: The consumer group every chaos consumer joins.
GROUP = "sa-inbox-chaos"
#: Seconds before a killed consumer's pending entries are taken over (short, for the run).
VISIBILITY_TIMEOUT = 2.0
#: Entries per XADD pipeline when publishing.
PUBLISH_CHUNK = 1000


class Driver(ChaosDriver):
    """The :class:`~sa_inbox.chaos.drivers.ChaosDriver` for ``redis://`` URLs.

    :param url: a redis-py URL (``redis://host:port/db``), see ``redis.Redis.from_url``.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url)

    def prepare(self, name: str, *, max_deliveries: int) -> None:
        """Delete ``name`` and ``name:dead`` (with their groups), then create the stream and
        the group from its start (``XGROUP CREATE name GROUP 0 MKSTREAM``). The delivery
        limit is the consumer's, not the stream's: ``max_deliveries`` is passed to
        :meth:`consume` by the run."""
        self.client.delete(name, dead_letter_stream(name))
        self.client.xgroup_create(name, GROUP, "0", mkstream=True)

    def publish(self, name: str, messages: Iterable[tuple[str, bytes]]) -> None:
        """``XADD`` each message with the fields ``message_id`` and ``body``, pipelined."""
        pending = iter(messages)
        while chunk := list(islice(pending, PUBLISH_CHUNK)):
            with self.client.pipeline(transaction=False) as pipe:
                for message_id, body in chunk:
                    pipe.xadd(name, {DEFAULT_KEY_FIELD: message_id, "body": body})
                pipe.execute()

    def run_consumer(self, name: str, consumption: Consumption, stop: threading.Event) -> None:
        """Run a :class:`~sa_inbox.brokers.redis.Consumer` of :data:`GROUP` until ``stop``
        is set."""
        Consumer(
            self.client,
            name,
            group=GROUP,
            **consumption.adapter_options(),
            visibility_timeout=VISIBILITY_TIMEOUT,
            block_timeout=0.5,
        ).run(stop)

    def unsettled(self, name: str) -> int:
        """Entries pending (delivered, not acked: ``XPENDING``) plus entries the group has
        not read yet (``XINFO GROUPS``' ``lag``, or, when Redis cannot tell it, the entries
        after the group's last-delivered-id)."""
        if not self.client.exists(name):
            return 0
        groups = [g for g in self.client.xinfo_groups(name) if _text(g["name"]) == GROUP]
        if not groups:
            return int(self.client.xlen(name))
        (group,) = groups
        lag = group.get("lag")
        if lag is None:
            after = f"({_text(group['last-delivered-id'])}"
            lag = len(self.client.xrange(name, after, "+") or [])
        return int(group["pending"]) + int(lag)

    def dead_letters(self, name: str) -> list[str]:
        """The ``message_id`` field of each entry of ``name:dead`` (``""`` where absent)."""
        return [
            _text((fields or {}).get(DEFAULT_KEY_FIELD.encode(), b""))
            for _, fields in self.client.xrange(dead_letter_stream(name)) or []
        ]

    def close(self) -> None:
        """Close the driver's connection pool."""
        self.client.close()


def dead_letter_stream(name: str) -> str:
    """The adapter's default dead-letter stream of ``name``."""
    return f"{name}:dead"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
