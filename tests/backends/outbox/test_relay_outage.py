"""A broker that cannot be reached costs the outbox no attempt: the relay gives the claimed
rows back unpublished, waits its ``outage_backoff``, and publishes them once the broker is
back, however long the outage, where a refused message still counts its attempts.

The outages are real: a ``redis-server`` or ``nats-server`` of the test's own, SIGKILLed and
started again on its port; for RabbitMQ and ``redis.asyncio`` a port where nothing listens
(the client's connection is refused), and a TCP proxy to the live RabbitMQ that cuts the
connection mid-batch; the publishes that get through go to the live brokers."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pika
import pytest
import redis
import redis.asyncio
import redis.asyncio.retry
import redis.backoff
import redis.retry
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from sa_inbox import Backoff
from sa_inbox.asyncio import AsyncOutboxRelay
from sa_inbox.brokers.nats import Publisher as NatsPublisher
from sa_inbox.brokers.rabbitmq import AsyncPublisher as AsyncRabbitPublisher
from sa_inbox.brokers.rabbitmq import Publisher as RabbitPublisher
from sa_inbox.brokers.rabbitmq import dead_letter_queue_name, declare_queue
from sa_inbox.brokers.redis import Publisher as RedisPublisher
from sa_inbox.exc import AsyncPublisherInSyncRelay
from sa_inbox.outbox import OutboxMessage, OutboxRelay, RelayBatch
from sa_inbox.outbox.publisher import broker_unavailable
from sa_inbox.outbox.relay import describe
from tests.backends.brokers.test_rabbitmq import amqp_url, channel
from tests.backends.outbox.test_relay_rabbitmq import take
from tests.backends.outbox.test_relay_streams import async_app, oapp, read_stream, record
from tests.conftest import broker_url
from tests.support.outbox_app import OutboxApp

__all__ = ["amqp_url", "async_app", "channel", "oapp"]  # fixtures

pytestmark = pytest.mark.backend

#: Two attempts at most: a relay that counted the outage's rounds would send rows dead.
SETTINGS: dict[str, Any] = {"poll_interval": 0.05, "max_attempts": 2}


#: redis-py's own retries of a refused connection (about 5 s by default in redis-py 8) off:
#: the relay's outage back-off is what is tested.
NO_RETRY: dict[str, Any] = {"retry": redis.retry.Retry(redis.backoff.NoBackoff(), 0)}
ASYNC_NO_RETRY: dict[str, Any] = {"retry": redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0)}


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnServer:
    """A broker server of this test on one port and data directory, to kill and start
    again: ``redis-server`` (no persistence) or ``nats-server -js`` (its JetStream store in
    the directory, so a stream outlives the kill)."""

    def __init__(self, program: str, directory: Path) -> None:
        binary = shutil.which(program)
        if binary is None:
            pytest.fail(f"{program} is not installed (scripts/servers.sh install)")
        self.program, self.directory, self.port = program, directory, closed_port()
        self.argv = [binary, *self._options()]
        self.process: subprocess.Popen[bytes] | None = None

    def _options(self) -> list[str]:
        port, directory = str(self.port), str(self.directory)
        if self.program == "redis-server":
            return ["--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        return ["-js", "-a", "127.0.0.1", "-p", port, "-sd", directory]

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.argv, cwd=self.directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, f"{self.program} did not start"
                time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None


def own_server(program: str, broker: str, directory: Path) -> Iterator[OwnServer]:
    broker_url(broker)  # CI provides the broker (its server program); locally this may skip
    server = OwnServer(program, directory)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnServer]:
    yield from own_server("redis-server", "redis", tmp_path)


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[OwnServer]:
    yield from own_server("nats-server", "nats", tmp_path)


def add_stream(url: str, name: str) -> None:
    """Create the JetStream stream ``name`` capturing the subjects ``<name>.>``."""

    async def add() -> None:
        nc = await nats.connect(url)
        await nc.jetstream().add_stream(name=name, subjects=[f"{name}.>"])
        await nc.close()

    asyncio.run(add())


def statuses(app: OutboxApp, ids: list[str]) -> list[tuple[str, int, str | None]]:
    """(status, attempts, last_error) of the rows of ``ids``, in their order."""
    rows = {r["message_id"]: r for r in app.outbox_rows()}
    return [(rows[i]["status"], rows[i]["attempts"], rows[i]["last_error"]) for i in ids]


def test_a_killed_redis_costs_no_attempt_and_its_rows_go_out_once_it_is_back(
    oapp: OutboxApp, own_redis: OwnServer
) -> None:
    stream = f"sa-inbox-outbox:{uuid.uuid4().hex}"
    client = redis.Redis(port=own_redis.port, socket_timeout=5, **NO_RETRY)
    relay = OutboxRelay(oapp.engine, oapp.outbox, RedisPublisher(client), **SETTINGS)
    before = record(oapp, stream, 2)
    assert relay.run_once() == RelayBatch(claimed=2, dispatched=2)

    own_redis.kill()
    during = record(oapp, stream, 4)
    assert relay.run_once() == RelayBatch(claimed=4, released=4)
    assert statuses(oapp, during) == [("pending", 0, None)] * 4

    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the relay's waits; the broker returns at the third
        waits.append(seconds)
        if len(waits) == 3:
            own_redis.start()

    total = relay.run(until_empty=True, sleep=sleep)
    assert waits == [1.0, 2.0, 4.0]  # outage_backoff: 1 s doubling, no attempt counted
    assert (total.dispatched, total.released, total.retried, total.dead) == (4, 12, 0, 0)
    assert statuses(oapp, before + during) == [("dispatched", 1, None)] * 6
    # the restarted server (no persistence) holds exactly the outage's rows, once, in order
    assert [m for m, _, _ in read_stream(client, stream)] == during
    client.close()


def test_a_refused_rabbitmq_connection_costs_no_attempt(oapp: OutboxApp, channel: Any) -> None:
    queue = f"sa-inbox-outbox-{uuid.uuid4().hex[:12]}"
    declare_queue(channel, queue)
    try:
        ids = record(oapp, queue, 3)
        down = RabbitPublisher(f"amqp://guest:guest@127.0.0.1:{closed_port()}/")
        relay = OutboxRelay(oapp.engine, oapp.outbox, down, **SETTINGS)
        for _ in range(3):
            assert relay.run_once() == RelayBatch(claimed=3, released=3)
        assert statuses(oapp, ids) == [("pending", 0, None)] * 3

        up = RabbitPublisher(broker_url("rabbitmq"))
        try:
            relay.publisher = up
            assert relay.run(until_empty=True).dispatched == 3
        finally:
            up.close()
        assert statuses(oapp, ids) == [("dispatched", 1, None)] * 3
        got = [channel.basic_get(queue, auto_ack=True)[1].message_id for _ in ids]
        assert got == ids
    finally:
        channel.queue_delete(queue)
        channel.queue_delete(dead_letter_queue_name(queue))


def test_a_refused_message_still_counts_its_attempts(oapp: OutboxApp) -> None:
    """``WRONGTYPE`` (the key is not a stream) is the message's: retried, then dead."""
    client = redis.Redis.from_url(broker_url("redis"))
    key = f"sa-inbox-outbox:{uuid.uuid4().hex}"
    client.set(key, "not a stream")
    try:
        (message_id,) = record(oapp, key, 1)
        publisher = RedisPublisher(client)
        settings = {**SETTINGS, "backoff": Backoff(0.05, 0.05)}
        total = OutboxRelay(oapp.engine, oapp.outbox, publisher, **settings).run(until_empty=True)
        assert (total.retried, total.dead, total.released) == (1, 1, 0)
        ((status, attempts, error),) = statuses(oapp, [message_id])
        assert (status, attempts) == ("dead", 2) and error is not None and "WRONGTYPE" in error
    finally:
        client.delete(key)
        client.close()


