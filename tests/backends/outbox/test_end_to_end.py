"""End to end on live servers: service A consumes RabbitMQ through its inbox and publishes
through its outbox, its relay sends A's messages to RabbitMQ, service B consumes them through
its own inbox. A and B live on different databases (PostgreSQL and MariaDB, both ways round).
A's consumer, A's relay and B's consumer are SIGKILLed at random moments and restarted; every
input message then has its effect in A exactly once and its follow-up effect in B exactly
once, nothing is lost, and both queues end empty with no dead letters."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox.brokers.rabbitmq import dead_letter_queue_name, declare_queue
from tests.backends.brokers.test_rabbitmq import amqp_url, channel, dead_letters, eventually, ready
from tests.conftest import backend_url
from tests.support.outbox_app import OutboxApp

__all__ = ["amqp_url", "channel"]  # fixtures

pytestmark = [pytest.mark.backend, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.backends.outbox.service_child"
MESSAGES = 30
KILLS = 6


def _app(backend: str, tmp_path: Any) -> OutboxApp:
    url = backend_url(backend, tmp_path)
    engine = sa.create_engine(url, pool_size=5) if backend != "sqlite" else sa.create_engine(url)
    app = OutboxApp(engine)
    app.reset()
    return app


@pytest.fixture(params=[("postgresql", "mysql"), ("mysql", "postgresql")], ids=["a-pg", "a-maria"])
def services(
    request: pytest.FixtureRequest, tmp_path: Any
) -> Iterator[tuple[OutboxApp, OutboxApp]]:
    a, b = (_app(name, tmp_path) for name in request.param)
    yield a, b
    for app in (a, b):
        app.drop()
        app.engine.dispose()


class Service:
    """One child process of a role, restartable."""

    def __init__(self, role: str, amqp: str, app: OutboxApp, queue: str, out: str = "") -> None:
        url = app.engine.url.render_as_string(hide_password=False)
        self.args = [sys.executable, "-m", CHILD, role, amqp, url, queue, out]
        self.role = role
        self.kills = 0
        self.lines: list[str] = []
        self.process = self.start()

    def start(self) -> subprocess.Popen[str]:
        self.ready = False
        return subprocess.Popen(
            self.args,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    def wait_ready(self) -> None:
        """Until the child handles SIGTERM (it prints READY first)."""
        assert self.process.stdout is not None
        if not self.ready:
            assert self.process.stdout.readline() == "READY\n", self.role
            self.ready = True

    def kill_and_restart(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        out, _ = self.process.communicate(timeout=10)
        self.lines.extend(out.splitlines())
        self.kills += 1
        self.process = self.start()

    def stop(self) -> None:
        self.wait_ready()
        self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=30)
        self.lines.extend(out.splitlines())
        assert self.process.returncode == 0, f"{self.role}: {err}"


def test_a_to_b_exactly_once_with_killed_consumers_and_relay(
    services: tuple[OutboxApp, OutboxApp], channel: Any, amqp_url: str
) -> None:
    a, b = services
    token = uuid.uuid4().hex[:10]
    inbound, outbound = f"sa-inbox-e2e-in-{token}", f"sa-inbox-e2e-out-{token}"
    for queue in (inbound, outbound):
        declare_queue(channel, queue)
    seed = random.randrange(1 << 30)
    chance = random.Random(seed)
    amounts = {f"m-{n}": Decimal(n + 1) for n in range(MESSAGES)}
    workers: list[Service] = []
    try:
        for message_id, amount in [*amounts.items(), *list(amounts.items())[:5]]:  # 5 retries
            properties = {"message_id": message_id, "delivery_mode": 2}
            channel.basic_publish(
                "", inbound, str(amount).encode(), _properties(properties), mandatory=True
            )
        workers = [
            Service("a-consumer", amqp_url, a, inbound, outbound),
            Service("relay", amqp_url, a, inbound),
            Service("b-consumer", amqp_url, b, outbound),
        ]
        for worker in workers:
            worker.wait_ready()
        for _ in range(KILLS):  # mid-stream: each handler takes 20 ms
            time.sleep(chance.uniform(0.1, 0.4))
            chance.choice(workers).kill_and_restart()

        def finished() -> bool:
            return (
                a.ledger_rows() == MESSAGES
                and b.ledger_rows() == MESSAGES
                and {r["status"] for r in a.outbox_rows()} == {"dispatched"}
                and ready(channel, inbound) == 0
                and ready(channel, outbound) == 0
            )

        eventually(finished, seconds=60)
        for worker in workers:
            worker.stop()
        report = {w.role: (w.kills, sum("duplicate" in line for line in w.lines)) for w in workers}
        print(f"seed {seed}: (kills, duplicates acked) per role: {report}")
        workers = []
        total = sum(amounts.values())
        assert a.balance(1) == total and b.balance(2) == total, f"seed {seed}"
        assert _ledger_ids(a) == _ledger_ids(b) == sorted(amounts), f"seed {seed}"
        assert len(a.outbox_rows()) == MESSAGES  # one outbox row per committed handler run
        assert ready(channel, inbound) == ready(channel, outbound) == 0
        assert dead_letters(channel, inbound) == dead_letters(channel, outbound) == []
    finally:
        for worker in workers:
            worker.process.kill()
            worker.process.communicate(timeout=10)
        for queue in (inbound, outbound):
            channel.queue_delete(queue)
            channel.queue_delete(dead_letter_queue_name(queue))


def _properties(values: dict[str, Any]) -> Any:
    import pika

    return pika.BasicProperties(**values)


def _ledger_ids(app: OutboxApp) -> list[str]:
    with app.engine.connect() as conn:
        return sorted(conn.execute(sa.select(app.ledger.c.message_id)).scalars())
