"""The Kafka adapter against the live broker (Tansu, a Kafka-compatible broker: see
``scripts/servers.sh``), on every database: sync on SQLite, PostgreSQL and MariaDB, asyncio
on aiosqlite, asyncpg and aiomysql.

Each test uses topics of its own (a uuid in the name). Business state (ledger, balances,
claims, the adapter's attempts and offsets) and broker state (the group's committed
offsets, the dead-letter topic) are both asserted.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

from sa_inbox import ConfigurationError
from sa_inbox.brokers import DeadLetterReason, Delivery, Disposition, Settlement
from sa_inbox.brokers.kafka import AsyncConsumer, AsyncPublisher, Consumer, Publisher
from sa_inbox.exc import (
    AsyncHandlerError,
    HandlerEndedTransaction,
    InvalidArgument,
    InvalidSessionFactory,
    MissingKeyHeader,
)
from sa_inbox.outbox.message import OutboxMessage
from sa_inbox.outbox.publisher import async_publisher_for, broker_unavailable, publisher_for
from tests.backends.brokers.kafka_support import (
    FAST_ASYNC,
    FAST_SYNC,
    amounts,
    attempts,
    committed,
    create_topic,
    dead_letters,
    kafka_app,
    kafka_tables,
    ledger,
    publish,
    stored_offsets,
)
from tests.backends.brokers.payments import pay, pay_async
from tests.support.app import CONSUMER, App
from tests.support.options import with_options

pytestmark = pytest.mark.backend

#: Seconds a test waits for its records to be settled (rebalances on Tansu take ~3 s each).
SETTLE_S = 60.0


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture
def sync_app(engine: sa.Engine) -> Iterator[App]:
    app = kafka_app(engine)
    yield app
    app.drop()


# -- helpers -----------------------------------------------------------------------------


class Collected:
    """Settlements as ``on_settled`` reports them (thread-safe)."""

    def __init__(self) -> None:
        self.items: list[Settlement] = []
        self.lock = threading.Lock()

    def __call__(self, settlement: Settlement) -> None:
        with self.lock:
            self.items.append(settlement)

    def count(self, disposition: Disposition | None = None) -> int:
        with self.lock:
            return sum(1 for s in self.items if disposition in (None, s.disposition))

    def final(self) -> int:
        """Settlements that end a record: all but retries."""
        return self.count() - self.count(Disposition.RETRY)


def run_sync_until(consumer: Consumer, done: Callable[[], bool], seconds: float = SETTLE_S) -> None:
    """Run ``consumer`` in a thread until ``done()``; then stop it and re-raise its error."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            consumer.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + seconds
    try:
        while not done() and not errors:
            assert time.monotonic() < deadline, "not settled in time"
            time.sleep(0.1)
    finally:
        consumer.stop()
        thread.join(60)
    assert not thread.is_alive()
    if errors:
        raise errors[0]


async def run_async_until(
    consumer: AsyncConsumer, done: Callable[[], bool], seconds: float = SETTLE_S
) -> None:
    task = asyncio.create_task(consumer.run())
    deadline = time.monotonic() + seconds
    try:
        while not done() and not task.done():
            assert time.monotonic() < deadline, "not settled in time"
            await asyncio.sleep(0.1)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 60)


def sync_consumer(servers: str, topic: str, app: App, **kw: Any) -> Consumer:
    options: dict[str, Any] = {
        "bootstrap_servers": servers,
        "group_id": f"group-{topic}",
        "consumer_name": CONSUMER,
        "session_factory": app.Session,
        "inbox": app.inbox,
        "handler": pay(app),
        "poll_timeout": 0.2,
        "config": FAST_SYNC,
    }
    options.update(kw)
    return Consumer(topic, **with_options(options))


def async_consumer(servers: str, topic: str, app: App, url: str, **kw: Any) -> AsyncConsumer:
    """An AsyncConsumer on a NullPool engine (made outside the loop that runs it)."""
    engine = create_async_engine(url, poolclass=sa.NullPool)
    options: dict[str, Any] = {
        "bootstrap_servers": servers,
        "group_id": f"group-{topic}",
        "consumer_name": CONSUMER,
        "session_factory": async_sessionmaker(engine),
        "inbox": app.inbox,
        "handler": pay_async(app),
        "poll_timeout": 0.2,
        "config": FAST_ASYNC,
    }
    options.update(kw)
    return AsyncConsumer(topic, **with_options(options))