def test_the_async_relay_gives_rows_back_while_redis_refuses_connections(
    async_app: tuple[str, OutboxApp],
) -> None:
    url, app = async_app
    stream = f"sa-inbox-outbox:{uuid.uuid4().hex}"
    ids = record(app, stream, 3)

    async def run() -> tuple[RelayBatch, RelayBatch]:
        engine = create_async_engine(url)
        down = redis.asyncio.Redis(port=closed_port(), **ASYNC_NO_RETRY)
        up = redis.asyncio.Redis.from_url(broker_url("redis"))
        try:
            relay = AsyncOutboxRelay(engine, app.outbox, RedisPublisher(down), **SETTINGS)
            outage = await relay.run_once()
            assert statuses(app, ids) == [("pending", 0, None)] * 3
            relay.publisher = RedisPublisher(up)
            return outage, await relay.run(until_empty=True)
        finally:
            await down.aclose()
            await up.aclose()
            await engine.dispose()

    outage, total = asyncio.run(run())
    assert outage == RelayBatch(claimed=3, released=3) and total.dispatched == 3
    assert statuses(app, ids) == [("dispatched", 1, None)] * 3
    client = redis.Redis.from_url(broker_url("redis"))
    try:
        assert [m for m, _, _ in read_stream(client, stream)] == ids
    finally:
        client.delete(stream)
        client.close()


