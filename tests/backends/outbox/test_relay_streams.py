"""The relay to the live Redis and NATS JetStream: the sync relay with a Redis client, the
asyncio relay (:class:`AsyncOutboxRelay`) on each async driver with ``redis.asyncio`` and
with JetStream; the key each adapter reads is the outbox's message_id, and a republished row
is dropped by JetStream's duplicate window."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import Any

import nats
import pytest
import redis
import redis.asyncio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from sa_inbox import Backoff
from sa_inbox.asyncio import AsyncOutboxRelay
from sa_inbox.brokers.nats import AsyncPublisher as AsyncNatsPublisher
from sa_inbox.brokers.nats import Publisher as NatsPublisher
from sa_inbox.brokers.redis import Publisher as RedisPublisher
from sa_inbox.brokers.redis import StreamSettings, to_delivery
from sa_inbox.brokers.redis.core import Entry
from sa_inbox.outbox import OutboxRelay
from tests.conftest import ASYNC_DRIVERS as DRIVERS
from tests.conftest import async_driver_url, broker_url
from tests.support.app import sync_driver_url
from tests.support.outbox_app import OutboxApp

pytestmark = pytest.mark.backend

FAST: dict[str, Any] = {"poll_interval": 0.05}


@pytest.fixture
def oapp(engine: sa.Engine) -> Iterator[OutboxApp]:
    app = OutboxApp(engine)
    app.reset()
    yield app
    app.drop()


@pytest.fixture(params=list(DRIVERS))
def async_app(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[tuple[str, OutboxApp]]:
    """(async URL, the app made through the sync driver of the same database)."""
    url = async_driver_url(request.param, tmp_path)
    app = OutboxApp(sa.create_engine(sync_driver_url(url)))
    app.reset()
    yield url, app
    app.drop()
    app.engine.dispose()


def record(app: OutboxApp, destination: str, count: int) -> list[str]:
    with app.Session() as session, session.begin():
        return [
            app.outbox.publish(session, destination, f"{n}".encode(), headers={"n": str(n)})
            for n in range(count)
        ]


def read_stream(client: redis.Redis, stream: str) -> list[tuple[str | None, bytes, str]]:
    """Each entry as the Redis adapter maps it: (message_id, body, header ``n``)."""
    settings = StreamSettings(stream=stream, group="g", member="m")
    out = []
    for entry_id, fields in client.xrange(stream):
        delivery = to_delivery(Entry(entry_id.decode(), fields, 1), settings)
        out.append((delivery.message_id, delivery.body, delivery.headers["n"]))
    return out


def test_the_sync_relay_xadds_each_row_with_its_key_field(oapp: OutboxApp) -> None:
    client = redis.Redis.from_url(broker_url("redis"))
    stream = f"sa-inbox-outbox:{uuid.uuid4().hex}"
    try:
        ids = record(oapp, stream, 3)
        relay = OutboxRelay(oapp.engine, oapp.outbox, RedisPublisher(client), **FAST)
        assert relay.run(until_empty=True).dispatched == 3
        assert read_stream(client, stream) == [
            (i, str(n).encode(), str(n)) for n, i in enumerate(ids)
        ]
        assert {r["status"] for r in oapp.outbox_rows()} == {"dispatched"}
    finally:
        client.delete(stream)
        client.close()


def test_the_async_relay_with_redis_asyncio(async_app: tuple[str, OutboxApp]) -> None:
    url, app = async_app
    stream = f"sa-inbox-outbox:{uuid.uuid4().hex}"
    ids = record(app, stream, 3)

    async def run() -> int:
        engine = create_async_engine(url)
        client = redis.asyncio.Redis.from_url(broker_url("redis"))
        try:
            relay = AsyncOutboxRelay(engine, app.outbox, RedisPublisher(client), **FAST)
            return (await relay.run(until_empty=True)).dispatched
        finally:
            await client.aclose()
            await engine.dispose()

    sync_client = redis.Redis.from_url(broker_url("redis"))
    try:
        assert asyncio.run(run()) == 3
        assert [m for m, _, _ in read_stream(sync_client, stream)] == ids
    finally:
        sync_client.delete(stream)
        sync_client.close()
    assert {r["status"] for r in app.outbox_rows()} == {"dispatched"}


def test_the_async_relay_to_jetstream_and_a_republish_inside_the_duplicate_window(
    async_app: tuple[str, OutboxApp],
) -> None:
    url, app = async_app
    prefix = os.environ.get("SA_INBOX_TEST_NATS_PREFIX", "")
    token = f"{prefix}_{uuid.uuid4().hex[:10]}" if prefix else uuid.uuid4().hex[:10]
    stream, subject = f"{token}_out", f"{token}.out"
    ids = record(app, subject, 3)

    async def run() -> tuple[int, list[str | None], list[bool]]:
        engine = create_async_engine(url)
        nc = await nats.connect(broker_url("nats"))
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[subject])
        try:
            relay = AsyncOutboxRelay(engine, app.outbox, AsyncNatsPublisher(js), **FAST)
            assert (await relay.run(until_empty=True)).dispatched == 3
            # A relay killed after the PubAck and before the mark publishes the rows again:
            with app.engine.begin() as conn:
                conn.execute(sa.update(app.outbox.table).values(status="pending"))
            assert (await relay.run(until_empty=True)).dispatched == 3
            info = await js.stream_info(stream)
            sub = await js.pull_subscribe(subject, durable=f"{token}_check", stream=stream)
            msgs = await sub.fetch(3, timeout=2)
            again = await js.publish(subject, b"x", headers={"Nats-Msg-Id": ids[0]})
            return (
                info.state.messages,
                [m.headers.get("Nats-Msg-Id") for m in msgs],
                [again.duplicate or False],
            )
        finally:
            await js.delete_stream(stream)
            await nc.close()
            await engine.dispose()

    stored, keys, duplicate = asyncio.run(run())
    assert stored == 3 and keys == ids and duplicate == [True]


def test_refused_publishes_back_off_then_go_dead(oapp: OutboxApp) -> None:
    """Redis: ``XADD`` to a key that is not a stream is refused (``WRONGTYPE``); NATS: a
    subject no stream captures gets no PubAck (nats-py: NoStreamResponseError). Neither row
    is marked dispatched: each is retried after its back-off, then dead at max_attempts."""
    client = redis.Redis.from_url(broker_url("redis"))
    key = f"sa-inbox-outbox:{uuid.uuid4().hex}"
    client.set(key, "not a stream")
    prefix = os.environ.get("SA_INBOX_TEST_NATS_PREFIX", "")
    subject = f"{prefix or 'sa'}.nostream.{uuid.uuid4().hex[:8]}"
    try:
        record(oapp, key, 1)
        settings: dict[str, Any] = {"max_attempts": 2, "backoff": Backoff(0.05, 0.05), **FAST}
        redis_relay = OutboxRelay(oapp.engine, oapp.outbox, RedisPublisher(client), **settings)
        assert redis_relay.run(until_empty=True).dead == 1
        (dead,) = oapp.outbox_rows("dead")
        assert dead["attempts"] == 2 and "WRONGTYPE" in dead["last_error"]
    finally:
        client.delete(key)
        client.close()

    record(oapp, subject, 1)
    publisher = NatsPublisher(broker_url("nats"), timeout=1.0)
    try:
        nats_relay = OutboxRelay(oapp.engine, oapp.outbox, publisher, **settings)
        assert nats_relay.run(until_empty=True).dead == 1
    finally:
        publisher.close()
    dead_rows = oapp.outbox_rows("dead")
    assert len(dead_rows) == 2 and "NoStreamResponseError" in dead_rows[1]["last_error"]
