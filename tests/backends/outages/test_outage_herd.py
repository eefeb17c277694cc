"""Deliveries held through a database outage all run again at its end: an asyncio consumer
(FastStream's middleware, aio-pika with a large prefetch) holds many at once, and their
herd exhausts the engine's pool (PostgreSQL and MariaDB, SIGKILLed and restarted).

A pool timeout then is this process's contention, not the database's outage and not the
message's failure: no delivery is spent (every one processed, none retried), and the
outage is logged once (one WARNING, one INFO), not once per pool timeout.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from sa_inbox.brokers import Delivery, Settlement, process_async
from sa_inbox.outage import OutageGate
from tests.conftest import URL_VARIABLES
from tests.support.app import App
from tests.support.db_outage import DRIVERS, servers_sh

pytestmark = [pytest.mark.backend, pytest.mark.slow]

#: The engine's pool: 2 connections, a 1 s pool timeout. Each delivery holds a connection
#: HOLD seconds, so the pool serves 2 / HOLD deliveries a second: DELIVERIES are many
#: times what it serves within one pool timeout, so the herd times out on it.
POOL_SIZE, POOL_TIMEOUT, HOLD = 2, 1.0, 0.05
DELIVERIES = int(10 * POOL_SIZE / HOLD * POOL_TIMEOUT)
OUTAGE = 5.0


class Settler:
    def __init__(self, settled: Counter[str]) -> None:
        self.settled = settled

    async def ack(self) -> None:
        self.settled["ack"] += 1

    async def retry(self) -> None:
        self.settled["retry"] += 1

    async def dead_letter(self, reason: object, detail: str) -> None:
        self.settled["dead_letter"] += 1


async def _herd(app: App, url: str, server_dir: Path, database: str) -> list[Settlement]:
    engine = create_async_engine(
        url, pool_size=POOL_SIZE, max_overflow=0, pool_timeout=POOL_TIMEOUT
    )
    gate = OutageGate("herd", hooks=app.inbox.hooks)
    settled: Counter[str] = Counter()

    async def pay(session: AsyncSession, delivery: Delivery) -> None:
        await app.apply_payment_async(session, delivery.message_id or "", 1, Decimal(1))
        await asyncio.sleep(HOLD)

    async def deliver(n: int) -> Settlement:
        return await process_async(
            Delivery(f"m-{n}", b"", delivery_count=1),
            Settler(settled),
            session_factory=async_sessionmaker(engine),
            inbox=app.inbox,
            consumer_name="herd",
            handler=pay,
            outage=gate,
        )

    try:
        await asyncio.to_thread(servers_sh, "kill", str(server_dir), database)
        held = [asyncio.create_task(deliver(n)) for n in range(DELIVERIES)]
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(servers_sh, "restart", str(server_dir), database)
        settlements = await asyncio.gather(*held)
    finally:
        await engine.dispose()
    assert settled == Counter(ack=DELIVERIES), settled
    return settlements


@pytest.mark.parametrize("database", ["postgresql", "mysql"])
def test_the_herd_after_an_outage_spends_no_delivery_and_logs_one_outage(
    database: str, server_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sync_url = sa.make_url(os.environ[URL_VARIABLES[database]])
    engine = sa.create_engine(sync_url)
    app = App(engine)
    app.reset()
    try:
        async_url = sync_url.set(drivername=DRIVERS[database][1]).render_as_string(False)
        with caplog.at_level(logging.INFO, logger="sa_inbox.outage"):
            settlements = asyncio.run(_herd(app, async_url, server_dir, database))
        engine.dispose()  # its pooled connections died with the server
        dispositions = Counter(s.disposition.value for s in settlements)
        assert dispositions == {"processed": DELIVERIES}
        outage = [(r.levelname, r.getMessage()[:40]) for r in caplog.records]
        assert Counter(level for level, _ in outage) == {"WARNING": 1, "INFO": 1}, outage
        assert app.ledger_rows() == DELIVERIES and app.inbox_rows() == DELIVERIES
    finally:
        app.drop()
        engine.dispose()
