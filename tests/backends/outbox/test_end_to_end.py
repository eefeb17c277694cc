"""End to end on live servers: service A consumes RabbitMQ through its inbox and publishes
through its outbox, its relay sends A's messages to RabbitMQ, service B consumes them through
its own inbox. A and B live on different databases (PostgreSQL and MariaDB, both ways round).
A first relay is SIGKILLed between RabbitMQ's confirms and its mark (so one batch is
published twice, for certain); then A's consumer, A's relay and B's consumer are SIGKILLed at
random moments and restarted; every
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
    """One child process of a role, restartable; its output (every run's) in ``log``."""

    def __init__(
        self, role: str, amqp: str, app: OutboxApp, queue: str, log: Path, out: str = ""
    ) -> None:
        url = app.engine.url.render_as_string(hide_password=False)
        self.args = [sys.executable, "-m", CHILD, role, amqp, url, queue, out]
        self.role = role
        self.log = log
        self.kills = 0
        self.starts = 0
        self.process = self.start()

    def start(self) -> subprocess.Popen[str]:
        self.starts += 1
        self.offset = self.log.stat().st_size if self.log.exists() else 0  # this run's output
        with self.log.open("a") as log:
            return subprocess.Popen(
                self.args,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )

    @property
    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def wait_ready(self) -> None:
        """Until the running child handles SIGTERM (each run prints READY first; a run
        killed while starting never did)."""
        eventually(lambda: "READY\n" in self.log.read_text()[self.offset :], seconds=30)

    def kill_and_restart(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=10)
        self.kills += 1
        self.process = self.start()

    def stop(self) -> None:
        self.wait_ready()
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, f"{self.role}: {err}"


def test_a_to_b_exactly_once_with_killed_consumers_and_relay(
    services: tuple[OutboxApp, OutboxApp], channel: Any, amqp_url: str, tmp_path: Path
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
            Service("a-consumer", amqp_url, a, inbound, tmp_path / "a.log", outbound),
            Service("b-consumer", amqp_url, b, outbound, tmp_path / "b.log"),
        ]
        # First, for certain, a relay killed after RabbitMQ confirmed its batch and before
        # its mark: the batch goes out again (with the same ids) from the next relay.
        eventually(lambda: len(a.outbox_rows()) >= 5, seconds=30)
        crashed = _crash_relay(amqp_url, a)
        workers.insert(1, Service("relay", amqp_url, a, inbound, tmp_path / "relay.log"))
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
        rows = a.outbox_rows()
        assert len(rows) == MESSAGES  # one outbox row per committed handler run
        republished = [r["message_id"] for r in rows if r["attempts"] >= 2]
        assert set(crashed) <= set(republished), "the crashed relay's batch went out again"
        assert ready(channel, inbound) == ready(channel, outbound) == 0
        assert dead_letters(channel, inbound) == dead_letters(channel, outbound) == []
    finally:
        for worker in workers:
            worker.process.kill()
            worker.process.communicate(timeout=10)
        for queue in (inbound, outbound):
            channel.queue_delete(queue)
            channel.queue_delete(dead_letter_queue_name(queue))


def _crash_relay(amqp: str, app: OutboxApp) -> list[str]:
    """Run the relay that dies between the confirm and the mark; the ids it published."""
    url = app.engine.url.render_as_string(hide_password=False)
    done = subprocess.run(
        [sys.executable, "-m", CHILD, "relay-crash-before-mark", amqp, url, "-", ""],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == -signal.SIGKILL and done.stdout.startswith("PUBLISHED"), done.stderr
    return [r["message_id"] for r in app.outbox_rows("processing")]


def _properties(values: dict[str, Any]) -> Any:
    import pika

    return pika.BasicProperties(**values)


def _ledger_ids(app: OutboxApp) -> list[str]:
    with app.engine.connect() as conn:
        return sorted(conn.execute(sa.select(app.ledger.c.message_id)).scalars())
