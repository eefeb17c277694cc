"""``sa-inbox chaos`` and ``sa-inbox demo --broker`` end to end: the real CLI in a subprocess,
real consumer processes SIGKILLed at random, a live broker, a real database.

Each run is small (300 payments, 3 consumers, a kill every ~0.5 s up to :data:`MAX_KILLS`
kills, 3 poison messages, 1% of the payments SIGKILLing their consumer after the commit,
before the ack, 1% in the handler before the commit). A healthy payment's delivery is ended
by a kill at most MAX_KILLS times and by a crash of the consumer holding it at most as often
as payments crash (each once, on its first delivery), so :data:`MAX_DELIVERIES`, one more
than both, is never reached by a healthy payment: the dead letters are the poison ones
whatever the timing (an unbounded killer once dead-lettered a payment killed 4 times
running). The tests assert the run's verification, then check the database's business
state and the broker's state themselves.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox.brokers import Delivery, Disposition, Settlement
from sa_inbox.chaos.consumer import AFTER_COMMIT, IN_HANDLER, crash_chosen, record_line
from sa_inbox.chaos.drivers import ChaosDriver, driver_for
from sa_inbox.chaos.drivers.nats import CHAOS_ACK_WAIT
from sa_inbox.chaos.drivers.redis import VISIBILITY_TIMEOUT as REDIS_VISIBILITY_TIMEOUT
from sa_inbox.chaos.drivers.sqs import VISIBILITY_TIMEOUT as SQS_VISIBILITY_TIMEOUT
from sa_inbox.chaos.run import (
    ChaosConfig,
    Producer,
    consume_until_settled,
    consumer_configs,
    prepared_engine,
)
from sa_inbox.chaos.supervisor import Supervisor
from sa_inbox.chaos.tally import LogFollower
from sa_inbox.chaos.workload import PREFIX, make_plan
from sa_inbox.demo.app import DemoSchema
from sa_inbox.demo.stream import generate_stream
from tests.conftest import backend_url, broker_url
from tests.support.cli import run_cli

pytestmark = [pytest.mark.backend, pytest.mark.slow]

SEED, MESSAGES, POISON, DUPLICATES = 7, 300, 3, 0.1
#: Share of messages crashing their consumer on their first delivery, after the commit and
#: (another share) in the handler: with this seed, 3 and 4 of the 300 payments.
CRASHES = 0.01
#: Payments that SIGKILL their consumer on their first delivery (after the commit, in the
#: handler), at most one crash each.
PLAN = make_plan(MESSAGES, seed=SEED, duplicates=DUPLICATES, poison=POISON)
CHOSEN = {
    kind: sum(crash_chosen(SEED, i, kind, CRASHES) for i in PLAN.payments)
    for kind in (AFTER_COMMIT, IN_HANDLER)
}
#: Kills after which the run's killer stops.
MAX_KILLS = 5
#: Deliveries before a dead letter: above every delivery a kill or a crash can end.
MAX_DELIVERIES = MAX_KILLS + sum(CHOSEN.values()) + 1
#: Seconds between two deliveries of a message whose consumer failed it or died, at most:
#: the chaos drivers' Redis and SQS visibility timeouts and JetStream AckWait (RabbitMQ: at
#: once).
REDELIVERY_WAIT = max(REDIS_VISIBILITY_TIMEOUT, CHAOS_ACK_WAIT, SQS_VISIBILITY_TIMEOUT)
#: Seconds a consumer process may take to start on a loaded machine (a Python start with
#: the broker's client and SQLAlchemy imported): each kill and each crash costs one.
CONSUMER_START = 10
#: Seconds a run may take before the CLI fails it (the poison's deliveries are spaced by
#: REDELIVERY_WAIT, and each kill or crash restarts a consumer); the test's own limit is a
#: bit longer.
RUN_TIMEOUT = (
    60 + MAX_DELIVERIES * REDELIVERY_WAIT + (MAX_KILLS + sum(CHOSEN.values())) * CONSUMER_START
)
BROKERS = {"rabbitmq": "amqp", "redis": "redis", "nats": "nats", "sqs": "sqs"}


def live_broker(broker: str) -> str:
    """The broker's URL (skips locally, fails in CI, when it is not set)."""
    return broker_url(broker)


