"""A consumer whose key setting is wrong stops instead of dead-lettering the queue, against
the live RabbitMQ, Redis and NATS, on each database (the async consumers on the database's
async driver).

A misspelled key header leaves every delivery keyless: after ``max_keyless`` of them in a
row the consumer gives them back and raises :class:`MissingKeyHeader`; nothing is
dead-lettered or committed, every message is still on the queue / stream, and a consumer
set up right then applies each exactly once. A shorter run of keyless deliveries (followed
by a keyed one, or by nothing) is the producer's and is dead-lettered as before.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import nats
import pika
import pytest
import redis
import redis.asyncio
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from sa_inbox.brokers import DeadLetterReason, DeliveryOptions, Disposition, Settlement
from sa_inbox.brokers.nats import AsyncConsumer as NatsConsumer
from sa_inbox.brokers.rabbitmq import AsyncConsumer, Consumer
from sa_inbox.brokers.redis import AsyncConsumer as AsyncRedisConsumer
from sa_inbox.brokers.redis import Consumer as RedisConsumer
from sa_inbox.exc import MissingKeyHeader
from tests.backends.brokers import test_rabbitmq as rmq
from tests.backends.brokers import test_redis as rds
from tests.backends.brokers.nats_support import Names, declare, delete
from tests.backends.brokers.nats_support import pay as nats_pay
from tests.conftest import broker_url
from tests.support.app import CONSUMER, App
from tests.support.options import with_options

pytestmark = pytest.mark.backend

#: Messages published; the misconfigured consumer stops after MAX_KEYLESS of them.
MESSAGES = 8
MAX_KEYLESS = 5
HEADER = "payment-id"
MISSPELLED = "payment_id"


def amounts() -> Decimal:
    return Decimal("1.00") * MESSAGES


#: Seconds between two publishes of the spread runs: longer than each consumer's idle wait
#: (RabbitMQ's keyless_wait 0.2 s, Redis's block_timeout 0.1 s, NATS's fetch_timeout 0.3 s),
#: so that every keyless delivery is held alone and settled by the wait, as on a quiet queue.
GAP = 0.8


def spread(publish_one: Callable[[int], None], count: int) -> threading.Thread:
    """Publish ``count`` messages from another thread, one every :data:`GAP` seconds."""

    def run() -> None:
        for n in range(count):
            time.sleep(GAP)
            publish_one(n)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- RabbitMQ ----------------------------------------------------------------------------

amqp_url = rmq.amqp_url
channel = rmq.channel
queue = rmq.queue


def rabbit_publish(channel: Any, queue: str, keys: list[Any]) -> None:
    """One message per key, the key in header HEADER (None: no header), 1.00 each."""
    for key in keys:
        headers = {} if key is None else {HEADER: key}
        rmq.publish(channel, queue, None, b"1.00", headers=headers)


def rabbit_run(app: App, queue: str, client: str, count: int, **kw: Any) -> list[Settlement]:
    """Run the pika or aio-pika consumer until ``count`` settlements (or it raises)."""
    options = {"max_keyless": MAX_KEYLESS, "keyless_wait": 0.2, **kw}
    return rmq.consume(broker_url("rabbitmq"), app, queue, count, client, **options)


@pytest.mark.parametrize("prefetch", [10, 2])
@pytest.mark.parametrize("client", rmq.CLIENTS)
def test_rabbitmq_a_misspelled_key_header_stops_the_consumer_and_loses_nothing(
    channel: Any, queue: str, app: App, client: str, prefetch: int
) -> None:
    """With a prefetch count below max_keyless the consumer reads on with basic.get."""
    rabbit_publish(channel, queue, [f"pay-{n}" for n in range(MESSAGES)])
    with pytest.raises(MissingKeyHeader) as info:
        rabbit_run(app, queue, client, MESSAGES, key_source=MISSPELLED, prefetch=prefetch)
    assert info.value.key == MISSPELLED and info.value.deliveries == MAX_KEYLESS
    # basic.get adds x-delivery-count (0) to what it takes from a quorum queue
    assert info.value.carried[HEADER] == MAX_KEYLESS
    assert f"carried {HEADER!r} ({MAX_KEYLESS})" in str(info.value)
    assert (app.ledger_rows(), app.inbox_rows()) == (0, 0)
    assert rmq.dead_letters(channel, queue) == [], "nothing dead-lettered"
    rmq.eventually(lambda: rmq.ready(channel, queue) == MESSAGES)  # all given back
    settled = rabbit_run(app, queue, client, MESSAGES, key_source=HEADER)
    assert [s.disposition for s in settled] == [Disposition.PROCESSED] * MESSAGES
    counts = sorted(s.delivery.delivery_count for s in settled)
    assert counts.count(2) >= MAX_KEYLESS, "the run returned once (counted); the rest never read"
    # what pika had received and not dispatched goes back through its basic.cancel, which
    # rejects it before the cancel completes: RabbitMQ may deliver it once more in between
    assert max(counts) <= (3 if client == "pika" else 2), counts
    assert app.ledger_rows() == MESSAGES and app.balance(1) == amounts()
    assert rmq.ready(channel, queue) == 0 and rmq.dead_letters(channel, queue) == []


@pytest.mark.parametrize("client", rmq.CLIENTS)
def test_rabbitmq_keyless_deliveries_spread_over_time_stop_the_consumer_at_the_limit(
    channel: Any, queue: str, app: App, client: str
) -> None:
    """A misspelled key header on a quiet queue: each delivery comes alone, after the idle
    wait; the run counts on across the waits, so the MAX_KEYLESS-th stops the consumer. The
    ones before it were dead-lettered one by one (the rule's MAX_KEYLESS - 1), the last is
    given back; no time ends the run."""

    def publish_one(n: int) -> None:
        connection = pika.BlockingConnection(pika.URLParameters(broker_url("rabbitmq")))
        rabbit_publish(connection.channel(), queue, [f"pay-{n}"])
        connection.close()

    publisher = spread(publish_one, MAX_KEYLESS)
    with pytest.raises(MissingKeyHeader) as info:
        rabbit_run(app, queue, client, MESSAGES, key_source=MISSPELLED)
    publisher.join()
    assert (info.value.deliveries, info.value.dead_lettered) == (MAX_KEYLESS, MAX_KEYLESS - 1)
    assert f"{MAX_KEYLESS - 1} dead-lettered before the run reached the limit" in str(info.value)
    assert (app.ledger_rows(), app.inbox_rows()) == (0, 0)
    assert len(rmq.dead_letters(channel, queue)) == MAX_KEYLESS - 1
    rmq.eventually(lambda: rmq.ready(channel, queue) == 1)  # the last one, given back


@pytest.mark.parametrize("prefetch", [10, 1])
@pytest.mark.parametrize("client", rmq.CLIENTS)
def test_rabbitmq_a_short_run_of_keyless_messages_is_dead_lettered(
    channel: Any, queue: str, app: App, client: str, prefetch: int
) -> None:
    """Two keyless, a keyed one, then a keyless one at the end (the queue then idle)."""
    rabbit_publish(channel, queue, [None, None, "pay-1", None])
    settled = rabbit_run(app, queue, client, 4, key_source=HEADER, prefetch=prefetch)
    assert [(s.disposition, s.reason) for s in settled] == [
        (Disposition.DEAD_LETTERED, DeadLetterReason.MISSING_MESSAGE_ID),
        (Disposition.DEAD_LETTERED, DeadLetterReason.MISSING_MESSAGE_ID),
        (Disposition.PROCESSED, None),
        (Disposition.DEAD_LETTERED, DeadLetterReason.MISSING_MESSAGE_ID),
    ]
    assert app.ledger_rows() == 1 and len(rmq.dead_letters(channel, queue)) == 3


@pytest.mark.parametrize("client", rmq.CLIENTS)
def test_rabbitmq_key_header_values_bytes_are_keys_other_types_invalid(
    channel: Any, queue: str, app: App, client: str
) -> None:
    """pika sends a ``bytes`` value as a byte array ('x'), a Python int as a long ('l')."""
    rabbit_publish(channel, queue, [b"pay-1", 7, "pay-1"])
    settled = rabbit_run(app, queue, client, 3, key_source=HEADER)
    assert [(s.delivery.message_id, s.disposition, s.reason) for s in settled] == [
        ("pay-1", Disposition.PROCESSED, None),
        (None, Disposition.DEAD_LETTERED, DeadLetterReason.INVALID_MESSAGE_ID),
        ("pay-1", Disposition.DUPLICATE, None),
    ]
    assert "the key is int 7, not a string" in str(settled[1].error)
    ((_, headers, _),) = rmq.dead_letters(channel, queue)
    assert headers[rmq.REASON_HEADER] == "invalid_message_id"
    assert "the key is int 7" in headers[rmq.DETAIL_HEADER]
    assert app.ledger_rows() == 1 and app.inbox_rows() == 1


def test_rabbitmq_a_wrong_setup_fails_before_consuming(channel: Any, queue: str, app: App) -> None:
    """The readiness check at run(): the table missing fails at once, on an empty queue."""
    app.drop()
    kw = rmq.options(app, rmq.pay(app), None)
    consumer = Consumer(broker_url("rabbitmq"), queue, **with_options(kw))
    with pytest.raises(Exception, match="does not exist") as info:
        consumer.run()
    assert type(info.value).__name__ == "MissingTable"
    app.reset()
    assert consumer.check() is None  # the health endpoint's call, once the table is back


# -- Redis Streams -----------------------------------------------------------------------

redis_url = rds.redis_url
client = rds.client
stream = rds.stream
aio_app = rds.aio_app


def redis_publish(client: redis.Redis, stream: str, keys: list[str | None]) -> None:
    for key in keys:
        client.xadd(stream, {"body": "1.00", **({} if key is None else {HEADER: key})})


def redis_run(
    client: redis.Redis, stream: str, app: App, url: str | None, key_field: str, count: int
) -> list[Settlement]:
    """Poll the sync consumer (``url`` None) or the asyncio one on ``url``'s driver until
    ``count`` settlements (or it raises)."""
    kw = {**rds.FAST, "max_keyless": MAX_KEYLESS, "key_source": key_field, "group": CONSUMER}
    if url is None:
        consumer = RedisConsumer(
            client,
            stream,
            session_factory=app.Session,
            inbox=app.inbox,
            handler=rds.pay(app),
            **with_options(kw),
        )
        return rds.drain(consumer.poll, count)

    async def main() -> list[Settlement]:
        aclient = redis.asyncio.Redis.from_url(broker_url("redis"))
        engine = create_async_engine(url)
        consumer = AsyncRedisConsumer(
            aclient,
            stream,
            session_factory=async_sessionmaker(engine),
            inbox=app.inbox,
            handler=rds.pay_async(app),
            **with_options(kw),
        )
        settled: list[Settlement] = []
        try:
            for _ in range(200):
                settled += await consumer.poll()
                if len(settled) >= count:
                    break
        finally:
            await engine.dispose()
            await aclient.aclose()
        return settled

    return asyncio.run(main())


@pytest.fixture
def sync_case(app: App) -> tuple[App, None]:
    """The sync consumer on each database's sync driver."""
    return app, None


@pytest.fixture
def async_case(aio_app: App, aio_url: str) -> tuple[App, str]:
    """The asyncio consumer on each async driver."""
    return aio_app, aio_url


def check_misspelled_key_field(client: redis.Redis, stream: str, app: App, url: Any) -> None:
    redis_publish(client, stream, [f"pay-{n}" for n in range(MESSAGES)])
    with pytest.raises(MissingKeyHeader) as info:
        redis_run(client, stream, app, url, MISSPELLED, MESSAGES)
    assert info.value.deliveries == MAX_KEYLESS and info.value.carried[HEADER] == MAX_KEYLESS
    assert (app.ledger_rows(), app.inbox_rows()) == (0, 0)
    assert rds.pending(client, stream) == MESSAGES and rds.dead_letters(client, stream) == []
    counters = [e["times_delivered"] for e in client.xpending_range(stream, CONSUMER, "-", "+", 99)]
    assert counters == [0] * MESSAGES, "given back with the counter it had before"
    settled = redis_run(client, stream, app, url, HEADER, MESSAGES)
    assert [s.disposition for s in settled] == [Disposition.PROCESSED] * MESSAGES
    assert [s.delivery.delivery_count for s in settled] == [1] * MESSAGES, "not counted"
    assert app.ledger_rows() == MESSAGES and app.balance(1) == amounts()
    assert rds.pending(client, stream) == 0 and rds.dead_letters(client, stream) == []


def check_short_run(client: redis.Redis, stream: str, app: App, url: Any) -> None:
    redis_publish(client, stream, [None, None, "pay-1", None])
    settled = redis_run(client, stream, app, url, HEADER, 4)
    assert [s.delivery.message_id for s in settled] == [None, None, "pay-1", None]
    reasons = [d["dead_letter_reason"] for d in rds.dead_letters(client, stream)]
    assert reasons == ["missing_message_id"] * 3
    assert app.ledger_rows() == 1 and rds.pending(client, stream) == 0


def check_spread_over_time(client: redis.Redis, stream: str, app: App, url: Any) -> None:
    """A misspelled key field on a quiet stream (see the RabbitMQ test of that name)."""
    publisher = spread(lambda n: redis_publish(client, stream, [f"pay-{n}"]), MAX_KEYLESS)
    with pytest.raises(MissingKeyHeader) as info:
        redis_run(client, stream, app, url, MISSPELLED, MESSAGES)
    publisher.join()
    assert (info.value.deliveries, info.value.dead_lettered) == (MAX_KEYLESS, MAX_KEYLESS - 1)
    assert (app.ledger_rows(), app.inbox_rows()) == (0, 0)
    assert len(rds.dead_letters(client, stream)) == MAX_KEYLESS - 1
    assert rds.pending(client, stream) == 1, "the last one given back, still pending"


def test_redis_keyless_entries_spread_over_time_stop_the_consumer_at_the_limit(
    client: redis.Redis, stream: str, sync_case: tuple[App, None]
) -> None:
    check_spread_over_time(client, stream, *sync_case)


def test_redis_asyncio_keyless_entries_spread_over_time_stop_the_consumer_at_the_limit(
    client: redis.Redis, stream: str, async_case: tuple[App, str]
) -> None:
    check_spread_over_time(client, stream, *async_case)


def test_redis_a_misspelled_key_field_stops_the_consumer_uncounted(
    client: redis.Redis, stream: str, sync_case: tuple[App, None]
) -> None:
    check_misspelled_key_field(client, stream, *sync_case)


def test_redis_asyncio_a_misspelled_key_field_stops_the_consumer_uncounted(
    client: redis.Redis, stream: str, async_case: tuple[App, str]
) -> None:
    check_misspelled_key_field(client, stream, *async_case)


def test_redis_a_short_run_of_keyless_entries_is_dead_lettered(
    client: redis.Redis, stream: str, sync_case: tuple[App, None]
) -> None:
    check_short_run(client, stream, *sync_case)


def test_redis_asyncio_a_short_run_of_keyless_entries_is_dead_lettered(
    client: redis.Redis, stream: str, async_case: tuple[App, str]
) -> None:
    check_short_run(client, stream, *async_case)


# -- NATS JetStream ----------------------------------------------------------------------


@pytest.fixture
def names() -> Iterator[Names]:
    names = Names.fresh()

    async def setup() -> None:
        nc = await nats.connect(broker_url("nats"))
        await declare(nc.jetstream(), names)
        await nc.close()

    asyncio.run(setup())
    yield names

    async def teardown() -> None:
        nc = await nats.connect(broker_url("nats"))
        await delete(nc.jetstream(), names)
        await nc.close()

    asyncio.run(teardown())


async def nats_run(
    names: Names, app: App, url: str, keys: list[str | None], key_header: str, count: int
) -> tuple[list[Settlement], dict[str, int]]:
    """Publish ``keys`` (if any), consume until ``count`` settled; the settlements and the
    streams' state (messages, consumer pending + ack-pending, dead letters)."""
    nc = await nats.connect(broker_url("nats"))
    js = nc.jetstream()
    for key in keys:
        await js.publish(names.subject, b"1.00", headers=None if key is None else {HEADER: key})
    engine = create_async_engine(url)
    settled: list[Settlement] = []
    stop = asyncio.Event()

    def on_settled(settlement: Settlement) -> None:
        settled.append(settlement)
        if len(settled) >= count:
            stop.set()

    try:
        await asyncio.wait_for(
            NatsConsumer(
                js,
                names.stream,
                names.durable,
                session_factory=async_sessionmaker(engine),
                inbox=app.inbox,
                handler=nats_pay(app),
                options=DeliveryOptions(
                    dead_letter=names.dead_subject,
                    key_source=key_header,
                    max_keyless=MAX_KEYLESS,
                    on_settled=on_settled,
                ),
                consumer_name=CONSUMER,
                fetch_timeout=0.3,
            ).run(stop),
            20,
        )
        # +TERM is not confirmed (nats-py sends it without a reply): wait for the server
        for _ in range(100):
            info = await js.consumer_info(names.stream, names.durable)
            if info.num_ack_pending == 0:
                break
            await asyncio.sleep(0.05)
    finally:
        info = await js.consumer_info(names.stream, names.durable)
        state = {
            "messages": (await js.stream_info(names.stream)).state.messages,
            "unsettled": info.num_pending + info.num_ack_pending + info.num_redelivered,
            "dead": (await js.stream_info(names.dead_stream)).state.messages,
        }
        await engine.dispose()
        await nc.close()
    return settled, state


def test_nats_a_misspelled_key_header_stops_the_consumer_and_loses_nothing(
    names: Names, aio_app: App, aio_url: str
) -> None:
    app = aio_app
    keys: list[str | None] = [f"pay-{n}" for n in range(MESSAGES)]
    with pytest.raises(MissingKeyHeader) as info:
        asyncio.run(nats_run(names, app, aio_url, keys, MISSPELLED, MESSAGES))
    assert info.value.deliveries == MAX_KEYLESS and info.value.carried == {HEADER: MAX_KEYLESS}
    assert (app.ledger_rows(), app.inbox_rows()) == (0, 0)
    settled, state = asyncio.run(nats_run(names, app, aio_url, [], HEADER, MESSAGES))
    assert [s.disposition for s in settled] == [Disposition.PROCESSED] * MESSAGES
    assert [s.delivery.delivery_count for s in settled] == [2] * MESSAGES, "nak'd once"
    assert app.ledger_rows() == MESSAGES and app.balance(1) == amounts()
    assert state == {"messages": MESSAGES, "unsettled": 0, "dead": 0}


def test_nats_keyless_messages_spread_over_time_stop_the_consumer_at_the_limit(
    names: Names, aio_app: App, aio_url: str
) -> None:
    """A misspelled key header on a quiet stream (see the RabbitMQ test of that name)."""

    async def main() -> None:
        nc = await nats.connect(broker_url("nats"))
        js = nc.jetstream()

        async def publish() -> None:
            for n in range(MAX_KEYLESS):
                await asyncio.sleep(GAP)
                await js.publish(names.subject, b"1.00", headers={HEADER: f"pay-{n}"})

        publisher = asyncio.create_task(publish())
        try:
            await nats_run(names, aio_app, aio_url, [], MISSPELLED, MESSAGES)
        finally:
            await publisher
            await nc.close()

    with pytest.raises(MissingKeyHeader) as info:
        asyncio.run(main())
    assert (info.value.deliveries, info.value.dead_lettered) == (MAX_KEYLESS, MAX_KEYLESS - 1)
    assert (aio_app.ledger_rows(), aio_app.inbox_rows()) == (0, 0)
    state = asyncio.run(_nats_state(names))
    # the last one given back: past the ack floor, neither acked nor dead-lettered
    assert state == {"messages": MAX_KEYLESS, "unsettled": 1, "dead": MAX_KEYLESS - 1}


async def _nats_state(names: Names) -> dict[str, int]:
    """The streams' messages, the dead letters, and the messages past the durable
    consumer's ack floor (neither acked nor terminated: delivered and held, given back, or
    never delivered), once the server has taken the +TERMs (nats-py sends them without
    waiting for a reply)."""
    nc = await nats.connect(broker_url("nats"))
    js = nc.jetstream()
    try:
        for _ in range(100):
            stream = await js.stream_info(names.stream)
            info = await js.consumer_info(names.stream, names.durable)
            dead = (await js.stream_info(names.dead_stream)).state.messages
            unsettled = stream.state.last_seq - info.ack_floor.stream_seq
            if stream.state.messages - unsettled == dead:
                break
            await asyncio.sleep(0.05)
        return {"messages": stream.state.messages, "unsettled": unsettled, "dead": dead}
    finally:
        await nc.close()


def test_nats_a_short_run_of_keyless_messages_is_dead_lettered(
    names: Names, aio_app: App, aio_url: str
) -> None:
    keys = [None, None, "pay-1", None]
    settled, state = asyncio.run(nats_run(names, aio_app, aio_url, keys, HEADER, 4))
    assert [s.delivery.message_id for s in settled] == [None, None, "pay-1", None]
    assert [s.disposition for s in settled].count(Disposition.DEAD_LETTERED) == 3
    assert aio_app.ledger_rows() == 1 and state["dead"] == 3 and state["unsettled"] == 0


# -- construction ------------------------------------------------------------------------


@pytest.mark.parametrize("make", ["pika", "aio-pika", "redis", "redis-asyncio"])
def test_an_empty_key_source_is_refused_when_the_consumer_is_made(app: App, make: str) -> None:
    from sa_inbox.exc import InvalidArgument

    kw: dict[str, Any] = {"inbox": app.inbox, "handler": rmq.pay(app)}
    rabbit = rmq.options(app, rmq.pay(app), None)
    with pytest.raises(InvalidArgument, match="key_"):
        if make == "pika":
            Consumer("amqp://x/", "q", **with_options({**rabbit, "key_source": ""}))
        elif make == "aio-pika":
            AsyncConsumer(
                "amqp://x/",
                "q",
                **with_options({**rabbit, "session_factory": _async_factory(), "key_source": " "}),
            )
        elif make == "redis":
            RedisConsumer(
                redis.Redis(),
                "s",
                group="g",
                session_factory=app.Session,
                **with_options({**kw, "key_source": " k"}),
            )
        else:
            AsyncRedisConsumer(
                redis.asyncio.Redis(), "s", group="g", session_factory=_async_factory(),
                **with_options({**kw, "key_source": "k "}),
            )  # fmt: skip


def _async_factory() -> Any:
    return async_sessionmaker(create_async_engine("sqlite+aiosqlite://"))