def balance(app: App, account: int = 1) -> Decimal:
    with app.engine.connect() as conn:
        value = conn.execute(
            sa.select(app.accounts.c.balance).where(app.accounts.c.id == account)
        ).scalar_one()
    return Decimal(value)


# -- duplicates --------------------------------------------------------------------------


def test_sync_duplicate_publishes_are_applied_once(servers: str, sync_app: App) -> None:
    topic = create_topic(servers, partitions=2)
    ids = [f"m{i}" for i in range(20)]
    publish(servers, topic, amounts(ids + ids[:7]))  # 7 producer retries
    seen = Collected()
    consumer = sync_consumer(servers, topic, sync_app, on_settled=seen)
    run_sync_until(consumer, lambda: seen.final() >= 27)
    assert ledger(sync_app) == sorted(ids)
    assert balance(sync_app) == Decimal(20)
    assert seen.count(Disposition.PROCESSED) == 20
    assert seen.count(Disposition.DUPLICATE) == 7
    offsets = committed(servers, f"group-{topic}", topic, 2)
    assert sum(offsets.values()) == 27, offsets  # past every record


def test_async_duplicate_publishes_are_applied_once(
    servers: str, aio_app: App, aio_url: str
) -> None:
    topic = create_topic(servers, partitions=2)
    ids = [f"m{i}" for i in range(20)]
    publish(servers, topic, amounts(ids + ids[:7]))
    seen = Collected()
    consumer = async_consumer(servers, topic, aio_app, aio_url, on_settled=seen)
    asyncio.run(run_async_until(consumer, lambda: seen.final() >= 27))
    assert ledger(aio_app) == sorted(ids)
    assert balance(aio_app) == Decimal(20)
    assert (seen.count(Disposition.PROCESSED), seen.count(Disposition.DUPLICATE)) == (20, 7)
    offsets = committed(servers, f"group-{topic}", topic, 2)
    assert sum(offsets.values()) == 27, offsets


# -- poison: dead-lettered at the limit, its partition goes on ---------------------------


def test_poison_goes_to_the_dead_letter_topic_without_stopping_its_partition(
    servers: str, sync_app: App
) -> None:
    topic = create_topic(servers, partitions=1)
    publish(servers, topic, amounts(["a", "poison", "b", "c"]))
    seen = Collected()
    consumer = sync_consumer(
        servers, topic, sync_app, handler=pay(sync_app, poison="poison"), on_settled=seen,
        max_deliveries=3,
    )  # fmt: skip
    run_sync_until(consumer, lambda: seen.final() >= 4 and committed_past(servers, topic, 4))
    assert ledger(sync_app) == ["a", "b", "c"], "the records behind it were processed"
    poison = [s for s in seen.items if s.delivery.message_id == "poison"]
    assert [(s.disposition, s.delivery.delivery_count) for s in poison] == [
        (Disposition.RETRY, 1),
        (Disposition.RETRY, 2),
        (Disposition.DEAD_LETTERED, 3),
    ]
    assert poison[-1].reason is DeadLetterReason.DELIVERY_LIMIT
    (dead,) = dead_letters(servers, topic, 1)
    assert dead["sa-inbox-message-id"] == "poison"
    assert dead["sa-inbox-dead-letter-reason"] == "delivery_limit"
    assert (dead["sa-inbox-offset"], dead["value"]) == ("1", "1.00")
    assert attempts(sync_app) == {}, "counted in the database until the dead letter took them"
    assert committed(servers, f"group-{topic}", topic, 1) == {0: 4}