def remove(driver: ChaosDriver, broker: str, name: str) -> None:
    """Delete what the run created on the broker: the queue / stream ``name`` and its
    dead-letter path (:class:`ChaosDriver` has no such method: ``driver.delete(name)`` where
    a driver has one, else by the broker's client, every name starting with ``name``)."""
    delete = getattr(driver, "delete", None)
    if callable(delete):
        delete(name)
        return
    url = broker_url(broker)
    if broker == "redis":
        import redis

        client = redis.Redis.from_url(url)
        for key in client.scan_iter(match=f"{name}*"):
            client.delete(key)
        client.close()
    elif broker == "nats":
        asyncio.run(_delete_streams(url, name))
    else:
        import pika

        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        for queue in (name, f"{name}.dead-letter", f"{name}.dlq"):
            channel.queue_delete(queue)
        connection.close()


async def _delete_streams(url: str, name: str) -> None:
    import nats

    client = await nats.connect(url)
    try:
        js = client.jetstream()
        for stream in await js.streams_info():
            if stream.config.name and stream.config.name.startswith(name):
                await js.delete_stream(stream.config.name)
    finally:
        await client.close()


def queue_name() -> str:
    """A unique queue / stream name, prefixed for this helper's NATS account when set."""
    prefix = os.environ.get("SA_INBOX_TEST_NATS_PREFIX")
    name = f"sa-inbox-chaos-{uuid.uuid4().hex[:10]}"
    return f"{prefix}-{name}" if prefix else name


@pytest.fixture
def driver(request: pytest.FixtureRequest) -> Iterator[ChaosDriver]:
    """The test's own driver on the live broker (to read its state after the run)."""
    driver = driver_for(live_broker(request.param))
    yield driver
    driver.close()


@pytest.fixture
def name(driver: ChaosDriver, request: pytest.FixtureRequest) -> Iterator[str]:
    """The run's queue / stream name, deleted from the broker after the test."""
    name = queue_name()
    yield name
    remove(driver, request.node.callspec.params["driver"], name)


