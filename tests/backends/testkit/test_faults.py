"""The fault helpers of :mod:`sa_inbox.testing.faults` against the live brokers and
databases, around the adapters as production runs them: a duplicate publish whose two
copies are held together at their claims, a consumer process killed after its commit, a
stall past Redis' visibility timeout, and a database outage through the proxy. Each test
reads the ledger (business state) and the settlements."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox.brokers import DeliveryOptions, Disposition, Settlement
from sa_inbox.testing import Message
from sa_inbox.testing.faults import (
    claims_held_together,
    clear_faults,
    publish_twice,
    stall_before_commit,
)
from sa_inbox.testing.proxy import DatabaseProxy
from tests.backends.testkit.conftest import ROOT
from tests.conftest import backend_url, broker_url, importorskip
from tests.support import kit_app
from tests.support.waiting import eventually

pika = importorskip("pika", "rabbitmq")
redis = importorskip("redis", "redis")

from sa_inbox.brokers.rabbitmq import Consumer, declare_queue  # noqa: E402
from sa_inbox.brokers.redis import Consumer as RedisConsumer  # noqa: E402

pytestmark = pytest.mark.backend


@pytest.fixture
def Session(url: str) -> Iterator[Any]:
    """The application's tables and session factory on the database under test."""
    yield kit_app.setup(url)
    kit_app.teardown()


@pytest.fixture
def amqp_url() -> str:
    return broker_url("rabbitmq")


@pytest.fixture
def queue(amqp_url: str) -> Iterator[str]:
    """A fresh quorum queue, declared as the docs say; deleted after."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    name = f"kit-{uuid.uuid4().hex[:12]}"
    dead = declare_queue(channel, name)
    yield name
    channel.queue_delete(name)
    channel.queue_delete(dead)
    connection.close()


def ledger(session_factory: Any, message: Message) -> int:
    with session_factory() as session:
        return kit_app.ledger_rows(session, message)


def consume(
    consumers: int,
    amqp_url: str,
    queue: str,
    session_factory: Any,
    until: Callable[[list[Settlement]], bool],
) -> list[Settlement]:
    """Run ``consumers`` BlockingConsumers (prefetch 1) in threads until ``until`` holds of
    their settlements; stop them."""
    settled: list[Settlement] = []
    running = [
        Consumer(
            amqp_url,
            queue,
            session_factory=session_factory,
            inbox=kit_app.inbox,
            consumer_name=kit_app.CONSUMER,
            handler=kit_app.apply,
            options=DeliveryOptions(on_settled=settled.append),
            prefetch=1,
        )
        for _ in range(consumers)
    ]
    threads = [threading.Thread(target=c.run, daemon=True) for c in running]
    for thread in threads:
        thread.start()
    try:
        eventually(lambda: until(settled))
    finally:
        for consumer in running:
            consumer.stop()
        for thread in threads:
            thread.join(timeout=60)
    return settled


def publish(amqp_url: str, queue: str, message: Message) -> None:
    publish_twice(amqp_url, queue, message, copies=1)


def test_a_duplicate_publish_held_together_at_the_claims_is_applied_once(
    url: str, Session: Any, amqp_url: str, queue: str
) -> None:
    message = kit_app.payment(str(uuid.uuid4()))
    with claims_held_together(2) as gate:
        publish_twice(amqp_url, queue, message)
        settled = consume(2, amqp_url, queue, Session, lambda s: len(s) == 2)
    assert gate.together == 2, "both copies' claims were held and released together"
    assert sorted(s.disposition.value for s in settled) == ["duplicate", "processed"]
    assert ledger(Session, message) == 1


def test_a_consumer_killed_after_its_commit_leaves_a_duplicate_to_the_next(
    url: str, Session: Any, amqp_url: str, queue: str
) -> None:
    message = kit_app.payment(str(uuid.uuid4()))
    publish(amqp_url, queue, message)
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "sa_inbox.testing.inject",
            "--crash-after-commit",
            "-m",
            "tests.support.kit_consumer",
            url,
            amqp_url,
            queue,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert "SIGKILL after a commit, before the ack" in child.stderr
    assert child.stdout == "", "killed before its settlement"
    assert ledger(Session, message) == 1, "the commit happened before the kill"
    (settled,) = consume(1, amqp_url, queue, Session, lambda s: len(s) == 1)
    assert (settled.disposition, settled.delivery.delivery_count) == (Disposition.DUPLICATE, 2)
    assert ledger(Session, message) == 1


@pytest.fixture
def redis_url() -> str:
    return broker_url("redis")


def test_a_stall_past_the_visibility_timeout_gives_the_message_to_another_consumer(
    url: str, Session: Any, redis_url: str
) -> None:
    message = kit_app.payment(str(uuid.uuid4()))
    stream = f"kit-{uuid.uuid4().hex[:12]}"
    client = redis.Redis.from_url(redis_url)
    visibility, stall = 0.5, 3.0
    settled: dict[str, list[Settlement]] = {"a": [], "b": []}

    def member(name: str) -> RedisConsumer:
        return RedisConsumer(
            client,
            stream,
            group="billing",
            member=name,
            session_factory=Session,
            inbox=kit_app.inbox,
            handler=kit_app.apply,
            visibility_timeout=visibility,
            block_timeout=0.1,
            options=DeliveryOptions(on_settled=settled[name].append),
        )

    first, second = member("a"), member("b")
    first.ensure_group()
    publish_twice(redis_url, stream, message, copies=1)
    stall_before_commit(stall)
    try:
        holder = threading.Thread(target=first.poll, daemon=True)
        holder.start()
        eventually(lambda: client.xpending(stream, "billing")["pending"] == 1)
        taken = time.monotonic()
        eventually(lambda: bool(second.poll()))
        holder.join(timeout=60)
    finally:
        clear_faults()
        client.delete(stream)
        client.close()
    assert time.monotonic() - taken >= visibility, "taken over only once invisible no more"
    (a,), (b,) = settled["a"], settled["b"]
    assert (a.disposition, a.delivery.delivery_count) == (Disposition.PROCESSED, 1)
    assert (b.disposition, b.delivery.delivery_count) == (Disposition.DUPLICATE, 2)
    assert ledger(Session, message) == 1


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_database_outage_through_the_proxy_costs_no_message(
    backend: str,
    tmp_path: object,
    amqp_url: str,
    queue: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = backend_url(backend, tmp_path)
    direct = kit_app.setup(url)
    messages = [kit_app.payment(str(uuid.uuid4())) for _ in range(6)]
    outage = 2.0
    caplog.set_level(logging.INFO, logger="sa_inbox")
    with DatabaseProxy(url) as proxy:
        engine = sa.create_engine(proxy.url, pool_pre_ping=False)
        Session = sessionmaker(engine)
        for message in messages[:3]:
            publish(amqp_url, queue, message)

        def publish_during_outage(settled: list[Settlement]) -> bool:
            if len(settled) == 3 and proxy.resets == 0:
                with proxy.down():
                    for message in messages[3:]:
                        publish(amqp_url, queue, message)
                    time.sleep(outage)
            return len(settled) >= 6

        settled = consume(1, amqp_url, queue, Session, publish_during_outage)
        engine.dispose()
    assert proxy.resets >= 1, "the consumer's pooled connection was cut"
    assert [s.disposition for s in settled] == [Disposition.PROCESSED] * 6
    assert [ledger(direct, m) for m in messages] == [1] * 6
    events = [getattr(r, "event", None) for r in caplog.records]
    assert "inbox.database.unavailable" in events and "inbox.database.available" in events
    kit_app.teardown()