def test_a_keyless_record_behind_a_retry_is_dead_lettered_once(servers: str, sync_app: App) -> None:
    """The partition is sought back to the record to retry, so the keyless record behind it
    is fetched again: its dead letter is published, and reported, once."""
    topic = create_topic(servers, partitions=1)
    publish(servers, topic, [("poison", "1.00"), (None, "2.00"), ("b", "3.00")])
    seen = Collected()
    consumer = sync_consumer(
        servers, topic, sync_app, handler=pay(sync_app, poison="poison"), on_settled=seen,
        max_deliveries=3,
    )  # fmt: skip
    run_sync_until(consumer, lambda: seen.final() >= 3 and committed_past(servers, topic, 3))
    keyless = [s for s in seen.items if s.delivery.message_id is None]
    assert [(s.disposition, s.reason) for s in keyless] == [
        (Disposition.DEAD_LETTERED, DeadLetterReason.MISSING_MESSAGE_ID)
    ]
    dead = dead_letters(servers, topic, 3, seconds=5)
    assert sorted(d["sa-inbox-dead-letter-reason"] for d in dead) == [
        "delivery_limit",
        "missing_message_id",
    ]
    assert ledger(sync_app) == ["b"], "applied once, a duplicate when fetched again"


def test_a_dead_letter_republished_after_the_fix_is_processed(servers: str, sync_app: App) -> None:
    """A replay: the dead-lettered record published again (the same id) once its handler is
    fixed starts at delivery 1, and is applied once."""
    topic = create_topic(servers, partitions=1)
    publish(servers, topic, amounts(["a", "poison"]))
    seen = Collected()
    broken = sync_consumer(
        servers, topic, sync_app, handler=pay(sync_app, poison="poison"), on_settled=seen,
        max_deliveries=2,
    )  # fmt: skip
    run_sync_until(broken, lambda: seen.count(Disposition.DEAD_LETTERED) == 1)
    assert ledger(sync_app) == ["a"] and attempts(sync_app) == {}
    publish(servers, topic, amounts(["poison"]))
    fixed = Collected()
    consumer = sync_consumer(servers, topic, sync_app, on_settled=fixed)
    run_sync_until(consumer, lambda: fixed.count(Disposition.PROCESSED) == 1)
    assert [(s.delivery.message_id, s.delivery.delivery_count) for s in fixed.items] == [
        ("poison", 1)
    ]
    assert ledger(sync_app) == ["a", "poison"] and balance(sync_app) == Decimal(2)


def committed_past(servers: str, topic: str, offset: int) -> bool:
    return committed(servers, f"group-{topic}", topic, 1).get(0, -1) >= offset


def test_async_poison_is_dead_lettered_and_the_rest_applied(
    servers: str, aio_app: App, aio_url: str
) -> None:
    topic = create_topic(servers, partitions=1)
    publish(servers, topic, amounts(["a", "poison", "b"]))
    seen = Collected()
    consumer = async_consumer(
        servers, topic, aio_app, aio_url, handler=pay_async(aio_app, poison="poison"),
        on_settled=seen, max_deliveries=2,
    )  # fmt: skip
    asyncio.run(run_async_until(consumer, lambda: seen.final() >= 3))
    assert ledger(aio_app) == ["a", "b"]
    assert seen.count(Disposition.DEAD_LETTERED) == 1
    assert dead_letters(servers, topic, 1)[0]["sa-inbox-message-id"] == "poison"
    assert attempts(aio_app) == {}


# -- a handler that ends the poll's transaction -----------------------------------------


def ending(app: App, bad: str, end: str) -> Callable[[Session, Delivery], None]:
    """:func:`pay`, whose record ``bad`` then commits or rolls back the poll's transaction."""
    apply = pay(app)

    def handler(session: Session, delivery: Delivery) -> None:
        apply(session, delivery)
        if delivery.message_id == bad:
            getattr(session, end)()

    return handler