def run_with_json(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """Run ``sa-inbox ARGS --json FILE``; the exit code, JSON and output."""
    report = tmp_path / "result.json"
    completed = run_cli(*args, "--json", str(report), timeout=RUN_TIMEOUT + 30, traceback=True)
    output = completed.stdout + completed.stderr
    assert report.exists(), output
    return completed.returncode, json.loads(report.read_text()), output


def assert_applied_once(url: str, prefix: str, expected: dict[str, int], unique: int) -> None:
    """The database itself: one ledger row and one claim per payment, none twice, balances."""
    schema = DemoSchema(prefix)
    engine = sa.create_engine(url)
    try:
        state = schema.read_state(engine)
        with engine.connect() as conn:
            twice = conn.execute(
                sa.select(schema.ledger.c.message_id)
                .group_by(schema.ledger.c.message_id)
                .having(sa.func.count() > 1)
            ).all()
        schema.metadata.drop_all(engine)
    finally:
        engine.dispose()
    assert twice == []
    assert state.ledger_rows == state.ledger_messages == state.inbox_rows == unique
    assert state.balances == expected


#: Every broker on PostgreSQL; MariaDB once (the database's side is the same whatever the
#: broker, and each run costs seconds of process starts and redelivery waits).
RUNS = [(broker, "postgresql") for broker in BROKERS] + [("rabbitmq", "mysql")]


@pytest.mark.parametrize(("driver", "database"), RUNS, indirect=["driver"])
def test_chaos_run_applies_every_payment_once_through_kills(
    driver: ChaosDriver, name: str, request: pytest.FixtureRequest, database: str, tmp_path: Path
) -> None:
    broker = request.node.callspec.params["driver"]
    url = backend_url(database, tmp_path)
    code, result, output = run_with_json(
        tmp_path,
        "chaos",
        *("--broker", broker_url(broker), "--url", url, "--name", name),
        *("--messages", str(MESSAGES), "--consumers", "3", "--kill-every", "0.5"),
        *("--max-kills", str(MAX_KILLS), "--max-deliveries", str(MAX_DELIVERIES)),
        *("--poison", str(POISON), "--duplicates", str(DUPLICATES)),
        *("--crash-after-commit", str(CRASHES), "--crash-in-handler", str(CRASHES)),
        *("--seed", str(SEED), "--timeout", str(RUN_TIMEOUT)),
    )
    plan, chosen = PLAN, CHOSEN

    assert code == 0, output
    assert result["ok"] is True and all(result["checks"].values()), output
    # The chaos happened: random kills, crashes between commit and ack, redeliveries,
    # producer retries, poison retried then dead-lettered.
    assert 0 < result["kills"] <= MAX_KILLS, output
    # Killed after the commit, before the ack: redelivered, acked as a duplicate. Killed in
    # the handler, before the commit: rolled back, redelivered, applied once.
    # (A chosen payment does not crash if its first delivery died with a killed consumer.)
    assert 0 < result["crashes_after_commit"] <= chosen[AFTER_COMMIT], output
    assert 0 < result["crashes_in_handler"] <= chosen[IN_HANDLER], output
    assert result["redeliveries"] > 0
    assert result["duplicate_publishes"] == plan.duplicate_publishes > 0
    # Each crash after a commit comes back from the broker and is acked as a duplicate.
    assert result["duplicates_skipped"] > 0
    if broker != "nats":  # JetStream itself drops a publish whose Nats-Msg-Id it has seen
        assert result["duplicates_skipped"] >= plan.duplicate_publishes
    assert result["retries"] > 0  # poison retried before its dead letter
    # The business state, read here: every payment once, balances as published.
    assert_applied_once(url, PREFIX, plan.expected_balances(), MESSAGES)
    # The broker's state, read here: nothing unsettled, the dead letters are the poison (one
    # may be there twice: its consumer killed between the dead-letter publish and the ack).
    assert driver.unsettled(name) == 0
    assert sorted(set(driver.dead_letters(name))) == sorted(plan.poison_ids)


#: Payments of the restart test, and the seconds its run may take: a consumer process's start
#: and a few redelivery waits on a loaded machine (the run without the fix loops until then).
RESTART_MESSAGES, RESTART_TIMEOUT = 20, 120.0


@pytest.mark.parametrize("driver", list(BROKERS), indirect=True)
def test_consumers_restarted_for_what_is_left_settle_it_before_the_next_look(
    driver: ChaosDriver, name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Redeliveries skipped as duplicates are final settlements too, so the logs can show one
    per publish while messages are still on the broker (SQS's visibility timeout and a
    crash after a commit both redeliver). The run then stops the consumers, finds messages
    left and starts them again: it must wait for them to settle what is left, not stop
    them again at once because the logs already show one final settlement per publish (a
    loop that SIGTERMed every restarted consumer while it was still starting, until the
    timeout)."""
    broker = request.node.callspec.params["driver"]
    url = backend_url("sqlite", tmp_path)
    config = ChaosConfig(
        broker=broker_url(broker), url=url, messages=RESTART_MESSAGES, consumers=1,
        kill_every=0, duplicates=0, seed=SEED, timeout=RESTART_TIMEOUT, name=name,
    )  # fmt: skip
    plan = make_plan(RESTART_MESSAGES, seed=SEED, duplicates=0)
    logs = tmp_path / "logs"
    logs.mkdir()
    # An earlier generation of consumers' log: a redelivery skipped per publish.
    with (logs / "consumer-9-1.jsonl").open("w") as log:
        for message_id, body in plan.publishes:
            delivery = Delivery(message_id=message_id, body=body, delivery_count=2)
            log.write(record_line(Settlement(Disposition.DUPLICATE, delivery)))
    engine = prepared_engine(url, DemoSchema(PREFIX), plan)
    engine.dispose()
    driver.prepare(name, max_deliveries=5)
    producer = Producer(config.broker, name, plan)
    producer.start()
    producer.join()
    assert producer.error is None and driver.unsettled(name) == RESTART_MESSAGES
    supervisor = Supervisor(consumer_configs(config), kill_every=0, seed=SEED, log_dir=logs)
    supervisor.start()
    try:
        consume_until_settled(config, driver, supervisor, producer, LogFollower(logs))
    finally:
        supervisor.stop()

    assert driver.unsettled(name) == 0
    assert_applied_once(url, PREFIX, plan.expected_balances(), RESTART_MESSAGES)


def first_live_broker() -> str:
    """The demo needs one live broker (RabbitMQ); the drivers are proven each by the chaos
    test above."""
    return "rabbitmq"


def test_demo_on_a_live_broker(tmp_path: Path) -> None:
    broker = first_live_broker()
    url = backend_url("postgresql", tmp_path)
    code, result, output = run_with_json(
        tmp_path,
        "demo",
        *("--broker", broker_url(broker), "--url", url),
        *("--messages", "200", "--workers", "3", "--seed", "3", "--crash-rate", "0.03"),
    )
    stream = generate_stream(200, seed=3, duplicate_rate=0.1, concurrent_rate=0, crash_rate=0)

    assert code == 0, output
    assert result["ok"] is True, output
    assert result["published"] == len(stream.deliveries)
    assert result["duplicate_publishes"] == stream.reasons["producer-retry"] > 0
    # The demo's crashes are real SIGKILLs after the commit; the broker redelivers them.
    assert result["crashes_after_commit"] > 0 and result["kills"] == 0
    assert result["redeliveries"] > 0
    assert_applied_once(url, "demo_", stream.expected_balances(), 200)
    driver = driver_for(broker_url(broker))
    try:
        assert driver.unsettled(result["name"]) == 0
        assert driver.dead_letters(result["name"]) == []
    finally:
        remove(driver, broker, result["name"])
        driver.close()


def run_errors(*args: str) -> tuple[int, str]:
    """Run ``sa-inbox ARGS``: the exit code and stderr."""
    completed = run_cli(*args, timeout=60, traceback=True)
    return completed.returncode, completed.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["chaos", "--broker", "http://x", "--url", "sqlite://"], "expected a broker URL"),
        (["demo", "--broker", "mqtt://x"], "expected a broker URL"),
        (["demo", "--broker", "redis://127.0.0.1:1/0", "--no-inbox"], "--no-inbox runs only"),
        (
            [
                "chaos",
                "--broker",
                "kafka://127.0.0.1:1",
                "--url",
                "sqlite://",
                "--crash-in-handler",
                "0.01",
            ],
            "Kafka keeps no delivery count",
        ),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    code, stderr = run_errors(*args)
    assert code == 2, stderr
    assert message in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    "unreachable", ["redis://127.0.0.1:1/0", "nats://127.0.0.1:1", "amqp://127.0.0.1:1/"]
)
def test_an_unreachable_broker_is_one_error_line(tmp_path: Path, unreachable: str) -> None:
    """Fails at once (exit 3) with one line: a NATS connection used to retry for minutes,
    printing a traceback per attempt."""
    code, stderr = run_errors(
        "chaos", "--broker", unreachable, "--url", f"sqlite:///{tmp_path}/c.db"
    )
    assert code == 3, stderr
    assert stderr.startswith("Error: the chaos run could not finish: ")
    assert stderr.count("\n") == 1 and "Traceback" not in stderr


def test_a_missing_broker_client_names_its_extra(tmp_path: Path) -> None:
    (tmp_path / "pika.py").write_text("raise ImportError('No module named pika (hidden)')\n")
    database = f"sqlite:///{tmp_path}/c.db"
    completed = run_cli(
        "chaos", "--broker", "amqp://x", "--url", database, timeout=60, path=[tmp_path]
    )
    assert completed.returncode == 3, completed.stderr
    assert "pip install 'sa-inbox[rabbitmq]'" in completed.stderr
    assert "Traceback" not in completed.stderr
