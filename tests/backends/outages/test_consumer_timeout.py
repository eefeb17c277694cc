"""A handler that holds its delivery past RabbitMQ's ``consumer_timeout``: RabbitMQ closes
the channel (``PRECONDITION_FAILED``, "delivery acknowledgement timed out"), and the pika
and aio-pika consumers make it again instead of stopping.

A RabbitMQ of the test's own (``scripts/servers.sh start`` with
``SA_INBOX_RABBITMQ_CONSUMER_TIMEOUT``: the suite's broker keeps the default 30 minutes),
with a consumer timeout of :data:`CONSUMER_TIMEOUT_MS`. A channel checks its consumers'
timeouts on its tick (RabbitMQ docs, "Consumers", "Delivery Acknowledgement Timeout": about
once a minute by default; that server ticks every second), so the slow handler holds its
message :data:`HELD` seconds. The message it held committed before its
ack was lost with the channel: it comes back once and is acked as a duplicate; what the
channel held besides comes back at count 2; every message is applied once, nothing is
dead-lettered, one WARNING and one INFO of the reconnect per consumer.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery
from tests.backends.outages.test_broker_reconnect import check_reconnected
from tests.support.db_outage import AioPikaLane, Lane, Outage, PikaLane, run_outage
from tests.support.servers import own_servers

pytestmark = [pytest.mark.backend, pytest.mark.slow]

CONSUMER_TIMEOUT_MS = 3000
#: Seconds the slow handler holds its message: the timeout, the channel's one-second tick
#: and six seconds to spare.
HELD = CONSUMER_TIMEOUT_MS / 1000 + 1 + 6
RATE = 5.0


def slow(lane_type: type[Lane]) -> type[Lane]:
    """``lane_type``, its handler holding the fifth message :data:`HELD` seconds, the first
    time (an ``await``: the connection's heartbeats go on, only the ack is late)."""

    class Slow(lane_type):  # type: ignore[valid-type,misc]
        held = False

        def _first(self, delivery: Delivery) -> bool:
            if delivery.message_id == f"{self.token}-5" and not type(self).held:
                type(self).held = True
                return True
            return False

        def handler(self, session: Session, delivery: Delivery) -> None:
            if self._first(delivery):
                time.sleep(HELD)  # pika's heartbeat (60 s) allows two missed
            super().handler(session, delivery)

        async def handler_async(self, session: AsyncSession, delivery: Delivery) -> None:
            if self._first(delivery):
                await asyncio.sleep(HELD)
            await super().handler_async(session, delivery)

    return Slow


def test_a_handler_past_the_consumer_timeout_reconnects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"SA_INBOX_RABBITMQ_CONSUMER_TIMEOUT": str(CONSUMER_TIMEOUT_MS)}
    with own_servers("rabbitmq", env=env) as servers:
        monkeypatch.setenv("SA_INBOX_TEST_AMQP_URL", servers.env["SA_INBOX_TEST_AMQP_URL"])
        types = {"pika": slow(PikaLane), "aio-pika": slow(AioPikaLane)}
        settings = Outage(
            "postgresql",
            tmp_path,
            lanes=tuple(types),
            rate=RATE,
            outage=HELD,
            disrupt=lambda: None,
        )
        figures = run_outage(settings, types)
    check_reconnected(figures, losses=1)
    assert all((f.connection_losses, f.duplicates) == (1, 1) for f in figures), figures