def test_which_errors_mean_the_broker_was_unreachable() -> None:
    """Each publisher's ``is_unavailable`` on errors its client raised for real: a refused
    connection is unreachable, a refused message is not; without the method, an OSError."""
    port = closed_port()
    with pytest.raises(pika.exceptions.AMQPConnectionError) as amqp:
        pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/"))
    with pytest.raises(redis.exceptions.ConnectionError) as refused:
        redis.Redis(port=port, **NO_RETRY).ping()
    rabbit = RabbitPublisher(f"amqp://127.0.0.1:{port}/")
    streams = RedisPublisher(redis.Redis(port=port, **NO_RETRY))
    assert broker_unavailable(rabbit, amqp.value)
    assert broker_unavailable(streams, refused.value)
    assert not broker_unavailable(rabbit, pika.exceptions.UnroutableError([]))
    assert not broker_unavailable(streams, redis.exceptions.ResponseError("WRONGTYPE"))
    assert broker_unavailable(object(), ConnectionRefusedError())
    assert not broker_unavailable(object(), ValueError("refused"))
    # pika's message is empty (its cause is in its arguments): the text recorded is not
    assert str(amqp.value) == "" and "Connection refused" in describe(amqp.value)
    assert describe(ValueError("x")) == "ValueError: x"


def test_a_killed_nats_server_costs_no_attempt_and_jetstream_stores_each_row_once(
    tmp_path: Path, own_nats: OwnServer
) -> None:
    """The JetStream publisher's client reconnects by itself; while the server is down each
    publish waits ``timeout`` for its PubAck (``nats.errors.TimeoutError``: unreachable).
    A publish buffered during the outage may still reach the stream after the reconnect and
    is sent again: the ``Nats-Msg-Id`` duplicate window stores it once. One database is
    enough here: the database side is the same as in the Redis test."""
    app = OutboxApp(sa.create_engine(f"sqlite:///{tmp_path}/outbox.db"))
    app.reset()
    subject = f"outage.{uuid.uuid4().hex[:8]}"
    url = f"nats://127.0.0.1:{own_nats.port}"

    add_stream(url, "outage")
    publisher = NatsPublisher(url, timeout=0.5)
    try:
        relay = OutboxRelay(app.engine, app.outbox, publisher, **SETTINGS)
        own_nats.kill()
        ids = record(app, subject, 3)
        assert relay.run_once() == RelayBatch(claimed=3, released=3)
        assert statuses(app, ids) == [("pending", 0, None)] * 3
        own_nats.start()
        total = relay.run(until_empty=True, sleep=time.sleep)  # real waits: the reconnect
    finally:
        publisher.close()
    assert (total.dispatched, total.retried, total.dead) == (3, 0, 0)
    assert statuses(app, ids) == [("dispatched", 1, None)] * 3

    async def stored() -> list[str]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        sub = await js.pull_subscribe(subject, durable="check", stream="outage")
        msgs = await sub.fetch(10, timeout=2)
        await nc.close()
        return [m.headers["Nats-Msg-Id"] for m in msgs if m.headers]

    assert asyncio.run(stored()) == ids
    app.drop()
    app.engine.dispose()


