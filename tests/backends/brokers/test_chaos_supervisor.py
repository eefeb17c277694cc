"""The chaos run's killer (:class:`sa_inbox.chaos.supervisor.Supervisor`) on real consumer
processes (``python -m sa_inbox.chaos.consumer``) against the live RabbitMQ: it SIGKILLs and
restarts them, stops them cleanly with SIGTERM, and fails the run when one exits on its own.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sa_inbox.chaos.consumer import ConsumerConfig
from sa_inbox.chaos.drivers import driver_for
from sa_inbox.chaos.supervisor import ConsumerFailed, Supervisor
from sa_inbox.chaos.workload import PREFIX, encode
from sa_inbox.demo.app import DemoSchema
from sa_inbox.demo.db import make_engine
from tests.conftest import broker_url


@pytest.fixture
def config(tmp_path: Path) -> Iterator[ConsumerConfig]:
    """A consumer of a fresh, empty queue on the live RabbitMQ, on a SQLite file."""
    url, broker = f"sqlite:///{tmp_path}/chaos.db", broker_url("rabbitmq")
    engine = make_engine(url)
    DemoSchema(PREFIX).reset(engine, ["acct-0001"])
    engine.dispose()
    name = f"sa-inbox-supervisor-{uuid.uuid4().hex[:10]}"
    driver = driver_for(broker)
    driver.prepare(name, max_deliveries=3)
    yield ConsumerConfig(broker=broker, url=url, name=name, log="", max_deliveries=3)
    channel = driver.channel  # type: ignore[attr-defined]
    for queue in (name, f"{name}.dead-letter"):
        channel.queue_delete(queue)
    driver.close()


def wait_for_logs(supervisor: Supervisor, count: int) -> None:
    """Until ``count`` consumers have opened their logs (they are consuming by then)."""
    deadline = time.monotonic() + 30
    while len(supervisor.logs()) < count:
        assert time.monotonic() < deadline, "consumers did not start"
        supervisor.step()
        time.sleep(0.05)


def test_kill_a_working_consumer_restart_and_clean_stop(
    config: ConsumerConfig, tmp_path: Path
) -> None:
    supervisor = Supervisor([config] * 2, kill_every=0, seed=1, log_dir=tmp_path)
    supervisor.start()
    try:
        wait_for_logs(supervisor, 2)
        assert supervisor.kill_one() is False  # nobody has settled anything yet
        driver = driver_for(config.broker)
        driver.publish(config.name, [("pay-1", encode("acct-0001", 150))])
        driver.close()
        deadline = time.monotonic() + 30
        while not any(slot.working() for slot in supervisor.slots):
            assert time.monotonic() < deadline, "pay-1 was not settled"
            time.sleep(0.05)
        (worker,) = [slot for slot in supervisor.slots if slot.working()]
        assert worker.process is not None
        killed = worker.process.pid
        assert supervisor.kill_one() is True
        assert worker.process.pid != killed  # restarted in its place
        assert supervisor.kills == 1 and supervisor.crashes == 0
        wait_for_logs(supervisor, 3)  # the new one logs to a file of its own
    finally:
        codes = supervisor.stop()
    assert codes == [0, 0]  # SIGTERM: both stopped cleanly
    assert all(not slot.process or slot.process.poll() is not None for slot in supervisor.slots)


def test_a_consumer_exiting_on_its_own_fails_the_run(
    config: ConsumerConfig, tmp_path: Path
) -> None:
    broken = ConsumerConfig(**{**config.__dict__, "broker": "amqp://guest:guest@127.0.0.1:1/"})
    supervisor = Supervisor([broken], kill_every=0, seed=1, log_dir=tmp_path)
    supervisor.start()
    try:
        deadline = time.monotonic() + 30
        with pytest.raises(ConsumerFailed, match="exited with code 1") as info:
            while time.monotonic() < deadline:
                supervisor.step()
                time.sleep(0.05)
        assert "AMQPConnectionError" in str(info.value)  # the end of its stderr
    finally:
        supervisor.stop()
    assert os.path.exists(tmp_path / "consumer-0.err")
