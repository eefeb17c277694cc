"""The Kafka consumers through a database outage and a broker killed and restarted, on
servers of their own (PostgreSQL and Tansu, ``scripts/servers.sh start DIR postgresql
kafka``): this package's xdist group runs them one after the other.

Tansu keeps its topics, groups and offsets in memory: a restarted broker has none of them,
so the broker test creates its topic again after the restart, as an operator would.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox.brokers import Disposition
from tests.backends.brokers.kafka_support import (
    FAST_SYNC,
    amounts,
    attempts,
    bootstrap,
    create_topic,
    kafka_app,
    ledger,
    publish,
)
from tests.backends.brokers.payments import pay
from tests.backends.brokers.test_kafka import Collected, run_sync_until, sync_consumer
from tests.support.app import App
from tests.support.servers import OwnServers, own_servers, servers_sh

pytestmark = [pytest.mark.backend, pytest.mark.slow]

#: Seconds a killed server stays down.
DOWN = 3.0
SETTLE_S = 90.0


@pytest.fixture(scope="module")
def kafka_servers() -> Iterator[OwnServers]:
    with own_servers("postgresql", "kafka") as servers:
        yield servers


@pytest.fixture
def pg_app(kafka_servers: OwnServers) -> Iterator[App]:
    engine = sa.create_engine(kafka_servers.env["SA_INBOX_TEST_POSTGRESQL_URL"])
    app = kafka_app(engine)
    yield app
    app.drop()
    engine.dispose()


def restart_later(servers: OwnServers, name: str) -> threading.Thread:
    def restart() -> None:
        time.sleep(DOWN)
        done = servers_sh("restart", str(servers.directory), name)
        assert done.returncode == 0, done.stderr

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    return thread


def test_a_database_outage_mid_poll_costs_no_attempt(
    kafka_servers: OwnServers, pg_app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL SIGKILLed while a poll's handlers run: the poll is held, the database
    probed with back-off, and the same poll runs again once it answers; every record is
    applied once, none counted as a failed attempt, none retried."""
    servers = bootstrap(kafka_servers.env["SA_INBOX_TEST_KAFKA_URL"])
    topic = create_topic(servers)
    ids = [f"o{i}" for i in range(10)]
    publish(servers, topic, amounts(ids))
    killed = threading.Event()
    restarts: list[threading.Thread] = []
    paying = pay(pg_app)

    @functools.wraps(paying)
    def handler(session: Any, delivery: Any) -> None:
        paying(session, delivery)
        if delivery.message_id == "o3" and not killed.is_set():
            killed.set()
            done = servers_sh("kill", str(kafka_servers.directory), "postgresql")
            assert done.returncode == 0, done.stderr
            restarts.append(restart_later(kafka_servers, "postgresql"))

    seen = Collected()
    consumer = sync_consumer(servers, topic, pg_app, handler=handler, on_settled=seen)
    with caplog.at_level(logging.INFO, logger="sa_inbox.outage"):
        run_sync_until(consumer, lambda: seen.final() >= 10, SETTLE_S)
    for thread in restarts:
        thread.join(60)
    assert killed.is_set()
    assert ledger(pg_app) == sorted(ids)
    assert attempts(pg_app) == {}, "the outage cost no attempt"
    assert seen.count(Disposition.RETRY) == 0
    assert {s.delivery.delivery_count for s in seen.items} == {1}
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events.count("inbox.database.unavailable") == 1
    assert events.count("inbox.database.available") == 1


def test_the_broker_killed_and_restarted_the_consumer_goes_on(
    kafka_servers: OwnServers, pg_app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """Tansu SIGKILLed under a running consumer, restarted (empty: memory storage), the
    topic made again and published to: the same consumer, never stopped, applies the new
    records once, after one WARNING for the lost connection."""
    servers = bootstrap(kafka_servers.env["SA_INBOX_TEST_KAFKA_URL"])
    topic = create_topic(servers)
    before = [f"b{i}" for i in range(5)]
    after = [f"a{i}" for i in range(5)]
    publish(servers, topic, amounts(before))
    seen = Collected()
    consumer = sync_consumer(
        servers, topic, pg_app, on_settled=seen,
        config={**FAST_SYNC, "reconnect.backoff.max.ms": 1000},
    )  # fmt: skip
    errors: list[BaseException] = []

    def target() -> None:
        try:
            consumer.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    with caplog.at_level(logging.INFO, logger="sa_inbox.brokers"):
        thread.start()
        try:
            deadline = time.monotonic() + SETTLE_S
            while seen.final() < 5:
                assert time.monotonic() < deadline and not errors, (seen.items, errors)
                time.sleep(0.1)
            time.sleep(1.0)  # the offsets committed
            done = servers_sh("kill", str(kafka_servers.directory), "kafka")
            assert done.returncode == 0, done.stderr
            time.sleep(DOWN)
            done = servers_sh("restart", str(kafka_servers.directory), "kafka")
            assert done.returncode == 0, done.stderr
            create_topic(servers, name=topic)  # memory storage: the topic is gone
            publish(servers, topic, amounts(after))
            while seen.final() < 10:
                assert time.monotonic() < deadline and not errors, (seen.items, errors)
                time.sleep(0.1)
        finally:
            consumer.stop()
            thread.join(60)
    assert not errors
    assert ledger(pg_app) == sorted(before + after)
    assert seen.count(Disposition.PROCESSED) == 10
    lost = [r for r in caplog.records if getattr(r, "action", None) == "connection_lost"]
    assert len(lost) == 1, [r.getMessage() for r in lost]