class CuttingProxy:
    """A TCP proxy to a live broker that drops its connections mid-stream: once ``cut_after``
    bytes went from the client to the broker it closes both sockets of every connection and
    stops listening (a connection lost mid-batch, then refused), as a broker that dies or a
    network that fails does. Three threads: the listener and one pump per direction."""

    def __init__(self, url: str, cut_after: int) -> None:
        parsed = sa.make_url(url.replace("amqp://", "amqp+x://", 1))
        self.upstream = (parsed.host or "127.0.0.1", int(parsed.port or 5672))
        self.cut_after, self.sent = cut_after, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            with self.lock:
                self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()
            self._pump(client, upstream, True)

    def _pump(self, source: socket.socket, target: socket.socket, counted: bool) -> None:
        while True:
            try:
                data = source.recv(65536)
                if counted:
                    self.sent += len(data)
                    if self.sent > self.cut_after:
                        self.cut()
                        return
                target.sendall(data)
            except OSError:
                return
            if not data:
                return

    def cut(self) -> None:
        with self.lock:
            self.listener.close()
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def test_a_rabbitmq_connection_lost_mid_batch_costs_the_async_relay_no_attempt(
    async_app: tuple[str, OutboxApp], channel: Any, amqp_url: str
) -> None:
    """rabbitmq.AsyncPublisher.publish_many: the connection drops while the batch's confirms are
    awaited; the messages not confirmed (those cut off and those the closed channel no longer
    took) are given back, none counts an attempt, and every row reaches the queue."""
    url, app = async_app
    queue = f"sa-inbox-outbox-{uuid.uuid4().hex[:12]}"
    declare_queue(channel, queue)
    try:
        ids = record(app, queue, 1000)  # ~250 bytes per publish: cut about halfway
        proxy = CuttingProxy(amqp_url, cut_after=100_000)

        async def run() -> tuple[RelayBatch, RelayBatch]:
            engine = create_async_engine(url)
            cut, up = AsyncRabbitPublisher(f"amqp://guest:guest@127.0.0.1:{proxy.port}/"), None
            try:
                settings = {**SETTINGS, "batch_size": 1000}
                relay = AsyncOutboxRelay(engine, app.outbox, cut, **settings)
                outage = await relay.run_once()
                relay.publisher = up = AsyncRabbitPublisher(amqp_url)
                return outage, await relay.run(until_empty=True)
            finally:
                await cut.close()
                if up is not None:
                    await up.close()
                await engine.dispose()

        outage, total = asyncio.run(run())
        assert proxy.sent > proxy.cut_after  # the connection was cut during the batch
        assert (outage.claimed, outage.retried, outage.dead) == (1000, 0, 0)
        assert outage.dispatched + outage.released == 1000 and outage.released > 0
        assert (total.dispatched, total.retried, total.dead) == (outage.released, 0, 0)
        assert statuses(app, ids) == [("dispatched", 1, None)] * 1000
        got = [m for m, _, _ in take(channel, queue)]
        assert set(got) == set(ids)  # a publish cut off may have reached the queue: twice
    finally:
        channel.queue_delete(queue)
        channel.queue_delete(dead_letter_queue_name(queue))