@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_a_handler_that_ends_the_polls_transaction_fails_alone(
    servers: str, sync_app: App, end: str
) -> None:
    topic = create_topic(servers, partitions=1)
    publish(servers, topic, amounts(["a", "bad", "b", "c"]))
    seen = Collected()
    consumer = sync_consumer(
        servers, topic, sync_app, handler=ending(sync_app, "bad", end), on_settled=seen,
        max_deliveries=2, offsets="database",
    )  # fmt: skip
    run_sync_until(consumer, lambda: seen.final() >= 4)
    assert ledger(sync_app) == ["a", "b", "c"] and balance(sync_app) == Decimal(3)
    bad = [s for s in seen.items if s.delivery.message_id == "bad"]
    assert [(s.disposition, s.delivery.delivery_count) for s in bad] == [
        (Disposition.RETRY, 1),
        (Disposition.DEAD_LETTERED, 2),
    ]
    assert all(isinstance(s.error, HandlerEndedTransaction) for s in bad)
    processed = [
        s.delivery.message_id for s in seen.items if s.disposition is Disposition.PROCESSED
    ]
    assert sorted(processed) == ["a", "b", "c"], (
        "once each (b and c again after the retry: duplicates)"
    )
    assert dead_letters(servers, topic, 1)[0]["sa-inbox-message-id"] == "bad"
    assert attempts(sync_app) == {}
    assert stored_offsets(sync_app) == {(topic, 0): 4}


def test_async_a_handler_that_commits_fails_alone(servers: str, aio_app: App, aio_url: str) -> None:
    topic = create_topic(servers, partitions=1)
    publish(servers, topic, amounts(["a", "bad", "b"]))
    seen = Collected()
    apply = pay_async(aio_app)

    async def handler(session: AsyncSession, delivery: Delivery) -> None:
        await apply(session, delivery)
        if delivery.message_id == "bad":
            await session.commit()

    consumer = async_consumer(
        servers, topic, aio_app, aio_url, handler=handler, on_settled=seen, max_deliveries=2
    )
    asyncio.run(run_async_until(consumer, lambda: seen.final() >= 3))
    assert ledger(aio_app) == ["a", "b"] and balance(aio_app) == Decimal(2)
    assert seen.count(Disposition.DEAD_LETTERED) == 1 and seen.count(Disposition.PROCESSED) == 2
    assert attempts(aio_app) == {}


# -- crashes: a real consumer process SIGKILLed after the database commit ------------------

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.backends.brokers.kafka_child"


