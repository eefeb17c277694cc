"""The Redis Streams adapter against the live Redis server, on every database.

Each test uses its own stream (a uuid in the name) and deletes it and its dead-letter stream
after. Business state (ledger, balances, claims) and broker state (pending entries, group lag,
the dead-letter stream) are both asserted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from sa_inbox import ConfigurationError
from sa_inbox.brokers import DeadLetterReason, DeliveryOptions, Disposition, Settlement
from sa_inbox.brokers.redis import AsyncConsumer, Consumer, StreamSettings
from sa_inbox.brokers.redis.core import Entry, RedisSettler, run_call
from sa_inbox.chaos.drivers import driver_for
from sa_inbox.chaos.drivers.redis import GROUP
from sa_inbox.exc import InvalidArgument
from tests.backends.brokers.payments import pay, pay_async
from tests.conftest import broker_url
from tests.support.app import CONSUMER, App, fresh_app
from tests.support.options import with_options

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.backends.brokers.redis_child"
FAST = {"visibility_timeout": 0.3, "block_timeout": 0.1}


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture
def redis_url() -> str:
    return broker_url("redis")


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def stream(client: redis.Redis) -> Iterator[str]:
    name = f"sa-inbox-test:{uuid.uuid4().hex}"
    yield name
    client.delete(name, f"{name}:dead")


@pytest.fixture
def aio_app(aio_url: str) -> Iterator[App]:
    """The app's schema made through the sync driver of ``aio_url``'s database."""
    yield from fresh_app(aio_url)


# -- helpers -----------------------------------------------------------------------------


def publish(client: redis.Redis, stream: str, payments: list[tuple[str | None, str]]) -> None:
    """XADD each ``(message_id, amount)``; a None id publishes the entry without the field."""
    for message_id, amount in payments:
        fields = {"body": amount} if message_id is None else {"message_id": message_id}
        client.xadd(stream, {**fields, "body": amount})


def consumer(
    client: redis.Redis, stream: str, app: App, handler: Any = None, **kw: Any
) -> Consumer:
    return Consumer(
        client,
        stream,
        group=CONSUMER,
        session_factory=app.Session,
        inbox=app.inbox,
        handler=handler or pay(app),
        **with_options({**FAST, **kw}),
    )


def drain(
    poll: Callable[[], list[Settlement]], count: int, seconds: float = 15
) -> list[Settlement]:
    """Poll until ``count`` settlements (of any kind) came, within ``seconds``."""
    settled: list[Settlement] = []
    deadline = time.monotonic() + seconds
    while len(settled) < count:
        assert time.monotonic() < deadline, f"only {len(settled)} of {count} settled"
        settled += poll()
    return settled


def pending(client: redis.Redis, stream: str, group: str = CONSUMER) -> int:
    """Entries delivered to the group and not acked (XPENDING's summary count)."""
    return int(client.xpending(stream, group)["pending"])


def lag(client: redis.Redis, stream: str) -> int:
    """Entries not yet delivered to the group (XINFO GROUPS ``lag``, Redis >= 7.0)."""
    (group,) = client.xinfo_groups(stream)
    return int(group["lag"])


def dead_letters(client: redis.Redis, stream: str) -> list[dict[str, str]]:
    return [
        {k.decode(): v.decode() for k, v in fields.items()}
        for _, fields in client.xrange(f"{stream}:dead")
    ]


def dispositions(settled: list[Settlement]) -> list[tuple[str | None, Disposition]]:
    return sorted(((s.delivery.message_id, s.disposition) for s in settled), key=str)


# -- what the adapter relies on, checked on the live server --------------------------------


def test_redis_counts_deliveries_as_the_adapter_relies_on(client: redis.Redis, stream: str) -> None:
    """XREADGROUP > sets the counter to 1, XAUTOCLAIM increments it (JUSTID does not), an
    entry deleted while pending is dropped by XAUTOCLAIM, and XINFO GROUPS reports the lag."""

    def times_delivered() -> int:
        return int(pending_entry(client, stream)["times_delivered"])

    client.xgroup_create(stream, CONSUMER, "0", mkstream=True)
    entry_id = client.xadd(stream, {"message_id": "p-1"})
    assert lag(client, stream) == 1
    client.xreadgroup(CONSUMER, "a", {stream: ">"})
    assert (times_delivered(), lag(client, stream)) == (1, 0)
    time.sleep(0.01)
    _, claimed, _ = client.xautoclaim(stream, CONSUMER, "b", 5, "0-0")
    assert [i for i, _ in claimed] == [entry_id] and times_delivered() == 2
    time.sleep(0.01)
    client.xautoclaim(stream, CONSUMER, "c", 5, "0-0", justid=True)
    assert times_delivered() == 2
    client.xdel(stream, entry_id)
    time.sleep(0.01)
    assert client.xautoclaim(stream, CONSUMER, "d", 5, "0-0") == [b"0-0", [], [entry_id]]
    assert pending(client, stream) == 0


# -- duplicates, missing keys, poison: sync consumer on every database ----------------------

DUPLICATES = [("p-1", "10.00"), ("p-2", "5.00"), ("p-1", "10.00"), ("p-3", "1.50")]
DUPLICATES += [("p-2", "5.00"), ("p-1", "10.00")]


def test_duplicate_entries_change_data_once_per_key(
    app: App, client: redis.Redis, stream: str
) -> None:
    publish(client, stream, DUPLICATES)
    settled = drain(consumer(client, stream, app).poll, len(DUPLICATES))
    assert [s.disposition for s in settled].count(Disposition.PROCESSED) == 3
    assert [s.disposition for s in settled].count(Disposition.DUPLICATE) == 3
    assert {s.delivery.broker_ref.split("/")[-1] for s in settled} == {
        entry_id.decode() for entry_id, _ in client.xrange(stream)
    }, "broker_ref is the entry id, the key is the producer's field"
    assert (app.ledger_rows(), app.inbox_rows(), app.balance(1)) == (3, 3, Decimal("16.50"))
    assert (pending(client, stream), lag(client, stream), dead_letters(client, stream)) == (
        0,
        0,
        [],
    )


def test_an_entry_without_the_key_field_is_dead_lettered_unprocessed(
    app: App, client: redis.Redis, stream: str
) -> None:
    publish(client, stream, [(None, "9.00"), ("p-1", "1.00")])
    (first_id, _), _ = client.xrange(stream)
    settled = drain(consumer(client, stream, app).poll, 2)
    assert dispositions(settled) == [
        ("p-1", Disposition.PROCESSED),
        (None, Disposition.DEAD_LETTERED),
    ]
    (dead,) = dead_letters(client, stream)
    assert dead["dead_letter_reason"] == DeadLetterReason.MISSING_MESSAGE_ID.value
    assert dead["dead_letter_original_id"] == first_id.decode()
    assert dead["body"] == "9.00" and "message_id" not in dead
    assert (app.ledger_rows(), app.inbox_rows(), app.balance(1)) == (1, 1, Decimal("1.00"))
    assert (pending(client, stream), lag(client, stream)) == (0, 0)


def test_a_custom_key_field_is_the_dedup_key_with_decoded_responses(
    app: App, client: redis.Redis, stream: str, redis_url: str
) -> None:
    for key in ("k-1", "k-1", "k-2"):
        client.xadd(stream, {"idempotency-key": key, "message_id": uuid.uuid4().hex, "body": "2"})
    text_client = redis.Redis.from_url(redis_url, decode_responses=True)
    reader = consumer(text_client, stream, app, key_source="idempotency-key")
    settled = drain(reader.poll, 3)
    text_client.close()
    assert dispositions(settled) == [
        ("k-1", Disposition.DUPLICATE),
        ("k-1", Disposition.PROCESSED),
        ("k-2", Disposition.PROCESSED),
    ]
    assert (app.ledger_rows(), app.balance(1), pending(client, stream)) == (2, Decimal(4), 0)


def assert_poison_dead_lettered(
    app: App, client: redis.Redis, stream: str, settled: list[Settlement]
) -> None:
    """p-bad failed on deliveries 1..3 (counted by XREADGROUP then XAUTOCLAIM/XPENDING) and
    went to the dead-letter stream; the entries behind it were processed meanwhile."""
    bad = [s for s in settled if s.delivery.message_id == "p-bad"]
    assert [(s.delivery.delivery_count, s.disposition) for s in bad] == [
        (1, Disposition.RETRY),
        (2, Disposition.RETRY),
        (3, Disposition.DEAD_LETTERED),
    ]
    good = [s for s in settled if s.delivery.message_id != "p-bad"]
    assert {s.disposition for s in good} == {Disposition.PROCESSED} and len(good) == 3
    assert settled.index(good[-1]) < settled.index(bad[-1]), "not blocked behind the poison"
    (dead,) = dead_letters(client, stream)
    assert dead["message_id"] == "p-bad" and dead["body"] == "7.00"
    assert dead["dead_letter_reason"] == DeadLetterReason.DELIVERY_LIMIT.value
    assert "RuntimeError: poison, delivery 3" in dead["dead_letter_detail"]
    assert dead["dead_letter_delivery_count"] == "3"
    assert dead["dead_letter_original_id"] == client.xrange(stream)[0][0].decode()
    assert (app.ledger_rows("p-bad"), app.ledger_rows(), app.balance(1)) == (0, 3, Decimal(6))
    assert (pending(client, stream), lag(client, stream)) == (0, 0)


POISON = [("p-bad", "7.00"), ("p-2", "1.00"), ("p-3", "2.00"), ("p-4", "3.00")]


def test_a_poison_entry_is_dead_lettered_after_max_deliveries(
    app: App, client: redis.Redis, stream: str
) -> None:
    publish(client, stream, POISON)
    reader = consumer(client, stream, app, pay(app, poison="p-bad"), max_deliveries=3)
    settled = drain(reader.poll, 6)
    assert_poison_dead_lettered(app, client, stream, settled)


def test_two_consumers_in_parallel_threads_drain_duplicates_exactly_once(
    app: App, client: redis.Redis, stream: str
) -> None:
    payments = [(f"p-{i}", f"{i}.00") for i in range(1, 31)]
    publish(client, stream, payments + payments[::3] + payments[::7])
    stop, settled = threading.Event(), []
    # The visibility timeout covers a whole batch: the entries of a batch wait while the ones
    # before them are handled (on SQLite, behind the other thread's write lock).
    kw = {"batch_size": 4, "on_settled": settled.append, "visibility_timeout": 5}
    consumers = [consumer(client, stream, app, **kw), consumer(client, stream, app, **kw)]
    consumers[0].ensure_group()
    threads = [threading.Thread(target=c.run, args=(stop,)) for c in consumers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while (pending(client, stream) or lag(client, stream)) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive(), "run() returns once stop is set"
    assert {s.disposition for s in settled} == {Disposition.PROCESSED, Disposition.DUPLICATE}
    assert len({s.delivery.broker_ref for s in settled}) == len(settled) == 30 + 10 + 5
    assert (app.ledger_rows(), app.inbox_rows()) == (30, 30)
    assert app.balance(1) == Decimal(sum(range(1, 31)))
    assert (pending(client, stream), lag(client, stream)) == (0, 0)
    assert client.xinfo_consumers(stream, CONSUMER) == [], "both members left the group"


# -- crashes: a real consumer process SIGKILLed, another one takes over --------------------


def child(db_url: str, redis_url: str, stream: str, mode: str, *extra: str) -> list[str]:
    """Runs the consumer process to its end (exit or SIGKILL) and returns its lines."""
    process = subprocess.run(
        [sys.executable, "-m", CHILD, db_url, redis_url, stream, mode, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    expected = 0 if mode == "deliver" else -signal.SIGKILL
    assert process.returncode == expected, process.stderr
    return process.stdout.splitlines()


def pending_entry(client: redis.Redis, stream: str) -> dict[str, Any]:
    (entry,) = client.xpending_range(stream, CONSUMER, "-", "+", 10)
    return entry


def crash_after_commit(
    app: App, client: redis.Redis, stream: str, db_url: str, redis_url: str, *extra: str
) -> None:
    publish(client, stream, [("pay-1", "42.00")])
    assert child(db_url, redis_url, stream, "crash-after-commit", *extra) == ["COMMITTED"]
    assert app.ledger_rows("pay-1") == 1, "committed before the kill"
    assert pending_entry(client, stream)["times_delivered"] == 1, "never acked"
    assert child(db_url, redis_url, stream, "deliver", *extra) == ["duplicate 2"]
    assert (app.ledger_rows(), app.inbox_rows(), app.balance(1)) == (1, 1, Decimal("42.00"))
    assert (pending(client, stream), lag(client, stream)) == (0, 0)


def crash_before_commit(
    app: App, client: redis.Redis, stream: str, db_url: str, redis_url: str, *extra: str
) -> None:
    publish(client, stream, [("pay-1", "42.00")])
    assert child(db_url, redis_url, stream, "crash-before-commit", *extra) == ["APPLIED"]
    assert (app.ledger_rows(), app.inbox_rows()) == (0, 0), "nothing survives the kill"
    assert pending_entry(client, stream)["times_delivered"] == 1
    assert child(db_url, redis_url, stream, "deliver", *extra) == ["processed 2"]
    assert (app.ledger_rows(), app.inbox_rows(), app.balance(1)) == (1, 1, Decimal("42.00"))
    assert (pending(client, stream), lag(client, stream)) == (0, 0)


def test_killed_after_commit_before_xack_is_taken_over_and_acked_as_duplicate(
    url: str, app: App, client: redis.Redis, stream: str, redis_url: str
) -> None:
    crash_after_commit(app, client, stream, url, redis_url)


def test_killed_before_commit_is_taken_over_and_applied_once(
    url: str, app: App, client: redis.Redis, stream: str, redis_url: str
) -> None:
    crash_before_commit(app, client, stream, url, redis_url)


# -- the asyncio consumer, on every async driver ------------------------------------------


def run_async(
    aio_url: str, client_url: str, stream: str, app: App, count: int, **kw: Any
) -> list[Settlement]:
    async def main() -> list[Settlement]:
        engine = create_async_engine(aio_url)
        client = redis.asyncio.Redis.from_url(client_url)
        reader = AsyncConsumer(
            client,
            stream,
            group=CONSUMER,
            session_factory=async_sessionmaker(engine),
            inbox=app.inbox,
            **with_options({"handler": pay_async(app), **FAST, **kw}),
        )
        settled: list[Settlement] = []
        deadline = time.monotonic() + 15
        try:
            while len(settled) < count:
                assert time.monotonic() < deadline, f"only {len(settled)} of {count} settled"
                settled += await reader.poll()
        finally:
            await client.aclose()
            await engine.dispose()
        return settled

    return asyncio.run(main())


def test_async_duplicate_entries_change_data_once_per_key(
    aio_url: str, aio_app: App, client: redis.Redis, stream: str, redis_url: str
) -> None:
    publish(client, stream, [*DUPLICATES, (None, "3.00")])
    settled = run_async(aio_url, redis_url, stream, aio_app, len(DUPLICATES) + 1)
    assert [s.disposition for s in settled].count(Disposition.PROCESSED) == 3
    assert [s.disposition for s in settled].count(Disposition.DUPLICATE) == 3
    (dead,) = dead_letters(client, stream)
    assert dead["dead_letter_reason"] == DeadLetterReason.MISSING_MESSAGE_ID.value
    assert (aio_app.ledger_rows(), aio_app.inbox_rows()) == (3, 3)
    assert aio_app.balance(1) == Decimal("16.50")
    assert (pending(client, stream), lag(client, stream)) == (0, 0)


def test_async_poison_entry_is_dead_lettered_after_max_deliveries(
    aio_url: str, aio_app: App, client: redis.Redis, stream: str, redis_url: str
) -> None:
    publish(client, stream, POISON)
    handler = pay_async(aio_app, poison="p-bad")
    settled = run_async(aio_url, redis_url, stream, aio_app, 6, handler=handler, max_deliveries=3)
    assert_poison_dead_lettered(aio_app, client, stream, settled)


def test_async_killed_after_commit_before_xack_is_acked_as_duplicate(
    aio_url: str, aio_app: App, client: redis.Redis, stream: str, redis_url: str
) -> None:
    crash_after_commit(aio_app, client, stream, aio_url, redis_url, "async")


def test_async_killed_before_commit_is_applied_once(
    aio_url: str, aio_app: App, client: redis.Redis, stream: str, redis_url: str
) -> None:
    crash_before_commit(aio_app, client, stream, aio_url, redis_url, "async")


def test_a_dead_letter_that_cannot_be_written_leaves_the_entry_pending_not_lost(
    app: App, client: redis.Redis, stream: str
) -> None:
    """The dead letter is one Lua script: a failing XADD (the dead-letter key holds a string)
    ends it before the XACK, so the entry stays pending and is dead-lettered once fixed."""
    publish(client, stream, [(None, "1.00")])
    client.set(f"{stream}:dead", "not a stream")
    reader = consumer(client, stream, app, max_keyless=None)  # dead-lettered in the first poll
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        reader.poll()
    assert pending_entry(client, stream)["times_delivered"] == 1, "not acked"
    client.delete(f"{stream}:dead")
    (settled,) = drain(reader.poll, 1)
    assert settled.disposition is Disposition.DEAD_LETTERED
    assert settled.delivery.delivery_count == 2, "taken over by XAUTOCLAIM"
    (dead,) = dead_letters(client, stream)
    assert dead["dead_letter_reason"] == DeadLetterReason.MISSING_MESSAGE_ID.value
    assert (pending(client, stream), app.ledger_rows()) == (0, 0)


def test_an_entry_is_dead_lettered_once_even_if_two_consumers_try(
    client: redis.Redis, stream: str
) -> None:
    """The script writes the dead letter only while the entry is pending to the group."""
    publish(client, stream, [("p-1", "1.00")])
    settings = StreamSettings(stream, CONSUMER, "member-1")
    client.xgroup_create(stream, CONSUMER, "0")
    ((_, [(entry_id, fields)]),) = client.xreadgroup(CONSUMER, "member-1", {stream: ">"})
    entry = Entry(entry_id.decode(), fields, 1)
    settlers = [RedisSettler(settings, entry, partial(run_call, client)) for _ in range(2)]
    replies = [s.dead_letter(DeadLetterReason.DELIVERY_LIMIT, "twice") for s in settlers]
    assert replies[0] is not None and replies[1] is None
    assert len(dead_letters(client, stream)) == 1 and pending(client, stream) == 0


# -- the chaos run's driver ----------------------------------------------------------------


def test_chaos_driver_survives_a_killed_consumer(
    url: str, app: App, redis_url: str, client: redis.Redis, stream: str
) -> None:
    """A consumer process SIGKILLed mid-stream; another consumer takes over its pending
    entries (XAUTOCLAIM after the driver's visibility timeout) and drains the rest."""
    driver = driver_for(redis_url)
    driver.prepare(stream, max_deliveries=5)
    payments = [(f"p-{i}", f"{i}.00".encode()) for i in range(1, 121)]
    driver.publish(stream, payments + payments[::4])
    assert driver.unsettled(stream) == 150, "all unread (XINFO GROUPS lag)"
    process = subprocess.Popen(
        [sys.executable, "-m", CHILD, url, redis_url, stream, "chaos"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    for _ in range(25):
        assert process.stdout.readline(), "the consumer process ended early"
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert 0 < driver.unsettled(stream) < 150
    stop, settled = threading.Event(), []
    consuming = threading.Thread(
        target=driver.consume,
        args=(stream,),
        kwargs={
            "session_factory": app.Session,
            "inbox": app.inbox,
            "consumer_name": CONSUMER,
            "handler": pay(app),
            "max_deliveries": 5,
            "on_settled": settled.append,
            "stop": stop,
        },
    )
    consuming.start()
    deadline = time.monotonic() + 20
    while driver.unsettled(stream) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    consuming.join(timeout=10)
    assert (driver.unsettled(stream), pending(client, stream, GROUP)) == (0, 0)
    assert driver.dead_letters(stream) == []
    assert (app.ledger_rows(), app.inbox_rows()) == (120, 120)
    assert app.balance(1) == Decimal(sum(range(1, 121)))
    driver.close()


def test_async_two_consumers_run_until_stopped_drain_duplicates_exactly_once(
    aio_url: str, aio_app: App, client: redis.Redis, stream: str, redis_url: str
) -> None:
    payments = [(f"p-{i}", f"{i}.00") for i in range(1, 21)]
    publish(client, stream, payments + payments[::2])
    settled: list[Settlement] = []

    async def main() -> None:
        engine = create_async_engine(aio_url)
        clients = [redis.asyncio.Redis.from_url(redis_url) for _ in range(2)]
        readers = [
            AsyncConsumer(
                each,
                stream,
                group=CONSUMER,
                session_factory=async_sessionmaker(engine),
                inbox=aio_app.inbox,
                handler=pay_async(aio_app),
                batch_size=3,
                options=DeliveryOptions(on_settled=settled.append),
                **{**FAST, "visibility_timeout": 5},
            )
            for each in clients
        ]
        await readers[0].ensure_group()
        stop = asyncio.Event()
        tasks = [asyncio.create_task(readers[0].run(stop)), asyncio.create_task(readers[1].run())]
        deadline = time.monotonic() + 20
        while (pending(client, stream) or lag(client, stream)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop.set()  # the first by its event, the second by stop()
        readers[1].stop()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
        for each in clients:
            await each.aclose()
        await engine.dispose()

    asyncio.run(main())
    assert len({s.delivery.broker_ref for s in settled}) == len(settled) == 30
    assert [s.disposition for s in settled].count(Disposition.PROCESSED) == 20
    assert (aio_app.ledger_rows(), aio_app.inbox_rows()) == (20, 20)
    assert aio_app.balance(1) == Decimal(sum(range(1, 21)))
    assert (pending(client, stream), lag(client, stream)) == (0, 0)
    assert client.xinfo_consumers(stream, CONSUMER) == [], "both members left the group"


def test_chaos_driver_counts_unread_entries_when_redis_cannot_tell_the_lag(
    redis_url: str, client: redis.Redis, stream: str
) -> None:
    """After a deletion, XINFO GROUPS reports lag nil: the driver counts the entries after
    the group's last-delivered-id instead."""
    driver = driver_for(redis_url)
    ids = [client.xadd(stream, {"message_id": f"p-{i}"}) for i in range(4)]
    client.xdel(stream, ids[1])
    client.xgroup_create(stream, GROUP, ids[0])
    assert client.xinfo_groups(stream)[0]["lag"] is None
    assert driver.unsettled(stream) == 2
    client.xreadgroup(GROUP, "a", {stream: ">"}, count=1)
    assert driver.unsettled(stream) == 2, "one pending, one unread"
    assert driver.unsettled(f"{stream}:missing") == 0
    driver.close()


@pytest.mark.parametrize(
    "settings",
    [
        {"stream": ""},
        {"group": ""},
        {"key_field": ""},
        {"dead_letter_stream": "s"},
        {"visibility_timeout": 0},
        {"block_timeout": -1},
        {"batch_size": 0},
        {"batch_size": True},
        {"max_deliveries": 0},
    ],
)
def test_invalid_settings_are_refused_on_construction(settings: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument) as info:
        StreamSettings(**{"stream": "s", "group": "g", "member": "m", **settings})
    assert isinstance(info.value, ConfigurationError) and isinstance(info.value, ValueError)
    assert StreamSettings("s", "g", "m").dead_letter_stream == "s:dead"


def test_a_key_that_is_not_utf8_is_dead_lettered_as_invalid(
    app: App, client: redis.Redis, stream: str
) -> None:
    client.xadd(stream, {"message_id": b"\xff\xfe", "body": "1.00"})
    (settled,) = drain(consumer(client, stream, app).poll, 1)
    assert settled.reason is DeadLetterReason.INVALID_MESSAGE_ID
    (dead,) = client.xrange(f"{stream}:dead")
    assert dead[1][b"message_id"] == b"\xff\xfe", "the original field, byte for byte"
    assert (app.ledger_rows(), app.inbox_rows(), pending(client, stream)) == (0, 0, 0)


def test_a_pending_entry_deleted_from_the_stream_is_logged_when_dropped(
    app: App, client: redis.Redis, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(client, stream, [("p-1", "1.00")])
    reader = consumer(client, stream, app)
    reader.ensure_group()
    ((_, [(entry_id, _)]),) = client.xreadgroup(CONSUMER, "dead-member", {stream: ">"})
    client.xdel(stream, entry_id)
    time.sleep(FAST["visibility_timeout"])
    with caplog.at_level("WARNING", logger="sa_inbox.brokers.redis"):
        assert reader.poll(block=False) == []
    assert entry_id.decode() in caplog.text and pending(client, stream) == 0


def test_a_member_with_pending_entries_stays_in_the_group_when_it_stops(
    app: App, client: redis.Redis, stream: str
) -> None:
    publish(client, stream, [("p-bad", "1.00")])
    reader = consumer(client, stream, app, pay(app, poison="p-bad"), member="m-1")
    stop = threading.Event()
    (settled,) = drain(reader.poll, 1)
    assert settled.disposition is Disposition.RETRY
    stop.set()
    reader.run(stop)
    ((member, count),) = [
        (c["name"], c["pending"]) for c in client.xinfo_consumers(stream, CONSUMER)
    ]
    assert (member, count) == (b"m-1", 1), "kept: its entry waits to be taken over"