@contextlib.contextmanager
def core_subscriber(url: str, subject: str) -> Iterator[None]:
    """A plain NATS subscription to ``subject`` (no stream), on a connection and event loop
    of its own thread: a JetStream publish to the subject then gets neither a PubAck nor the
    server's "no responders", only a timeout, from a server that is up."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    nc = asyncio.run_coroutine_threadsafe(nats.connect(url), loop).result(10)
    try:
        asyncio.run_coroutine_threadsafe(nc.subscribe(subject), loop).result(10)
        yield
    finally:
        asyncio.run_coroutine_threadsafe(nc.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def test_a_subject_without_a_stream_but_with_a_subscriber_counts_and_holds_up_no_row(
    oapp: OutboxApp,
) -> None:
    """The server is up and JetStream answers, so a missing PubAck is the message's: its
    attempts count (dead at ``max_attempts``) and the rows after it are published; were it
    taken for an outage, the row would be given back forever and hold up every row behind
    it (the one-by-one publish stops at an unreachable broker)."""
    url = broker_url("nats")
    name = f"rev{uuid.uuid4().hex[:8]}"
    stray, captured = f"{name}.stray", f"{name}.stream"

    async def stream(add: bool) -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await (js.add_stream(name=name, subjects=[captured]) if add else js.delete_stream(name))
        await nc.close()

    asyncio.run(stream(add=True))
    publisher = NatsPublisher(url, timeout=0.5)
    try:
        with core_subscriber(url, stray):
            (lost,) = record(oapp, stray, 1)
            kept = record(oapp, captured, 2)
            settings = {**SETTINGS, "backoff": Backoff(0.05, 0.05)}
            relay = OutboxRelay(oapp.engine, oapp.outbox, publisher, **settings)
            waits: list[float] = []

            def sleep(seconds: float) -> None:  # at most 0.1 s, and a bound on the rounds
                waits.append(seconds)
                time.sleep(min(seconds, 0.1))
                if len(waits) == 10:
                    relay.stop()

            total = relay.run(until_empty=True, sleep=sleep)
    finally:
        publisher.close()
        asyncio.run(stream(add=False))
    assert (total.dispatched, total.dead, total.released) == (2, 1, 0)
    assert statuses(oapp, kept) == [("dispatched", 1, None)] * 2
    ((status, attempts, _),) = statuses(oapp, [lost])
    assert (status, attempts) == ("dead", 2)


def test_the_blocking_jetstream_publisher_comes_back_after_its_client_gave_up(
    tmp_path: Path, own_nats: OwnServer
) -> None:
    """nats-py stops reconnecting after ``max_reconnect_attempts`` (60 by default, 2 s
    apart, counted while its loop runs: during publishes) and closes the connection; an
    outage longer than that must not leave the relay giving rows back forever once the
    server is back. Here the client gives up after one attempt."""
    app = OutboxApp(sa.create_engine(f"sqlite:///{tmp_path}/outbox.db"))
    app.reset()
    url = f"nats://127.0.0.1:{own_nats.port}"

    add_stream(url, "giveup")
    options = {"max_reconnect_attempts": 1, "reconnect_time_wait": 0.1}
    publisher = NatsPublisher(url, timeout=0.5, connect_options=options)
    try:
        relay = OutboxRelay(app.engine, app.outbox, publisher, **SETTINGS)
        own_nats.kill()
        ids = record(app, "giveup.x", 2)
        outages = [relay.run_once() for _ in range(3)]  # the client gives up meanwhile
        assert outages == [RelayBatch(claimed=2, released=2)] * 3
        own_nats.start()
        waits: list[float] = []

        def sleep(seconds: float) -> None:  # at most 0.1 s, and a bound on the rounds
            waits.append(seconds)
            time.sleep(min(seconds, 0.1))
            if len(waits) == 10:
                relay.stop()

        total = relay.run(until_empty=True, sleep=sleep)
    finally:
        publisher.close()
    assert (total.dispatched, total.retried, total.dead) == (2, 0, 0)
    assert statuses(app, ids) == [("dispatched", 1, None)] * 2
    app.drop()
    app.engine.dispose()


#: Seconds the publishers of the two tests below wait for a connection.
TIMEOUT = 0.5
#: Seconds nats-py spends retrying a connection by default (max_reconnect_attempts 60,
#: reconnect_time_wait 2 s): what the publisher's own timeout must cut short.
NATS_RECONNECTING = 60 * 2.0


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A loopback port that accepts connections and never answers (a hung broker); yields
    the port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        server.close()


def test_a_rabbitmq_that_accepts_but_never_answers_costs_the_async_relay_no_attempt(
    oapp: OutboxApp,
) -> None:
    """rabbitmq.AsyncPublisher's ``timeout`` (aio-pika waits for ever by default): the connection
    to a broker that accepts and never answers ends in ``TimeoutError`` after ``timeout``,
    the rows are given back, none counts an attempt (a relay waiting for ever would hold
    them until another relay takes them over after the visibility timeout, which counts)."""
    if oapp.engine.dialect.name != "sqlite":
        pytest.skip("the database side is the same on every backend; SQLite is enough")
    ids = record(oapp, "payments", 3)
    url = str(oapp.engine.url).replace("sqlite://", "sqlite+aiosqlite://")

    async def run(port: int) -> tuple[RelayBatch, float]:
        engine = create_async_engine(url)
        publisher = AsyncRabbitPublisher(f"amqp://guest:guest@127.0.0.1:{port}/", timeout=TIMEOUT)
        try:
            relay = AsyncOutboxRelay(engine, oapp.outbox, publisher, **SETTINGS)
            started = time.monotonic()
            batch = await asyncio.wait_for(relay.run_once(), 30)  # fails, not hangs, without it
            return batch, time.monotonic() - started
        finally:
            await publisher.close()
            await engine.dispose()

    with silent_listener() as port:
        batch, took = asyncio.run(run(port))
    assert batch == RelayBatch(claimed=3, released=3)
    # Ended by the timeout: it waited that long (and not for ever: wait_for above).
    assert took >= TIMEOUT
    assert statuses(oapp, ids) == [("pending", 0, None)] * 3


def test_the_blocking_jetstream_publisher_starts_while_the_server_is_down(
    tmp_path: Path, own_nats: OwnServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``sa-inbox relay``'s NATS publisher connects at its first publish, within ``timeout``:
    created while the server is down, it gives the rows back (no attempt) instead of
    retrying its connection for minutes before the relay starts, and nats-py's reconnect
    errors are one DEBUG line each, not a traceback each; once the server is back the rows
    go out."""
    app = OutboxApp(sa.create_engine(f"sqlite:///{tmp_path}/outbox.db"))
    app.reset()
    url = f"nats://127.0.0.1:{own_nats.port}"
    own_nats.kill()
    ids = record(app, "down.x", 2)
    publisher = NatsPublisher(url, timeout=TIMEOUT)  # the server is down: no wait
    try:
        relay = OutboxRelay(app.engine, app.outbox, publisher, **SETTINGS)
        started = time.monotonic()
        assert relay.run_once() == RelayBatch(claimed=2, released=2)
        assert time.monotonic() - started < NATS_RECONNECTING / 2  # not nats-py's retries
        assert statuses(app, ids) == [("pending", 0, None)] * 2
        assert not [r for r in caplog.records if r.levelno >= 40 and "nats" in r.name]
        own_nats.start()

        add_stream(url, "down")
        assert relay.run(until_empty=True, sleep=time.sleep).dispatched == 2
    finally:
        publisher.close()
    assert statuses(app, ids) == [("dispatched", 1, None)] * 2
    app.drop()
    app.engine.dispose()