def child(db_url: str, servers: str, topic: str, offsets: str, mode: str, n: int) -> list[str]:
    """Run the consumer process to its end (exit, or SIGKILL) and return its lines."""
    process = subprocess.run(
        [sys.executable, "-m", CHILD, db_url, servers, topic, f"group-{topic}", offsets, mode,
         str(n)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    expected = -signal.SIGKILL if mode.startswith("crash") else 0
    assert process.returncode == expected, process.stderr[-3000:]
    return process.stdout.splitlines()


def test_killed_after_the_commit_before_the_offset_commit_is_redelivered_as_duplicates(
    url: str, servers: str, sync_app: App
) -> None:
    topic = create_topic(servers, partitions=1)
    publish(servers, topic, amounts(["p1", "p2", "p3"]))
    assert child(url, servers, topic, "kafka", "crash-after-commit", 3) == ["COMMITTED"]
    assert ledger(sync_app) == ["p1", "p2", "p3"], "committed before the kill"
    assert committed(servers, f"group-{topic}", topic, 1) == {}, "the offsets never were"
    lines = child(url, servers, topic, "kafka", "deliver", 3)
    assert lines == ["duplicate 1 p1", "duplicate 1 p2", "duplicate 1 p3"]
    assert ledger(sync_app) == ["p1", "p2", "p3"] and balance(sync_app) == Decimal(3)
    assert committed(servers, f"group-{topic}", topic, 1) == {0: 3}


def test_offsets_in_the_database_replay_nothing_after_that_crash(
    url: str, servers: str, sync_app: App
) -> None:
    replay_nothing_after_that_crash(url, servers, sync_app)


def test_async_offsets_in_the_database_replay_nothing_after_that_crash(
    aio_url: str, servers: str, aio_app: App
) -> None:
    """The AsyncConsumer restarted finds no group offset (never committed) but the stored
    one: aiokafka resets the partition to its start while the assignment listener reads
    the database, and the records before the stored offset are dropped, never claimed."""
    replay_nothing_after_that_crash(aio_url, servers, aio_app)


def replay_nothing_after_that_crash(db_url: str, servers: str, app: App) -> None:
    """A consumer process (``offsets="database"``) SIGKILLed after its poll's commit,
    before the offset commit; another started: it settles only the record published
    since (a replay would print ``duplicate`` lines)."""
    topic = create_topic(servers, partitions=1)
    publish(servers, topic, amounts(["p1", "p2", "p3"]))
    assert child(db_url, servers, topic, "database", "crash-after-commit", 3) == ["COMMITTED"]
    assert ledger(app) == ["p1", "p2", "p3"]
    assert stored_offsets(app) == {(topic, 0): 3}, "in the claim's own transaction"
    assert committed(servers, f"group-{topic}", topic, 1) == {}
    publish(servers, topic, amounts(["p4"]))
    assert child(db_url, servers, topic, "database", "deliver", 1) == ["processed 1 p4"]
    assert ledger(app) == ["p1", "p2", "p3", "p4"] and balance(app) == Decimal(4)
    assert stored_offsets(app) == {(topic, 0): 4}
    assert committed(servers, f"group-{topic}", topic, 1) == {0: 4}


def stored_ahead(servers: str, app: App) -> str:
    """A fresh topic (its group has never committed): a0..a5 on partition 0, b0..b2 on
    partition 1, and in the database the offset 4 stored for partition 0 (a0..a3 taken
    for processed), none for partition 1."""
    topic = create_topic(servers, partitions=2)
    publish(servers, topic, amounts([f"a{i}" for i in range(6)]), partition=0)
    publish(servers, topic, amounts(["b0", "b1", "b2"]), partition=1)
    with app.engine.begin() as conn:
        conn.execute(
            kafka_tables(app.inbox)
            .offsets.insert()
            .values(consumer_name=CONSUMER, topic=topic, partition=0, next_offset=4)
        )
    return topic


def assert_started_at_the_stored_offsets(
    servers: str, topic: str, app: App, seen: Collected
) -> None:
    """Partition 0 from its stored offset (nothing below it handled), partition 1, with
    none stored, from its start (``auto_offset_reset="earliest"``)."""
    assert sorted(s.delivery.message_id or "" for s in seen.items) == ["a4", "a5", "b0", "b1", "b2"]
    assert seen.count(Disposition.PROCESSED) == 5
    assert ledger(app) == ["a4", "a5", "b0", "b1", "b2"] and balance(app) == Decimal(5)
    assert stored_offsets(app) == {(topic, 0): 6, (topic, 1): 3}
    assert committed(servers, f"group-{topic}", topic, 2) == {0: 6, 1: 3}


def test_async_a_partition_the_group_never_committed_starts_at_the_stored_offset(
    servers: str, aio_app: App, aio_url: str
) -> None:
    """The case aiokafka's seek in ``on_partitions_assigned`` alone did not serve: no group
    offset, so the fetcher resets the partition to its start while the listener reads the
    database. Records come in partition order: by the time a4, a5 and b0..b2 are settled,
    a record below the stored offset handled would have been settled before them."""
    topic = stored_ahead(servers, aio_app)
    seen = Collected()
    consumer = async_consumer(servers, topic, aio_app, aio_url, offsets="database", on_settled=seen)
    asyncio.run(run_async_until(consumer, lambda: seen.final() >= 5))
    assert_started_at_the_stored_offsets(servers, topic, aio_app, seen)


def test_sync_a_partition_the_group_never_committed_starts_at_the_stored_offset(
    servers: str, sync_app: App
) -> None:
    topic = stored_ahead(servers, sync_app)
    seen = Collected()
    consumer = sync_consumer(servers, topic, sync_app, offsets="database", on_settled=seen)
    run_sync_until(consumer, lambda: seen.final() >= 5)
    assert_started_at_the_stored_offsets(servers, topic, sync_app, seen)


# -- the rebalance: a second consumer joins while the first holds a claimed poll ------------


def test_async_revocation_waits_for_the_poll_in_hand(
    servers: str, aio_app: App, aio_url: str
) -> None:
    """aiokafka keeps A in the group while its handler holds the poll (heartbeats in the
    background): B's arrival revokes A's partitions, and the revocation waits until A's
    transaction and offsets are committed; B then starts after A's records and applies only
    what comes next."""
    topic = create_topic(servers, partitions=2)
    first = [f"r{i}" for i in range(6)]
    publish(servers, topic, amounts(first))
    holding = asyncio.Event()
    release = asyncio.Event()
    paying = pay_async(aio_app)

    @functools.wraps(paying)
    async def slow(session: Any, delivery: Any) -> None:
        await paying(session, delivery)
        if not release.is_set():
            holding.set()
            await release.wait()

    seen_a, seen_b = Collected(), Collected()

    async def scenario() -> None:
        a = async_consumer(servers, topic, aio_app, aio_url, handler=slow, on_settled=seen_a)
        b = async_consumer(servers, topic, aio_app, aio_url, on_settled=seen_b)
        task_a = asyncio.create_task(a.run())
        await asyncio.wait_for(holding.wait(), SETTLE_S)
        task_b = asyncio.create_task(b.run())
        await asyncio.sleep(2.0)  # B's JoinGroup is in: the rebalance waits on A
        assert not b.assignment.owned, "B got partitions while A held its poll"
        release.set()
        deadline = time.monotonic() + SETTLE_S
        while not b.assignment.owned:
            assert time.monotonic() < deadline, "no partition ever moved to B"
            await asyncio.sleep(0.1)
        publish(servers, topic, amounts([f"s{i}" for i in range(6)]))
        while seen_a.final() + seen_b.final() < 12:
            assert time.monotonic() < deadline, (seen_a.items, seen_b.items)
            await asyncio.sleep(0.1)
        a.stop()
        b.stop()
        await asyncio.wait_for(asyncio.gather(task_a, task_b), 60)

    asyncio.run(scenario())
    assert seen_a.count(Disposition.DUPLICATE) + seen_b.count(Disposition.DUPLICATE) == 0
    assert {s.delivery.message_id for s in seen_b.items} <= {f"s{i}" for i in range(6)}
    assert len(ledger(aio_app)) == 12 and balance(aio_app) == Decimal(12)
    assert sum(committed(servers, f"group-{topic}", topic, 2).values()) == 12


def test_rebalance_mid_poll_both_see_the_records_each_effect_lands_once(
    servers: str, aio_app: App, aio_url: str
) -> None:
    """THE REBALANCE. A's handler holds its poll's transaction open (claims written, not
    committed); B joins; A's revocation waits for that poll, past A's rebalance timeout, so
    the coordinator drops A and gives the partition to B, which fetches the same records
    from the last committed offset and claims them (waiting on A's uncommitted rows). A
    commits: B finds every record a duplicate. A's offset commit is refused (no longer a
    member); B's ends past every record."""
    topic = create_topic(servers, partitions=1)
    ids = [f"r{i}" for i in range(5)]
    publish(servers, topic, amounts(ids))
    holding = asyncio.Event()
    release = asyncio.Event()
    paying = pay_async(aio_app)

    @functools.wraps(paying)
    async def slow(session: Any, delivery: Any) -> None:
        await paying(session, delivery)
        if not release.is_set():
            holding.set()
            await release.wait()

    seen_a, seen_b = Collected(), Collected()
    evicted = {**FAST_ASYNC, "rebalance_timeout_ms": 4000, "max_poll_interval_ms": 4000}

    async def scenario() -> None:
        a = async_consumer(
            servers, topic, aio_app, aio_url, handler=slow, on_settled=seen_a, config=evicted
        )
        b = async_consumer(servers, topic, aio_app, aio_url, on_settled=seen_b)
        task_a = asyncio.create_task(a.run())
        await asyncio.wait_for(holding.wait(), SETTLE_S)
        task_b = asyncio.create_task(b.run())
        deadline = time.monotonic() + SETTLE_S
        while (topic, 0) not in b.assignment.owned:
            assert time.monotonic() < deadline, "the partition never moved to B"
            await asyncio.sleep(0.1)
        assert not seen_a.items, "A still holds its poll"
        await asyncio.sleep(1.0)  # B fetches the same records, its claims wait on A's rows
        release.set()
        while seen_a.final() < 5 or seen_b.final() < 5:
            assert time.monotonic() < deadline, (seen_a.items, seen_b.items)
            await asyncio.sleep(0.1)
        a.stop()
        b.stop()
        done, pending = await asyncio.wait([task_a, task_b], timeout=60)
        assert not pending, ("A" if task_a in pending else "B") + " did not stop"
        for task in done:
            task.result()

    asyncio.run(scenario())
    assert seen_a.count(Disposition.PROCESSED) == 5
    assert seen_b.count(Disposition.DUPLICATE) == 5, "B saw the same records"
    assert ledger(aio_app) == ids and balance(aio_app) == Decimal(5)
    with aio_app.engine.connect() as conn:
        claims = conn.execute(sa.select(sa.func.count()).select_from(aio_app.inbox.table))
        assert claims.scalar_one() == 5
    assert committed(servers, f"group-{topic}", topic, 1) == {0: 5}


# -- misuse: refused when made, before any SQL or connection -------------------------------


@pytest.mark.parametrize("header", ["offset", "partition", "topic", "kafka_offset", "Offset"])
def test_a_key_header_naming_the_records_coordinates_is_refused(
    servers: str, sync_app: App, header: str
) -> None:
    with pytest.raises(InvalidArgument, match="position in the log"):
        sync_consumer(servers, "t", sync_app, key_source=header)


def test_the_wrong_half_of_the_api_is_refused_before_any_sql(
    servers: str, sync_app: App, aio_url: str
) -> None:
    engine = create_async_engine(aio_url, poolclass=sa.NullPool)
    with pytest.raises(InvalidSessionFactory):
        sync_consumer(servers, "t", sync_app, session_factory=async_sessionmaker(engine))
    with pytest.raises(ConfigurationError):
        async_consumer(servers, "t", sync_app, aio_url, session_factory=sync_app.Session)
    with pytest.raises(AsyncHandlerError):  # an async def handler on the sync consumer
        sync_consumer(servers, "t", sync_app, handler=pay_async(sync_app))
    with pytest.raises(InvalidArgument, match="enable_auto_commit"):
        async_consumer(servers, "t", sync_app, aio_url, config={"enable_auto_commit": True})
    with pytest.raises(InvalidArgument, match=r"enable\.auto\.commit"):
        sync_consumer(servers, "t", sync_app, config={"enable.auto.commit": True})
    with pytest.raises(InvalidArgument, match="offsets"):
        sync_consumer(servers, "t", sync_app, offsets="zookeeper")
    with pytest.raises(InvalidArgument, match=r"options\.dead_letter"):
        sync_consumer(servers, "t", sync_app, dead_letter="t")
    with pytest.raises(InvalidArgument, match="'bad topic!' is not a Kafka topic name"):
        sync_consumer(servers, "bad topic!", sync_app)
    with pytest.raises(InvalidArgument, match="topics must be a topic name or a list"):
        sync_consumer(servers, None, sync_app)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"options.dead_letter '\.\.' is not a Kafka topic"):
        async_consumer(servers, "t", sync_app, aio_url, dead_letter="..")


def test_client_options_the_kafka_client_refuses_are_refused_before_any_sql(
    servers: str, sync_app: App, aio_url: str
) -> None:
    statements: list[str] = []
    sa.event.listen(sync_app.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    with pytest.raises(InvalidArgument, match=r"config: .*no\.such\.property"):
        sync_consumer(servers, "t", sync_app, config={"no.such.property": 1}).run()
    with pytest.raises(InvalidArgument, match=r"producer_config: .*no\.such\.property"):
        sync_consumer(servers, "t", sync_app, producer_config={"no.such.property": 1}).run()
    assert statements == []
    with pytest.raises(InvalidArgument, match=r"AIOKafkaConsumer does not take: \['auto\."):
        async_consumer(servers, "t", sync_app, aio_url, config={"auto.offset.reset": "latest"})
    with pytest.raises(InvalidArgument, match="AIOKafkaProducer does not take"):
        async_consumer(servers, "t", sync_app, aio_url, producer_config={"linger": 5})


# -- the outbox publishers ---------------------------------------------------------------


def outbox_message(topic: str, message_id: str, account: str) -> OutboxMessage:
    return OutboxMessage(
        id=1, message_id=message_id, destination=topic, payload=b"1.00",
        headers={"account_id": account},
    )  # fmt: skip


def test_the_publisher_sends_the_outbox_id_as_the_key_header_and_a_key_per_topic(
    servers: str, sync_app: App
) -> None:
    """Through publisher_for("kafka://..."): librdkafka's idempotent producer, acks=all;
    the consumer reads the outbox id from the header and applies each message once (a
    row published twice, as after a relay killed before its mark, is a duplicate)."""
    topic = create_topic(servers, partitions=3)
    publisher = publisher_for(f"kafka://{servers}")
    assert isinstance(publisher, Publisher)
    assert publisher.config["enable.idempotence"] is True and publisher.config["acks"] == "all"
    publisher.keys = {topic: lambda m: m.headers["account_id"]}
    messages = [outbox_message(topic, f"o{i}", f"acct-{i % 2}") for i in range(6)]
    assert publisher.publish_many([*messages, messages[0]]) == [None] * 7
    publisher.close()
    seen = Collected()
    consumer = sync_consumer(servers, topic, sync_app, on_settled=seen)
    run_sync_until(consumer, lambda: seen.final() >= 7)
    assert ledger(sync_app) == [f"o{i}" for i in range(6)]
    assert seen.count(Disposition.DUPLICATE) == 1
    partitions = {s.delivery.headers["account_id"]: set() for s in seen.items}
    for s in seen.items:
        partitions[s.delivery.headers["account_id"]].add(s.delivery.broker_ref.split("@")[0])
    assert all(len(p) == 1 for p in partitions.values()), "one key, one partition"


def test_the_publisher_tells_an_unreachable_broker_from_a_refused_message() -> None:
    unreachable = Publisher("127.0.0.1:1", timeout=3, config={"message.timeout.ms": 2000})
    (error,) = unreachable.publish_many([outbox_message("t", "m1", "a")])
    assert error is not None and unreachable.is_unavailable(error)
    assert broker_unavailable(unreachable, error)
    unreachable.close()
    refused = Publisher("127.0.0.1:1", config={"message.max.bytes": 1000})
    big = OutboxMessage(id=1, message_id="m2", destination="t", payload=b"x" * 5000)
    (error,) = refused.publish_many([big])
    assert error is not None and not refused.is_unavailable(error), error


def test_the_async_publisher_publishes_once_awaited(servers: str, sync_app: App) -> None:
    topic = create_topic(servers)
    publisher = async_publisher_for(f"kafka://{servers}")
    assert isinstance(publisher, AsyncPublisher)

    async def publish_two() -> None:
        await publisher.publish(outbox_message(topic, "a1", "x"))
        await publisher.publish(outbox_message(topic, "a1", "x"))  # the relay again
        await publisher.close()

    asyncio.run(publish_two())
    seen = Collected()
    run_sync_until(
        sync_consumer(servers, topic, sync_app, on_settled=seen), lambda: seen.final() >= 2
    )
    assert ledger(sync_app) == ["a1"] and seen.count(Disposition.DUPLICATE) == 1


def test_a_misspelled_key_header_stops_the_consumer_with_nothing_dead_lettered(
    servers: str, sync_app: App
) -> None:
    """``max_keyless`` keyless records in a row: the consumer raises MissingKeyHeader with
    none of them dead-lettered, none applied, no offset committed (a consumer started
    again with the right header fetches them all)."""
    topic = create_topic(servers)
    publish(servers, topic, amounts([f"k{i}" for i in range(5)]))
    seen = Collected()
    consumer = sync_consumer(
        servers, topic, sync_app, key_source="Message-Id", max_keyless=3, on_settled=seen
    )
    with pytest.raises(MissingKeyHeader, match="Message-Id"):
        run_sync_until(consumer, lambda: False)
    assert seen.items == [] and ledger(sync_app) == []
    assert dead_letters(servers, topic, 1, seconds=3) == []
    assert committed(servers, f"group-{topic}", topic, 1) == {}
    fixed = Collected()
    consumer = sync_consumer(servers, topic, sync_app, on_settled=fixed)
    run_sync_until(consumer, lambda: fixed.final() >= 5)
    assert ledger(sync_app) == [f"k{i}" for i in range(5)]