class AsyncPublisher:
    """A publisher written for the async relay (``async def publish``)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def publish(self, message: OutboxMessage) -> None:
        self.sent.append(message.message_id)


@pytest.mark.parametrize("kind", ["async def", "redis.asyncio client"])
def test_the_sync_relay_refuses_an_async_publisher_and_marks_nothing_dispatched(
    oapp: OutboxApp, kind: str
) -> None:
    """The coroutine an async ``publish`` returns is no confirm: the sync relay refuses an
    ``async def publish`` when it is made, and a publisher returning awaitables from a plain
    method (redis.Publisher on a redis.asyncio client) at its first publish, giving the
    batch back (no attempt counted). Either way a configuration error, raised to the caller."""
    ids = record(oapp, "payments", 3)
    if kind == "async def":
        publisher: Any = AsyncPublisher()
        with pytest.raises(AsyncPublisherInSyncRelay, match="AsyncOutboxRelay"):
            OutboxRelay(oapp.engine, oapp.outbox, publisher, **SETTINGS)
    else:  # redis.Publisher is sync or async by its client; nothing listens here
        publisher = RedisPublisher(redis.asyncio.Redis(port=closed_port()))
        relay = OutboxRelay(oapp.engine, oapp.outbox, publisher, **SETTINGS)
        with pytest.raises(AsyncPublisherInSyncRelay, match="AsyncOutboxRelay"):
            relay.run_once()
    assert statuses(oapp, ids) == [("pending", 0, None)] * 3
    assert getattr(publisher, "sent", []) == []
