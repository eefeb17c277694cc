"""A database outage under live consumers: every broker adapter consumes while the database
is SIGKILLed, left down, and restarted (``scripts/servers.sh kill`` / ``restart``).

:func:`run_outage` starts one *lane* per adapter (its own queue, stream or JetStream
stream, its own consumer name and account), each consumed in a thread of this process by
the adapter under test (RabbitMQ's ``Consumer`` on pika and ``AsyncConsumer`` on aio-pika,
Redis Streams' ``Consumer`` and ``AsyncConsumer``, NATS ``AsyncConsumer``, the FastStream
``InboxMiddleware`` on RabbitMQ, a Celery ``inbox_task`` in an embedded worker, the SQS
``Consumer`` and ``AsyncConsumer`` on moto), publishes
to every lane at ``rate`` messages per second, kills the database after ``lead`` seconds,
restarts it ``outage`` seconds later, publishes ``tail`` seconds more, and waits until
every lane has applied what it was sent. Then it reads the business state: each lane's
ledger rows by ``message_id`` (lost: published and not in the ledger; doubled: more than
one row), its settlements (dead letters, retries, the largest delivery count) and its log
records of the outage gate (one WARNING, one INFO per outage; no traceback).

Used by ``tests/backends/outages`` (a small set) and ``benchmarks/db_outage.py`` (the
matrix with published figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import Inbox
from sa_inbox.brokers import Delivery, DeliveryOptions, Disposition, Settlement
from sa_inbox.brokers.rabbitmq.message import dead_letter_queue_name
from sa_inbox.outage import DEFAULT_OUTAGE_BACKOFF
from tests.support.options import with_options

ROOT = Path(__file__).resolve().parents[2]
SERVERS_SH = ROOT / "scripts" / "servers.sh"

LANES = (
    "pika",
    "aio-pika",
    "redis",
    "redis-async",
    "nats",
    "faststream",
    "celery",
    "store-worker",
    "relay",
    "sqs",
    "sqs-async",
)
#: The sync and async driver of each database under test.
DRIVERS = {
    "postgresql": ("postgresql+psycopg", "postgresql+asyncpg"),
    "mysql": ("mysql+pymysql", "mysql+aiomysql"),
}
URL_VARIABLES = {"postgresql": "SA_INBOX_TEST_POSTGRESQL_URL", "mysql": "SA_INBOX_TEST_MYSQL_URL"}
#: Seconds a lane's entry / message stays unacked before the broker may hand it out again
#: (Redis visibility timeout, JetStream ack_wait): short, so that a lost settlement shows.
LEASE = 3.0
#: The SQS lanes' visibility timeout: their heartbeat sets it again each third of it, and
#: each of those calls goes through moto, which a busy machine slows by seconds.
SQS_LEASE = LEASE * 2
#: A generous bound on one delivery's round trip here (claim, change, commit, ack), in
#: seconds: the drain after the restart is bounded by it times the messages of a lane.
PER_MESSAGE = 0.1

logger = logging.getLogger("tests.db_outage")


@dataclass
class LaneFigures:
    """What one lane saw (see the module)."""

    lane: str
    database: str
    outage_seconds: float
    rate: float
    published: int = 0
    #: Publishes tried: a publish that raised may still have reached the broker.
    attempted: int = 0
    applied: int = 0
    lost: int = 0
    doubled: int = 0
    dead_letters: int = 0
    retries: int = 0
    duplicates: int = 0
    max_delivery_count: int = 0
    outage_warnings: int = 0
    outage_infos: int = 0
    connection_losses: int = 0
    reconnections: int = 0
    tracebacks: int = 0
    stopped_early: bool = False
    drain_seconds: float = 0.0
    outage_measured: float = 0.0
    #: Messages the broker still hid from every receiver when the server came back (the
    #: SQS lanes: ``ApproximateNumberOfMessagesNotVisible``, the ones the consumer held
    #: through the outage); None where not measured.
    hidden_at_restart: int | None = None


@dataclass
class Records(logging.Handler):
    """The log records of sa-inbox's loggers during a run."""

    records: list[logging.LogRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lock_ = threading.Lock()

    def __hash__(self) -> int:
        return id(self)

    def emit(self, record: logging.LogRecord) -> None:
        with self.lock_:
            self.records.append(record)

    def actions(self, token: str, action: str) -> list[logging.LogRecord]:
        """The records of ``action`` (``extra["action"]``) naming ``token``."""
        return [
            r
            for r in self.records
            if getattr(r, "action", None) == action and token in r.getMessage()
        ]

    def of(self, consumer_name: str, event: str) -> list[logging.LogRecord]:
        return [
            r
            for r in self.records
            if getattr(r, "event", None) == event
            and getattr(r, "consumer_name", None) == consumer_name
        ]


@contextlib.contextmanager
def recording() -> Iterator[Records]:
    handler = Records()
    root = logging.getLogger("sa_inbox")
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


class Ledger:
    """The lanes' business tables: one ledger row per applied payment, and the inbox."""

    def __init__(self, url: str) -> None:
        token = uuid.uuid4().hex[:8]
        self.metadata = sa.MetaData()
        self.inbox = Inbox(self.metadata, table_name=f"outage_inbox_{token}")
        self.table = sa.Table(
            f"outage_ledger_{token}",
            self.metadata,
            sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
            sa.Column("message_id", sa.String(255), nullable=False),
            sa.Column("lane", sa.String(40), nullable=False),
            sa.Column("amount", sa.Numeric(14, 2), nullable=False),
        )
        self.engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        self.metadata.create_all(self.engine)

    def statement(self, lane: str, message_id: str) -> sa.Insert:
        return self.table.insert().values(message_id=message_id, lane=lane, amount=Decimal("1.00"))

    def rows(self, lane: str) -> Counter[str]:
        query = (
            sa.select(self.table.c.message_id, sa.func.count())
            .where(self.table.c.lane == lane)
            .group_by(self.table.c.message_id)
        )
        with self.engine.connect() as conn:
            return Counter({m: int(n) for m, n in conn.execute(query)})

    def applied(self, lane: str) -> int:
        query = sa.select(sa.func.count(sa.distinct(self.table.c.message_id))).where(
            self.table.c.lane == lane
        )
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            self.metadata.drop_all(self.engine)
        self.engine.dispose()


@dataclass
class Urls:
    """Where the brokers and the database are."""

    database: str
    sync_db: str
    async_db: str
    amqp: str
    redis: str
    nats: str
    sqs: str

    @classmethod
    def from_environment(cls, database: str) -> Urls:
        base = sa.make_url(os.environ[URL_VARIABLES[database]])
        sync, asynchronous = DRIVERS[database]
        return cls(
            database,
            base.set(drivername=sync).render_as_string(hide_password=False),
            base.set(drivername=asynchronous).render_as_string(hide_password=False),
            os.environ["SA_INBOX_TEST_AMQP_URL"],
            os.environ["SA_INBOX_TEST_REDIS_URL"],
            os.environ["SA_INBOX_TEST_NATS_URL"],
            os.environ["SA_INBOX_TEST_SQS_URL"],
        )


class Lane:
    """One adapter consuming its own queue / stream, and its publisher (see the module)."""

    name = ""

    def __init__(self, urls: Urls, ledger: Ledger) -> None:
        self.urls = urls
        self.ledger = ledger
        self.token = f"outage_{self.name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        self.consumer_name = self.token
        self.settlements: list[Settlement] = []
        self._lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    # the settlement tally, shared by every adapter (on_settled)
    def settled(self, settlement: Settlement) -> None:
        with self._lock:
            self.settlements.append(settlement)

    def handler(self, session: Session, delivery: Delivery) -> None:
        assert delivery.message_id is not None
        session.execute(self.ledger.statement(self.name, delivery.message_id))

    async def handler_async(self, session: AsyncSession, delivery: Delivery) -> None:
        assert delivery.message_id is not None
        await session.execute(self.ledger.statement(self.name, delivery.message_id))

    def start(self) -> None:
        self.thread = threading.Thread(target=self._guarded, name=self.name, daemon=True)
        self.thread.start()

    def _guarded(self) -> None:
        try:
            self.consume()
        except BaseException as exc:  # reported by the run
            self.error = exc
            logger.exception("lane %s stopped", self.name)

    def applied(self) -> Counter[str]:
        """Applied ids and how often: the ledger's rows of this lane."""
        return self.ledger.rows(self.name)

    def deliveries(self) -> tuple[Counter[Disposition], int]:
        """The settlements by disposition, and the largest delivery count."""
        settlements = list(self.settlements)
        counts = [s.delivery.delivery_count for s in settlements]
        return Counter(s.disposition for s in settlements), max(counts, default=0)

    def outage_ending(self) -> None:
        """Called just before the killed server is restarted (the broker's state then)."""

    # specialised by each lane
    def setup(self) -> None: ...
    def consume(self) -> None: ...
    def publish(self, message_id: str) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


class _LoopLane(Lane):
    """A lane whose consumer runs on an event loop of its own thread."""

    loop: asyncio.AbstractEventLoop

    def consume(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.loop.run_until_complete(self.consume_async())
        finally:
            self.loop.close()

    async def consume_async(self) -> None: ...


class _RabbitPublisher:
    """Publishes to a queue from the publisher's thread (one pika connection)."""

    def __init__(self, url: str, queue: str, header: str | None = None) -> None:
        self.url = url
        self.queue = queue
        self.header = header
        self.connection: Any = None
        self._connect()

    def _connect(self) -> None:
        import pika

        self.close()
        self.connection = pika.BlockingConnection(pika.URLParameters(self.url))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def publish(self, message_id: str) -> None:
        """Publish, confirmed; after a failure the next publish connects again."""
        import pika

        if self.connection is None or not self.connection.is_open:
            self._connect()
        headers = {self.header: message_id} if self.header else None
        properties = pika.BasicProperties(
            message_id=message_id, headers=headers, delivery_mode=2, content_type="application/json"
        )
        try:
            self.channel.basic_publish("", self.queue, b"{}", properties)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.connection is not None:
                self.connection.close()
        self.connection = None


def _declare_quorum(url: str, queue: str) -> None:
    import pika

    from sa_inbox.brokers.rabbitmq import declare_queue

    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        declare_queue(connection.channel(), queue)
    finally:
        connection.close()


def _delete_queues(url: str, *queues: str) -> None:
    import pika

    with contextlib.suppress(Exception):
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        for queue in queues:
            channel.queue_delete(queue)
        connection.close()


class PikaLane(Lane):
    name = "pika"

    def setup(self) -> None:
        _declare_quorum(self.urls.amqp, self.token)
        self.publisher = _RabbitPublisher(self.urls.amqp, self.token)

    def consume(self) -> None:
        from sa_inbox.brokers.rabbitmq import Consumer

        engine = sa.create_engine(self.urls.sync_db)
        self.consumer = Consumer(
            self.urls.amqp,
            self.token,
            session_factory=sessionmaker(engine),
            inbox=self.ledger.inbox,
            consumer_name=self.consumer_name,
            handler=self.handler,
            options=DeliveryOptions(on_settled=self.settled),
            prefetch=10,
        )
        try:
            self.consumer.run()
        finally:
            engine.dispose()

    def publish(self, message_id: str) -> None:
        self.publisher.publish(message_id)

    def stop(self) -> None:
        self.consumer.stop()

    def close(self) -> None:
        self.publisher.close()
        _delete_queues(self.urls.amqp, self.token, dead_letter_queue_name(self.token))


class AioPikaLane(_LoopLane):
    name = "aio-pika"

    def setup(self) -> None:
        _declare_quorum(self.urls.amqp, self.token)
        self.publisher = _RabbitPublisher(self.urls.amqp, self.token)

    async def consume_async(self) -> None:
        from sa_inbox.brokers.rabbitmq import AsyncConsumer

        engine = create_async_engine(self.urls.async_db)
        self.consumer = AsyncConsumer(
            self.urls.amqp,
            self.token,
            session_factory=async_sessionmaker(engine),
            inbox=self.ledger.inbox,
            consumer_name=self.consumer_name,
            handler=self.handler_async,
            options=DeliveryOptions(on_settled=self.settled),
            prefetch=10,
        )
        try:
            await self.consumer.run()
        finally:
            await engine.dispose()

    def publish(self, message_id: str) -> None:
        self.publisher.publish(message_id)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.consumer.stop)

    def close(self) -> None:
        self.publisher.close()
        _delete_queues(self.urls.amqp, self.token, dead_letter_queue_name(self.token))


class RedisLane(Lane):
    name = "redis"

    def setup(self) -> None:
        import redis

        self.producer = redis.Redis.from_url(self.urls.redis)

    def consume(self) -> None:
        import redis

        from sa_inbox.brokers.redis import Consumer as RedisConsumer

        engine = sa.create_engine(self.urls.sync_db)
        client = redis.Redis.from_url(self.urls.redis)
        self.consumer = RedisConsumer(
            client,
            self.token,
            group=self.consumer_name,
            session_factory=sessionmaker(engine),
            inbox=self.ledger.inbox,
            handler=self.handler,
            options=DeliveryOptions(on_settled=self.settled),
            visibility_timeout=LEASE,
            block_timeout=0.5,
        )
        try:
            self.consumer.run()
        finally:
            client.close()
            engine.dispose()

    def publish(self, message_id: str) -> None:
        self.producer.xadd(self.token, {"message_id": message_id, "body": "{}"})

    def stop(self) -> None:
        self.consumer.stop()

    def close(self) -> None:
        try:
            with contextlib.suppress(Exception):
                self.producer.delete(self.token, f"{self.token}:dead")
        finally:
            self.producer.close()


class AsyncRedisLane(_LoopLane, RedisLane):
    name = "redis-async"

    async def consume_async(self) -> None:
        import redis.asyncio

        from sa_inbox.brokers.redis import AsyncConsumer as AsyncRedisConsumer

        engine = create_async_engine(self.urls.async_db)
        client = redis.asyncio.Redis.from_url(self.urls.redis)
        self.consumer = AsyncRedisConsumer(
            client,
            self.token,
            group=self.consumer_name,
            session_factory=async_sessionmaker(engine),
            inbox=self.ledger.inbox,
            handler=self.handler_async,
            options=DeliveryOptions(on_settled=self.settled),
            visibility_timeout=LEASE,
            block_timeout=0.5,
        )
        try:
            await self.consumer.run()
        finally:
            await client.aclose()
            await engine.dispose()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.consumer.stop)


class NatsLane(_LoopLane):
    name = "nats"

    def setup(self) -> None:
        self.ready = threading.Event()
        self.stop_flag = threading.Event()

    async def consume_async(self) -> None:
        import nats

        from sa_inbox.brokers.nats import AsyncConsumer

        self.nc = await nats.connect(
            self.urls.nats, max_reconnect_attempts=-1, reconnect_time_wait=0.5
        )
        self.js = self.nc.jetstream()
        await self.js.add_stream(name=self.token, subjects=[f"{self.token}.pay"])
        await self.js.add_stream(name=f"{self.token}_dead", subjects=[f"{self.token}.dead"])
        self.ready.set()
        engine = create_async_engine(self.urls.async_db)
        try:
            await AsyncConsumer(
                self.js,
                self.token,
                f"{self.token}_d",
                session_factory=async_sessionmaker(engine),
                inbox=self.ledger.inbox,
                handler=self.handler_async,
                options=DeliveryOptions(dead_letter=f"{self.token}.dead", on_settled=self.settled),
                consumer_name=self.consumer_name,
                ack_wait=LEASE,
            ).run(self.stop_flag)
        finally:
            await self.nc.close()
            await engine.dispose()

    def publish(self, message_id: str) -> None:
        self.ready.wait(30)
        future = asyncio.run_coroutine_threadsafe(
            self.js.publish(f"{self.token}.pay", b"{}", headers={"Nats-Msg-Id": message_id}),
            self.loop,
        )
        future.result(30)

    def stop(self) -> None:
        self.stop_flag.set()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run(_delete_streams(self.urls.nats, self.token))


async def _delete_streams(url: str, token: str) -> None:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    for stream in (token, f"{token}_dead"):
        with contextlib.suppress(Exception):
            await js.delete_stream(stream)
    await nc.close()


class FastStreamLane(_LoopLane):
    name = "faststream"

    def setup(self) -> None:
        _declare_quorum(self.urls.amqp, self.token)
        self.publisher = _RabbitPublisher(self.urls.amqp, self.token, header="idempotency-key")
        self.done = threading.Event()

    async def consume_async(self) -> None:
        from typing import Annotated

        from faststream import AckPolicy, Context, Header
        from faststream.rabbit import QueueType, RabbitBroker, RabbitQueue

        from sa_inbox.brokers.faststream import InboxMiddleware

        engine = create_async_engine(self.urls.async_db)
        middleware = InboxMiddleware(
            session_factory=async_sessionmaker(engine),
            inbox=self.ledger.inbox,
            consumer_name=self.consumer_name,
            options=DeliveryOptions(on_settled=self.settled),
        )
        broker = RabbitBroker(self.urls.amqp, middlewares=[middleware], logger=None)
        queue = RabbitQueue(self.token, queue_type=QueueType.QUORUM, declare=False)
        lane = self

        async def pay(
            body: Any,
            session: Annotated[AsyncSession, Context("inbox_session")],
            key: Annotated[str, Header("idempotency-key")],
        ) -> None:
            await session.execute(lane.ledger.statement(lane.name, key))

        broker.subscriber(queue, ack_policy=AckPolicy.MANUAL)(pay)
        await broker.start()
        self.stopping = asyncio.Event()
        try:
            await self.stopping.wait()
        finally:
            await broker.stop()
            await engine.dispose()

    def publish(self, message_id: str) -> None:
        self.publisher.publish(message_id)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stopping.set)

    def close(self) -> None:
        self.publisher.close()
        _delete_queues(self.urls.amqp, self.token, dead_letter_queue_name(self.token))


class CeleryLane(Lane):
    name = "celery"

    def setup(self) -> None:
        from celery import Celery
        from kombu import Queue

        from sa_inbox.brokers.celery import inbox_task
        from sa_inbox.brokers.rabbitmq.queues import queue_arguments

        _declare_quorum(self.urls.amqp, self.token)
        self.app = Celery(self.token, broker=self.urls.amqp)
        arguments = queue_arguments(dead_letter_queue_name(self.token))
        self.app.conf.update(
            task_queues=[Queue(self.token, routing_key=self.token, queue_arguments=arguments)],
            task_default_queue=self.token,
            worker_prefetch_multiplier=1,
            worker_enable_remote_control=False,
            worker_redirect_stdouts=False,
            worker_hijack_root_logger=False,
            broker_connection_retry_on_startup=True,
            worker_cancel_long_running_tasks_on_connection_loss=False,
            # a publish returns once RabbitMQ confirmed it: one the kill took is not
            # counted as sent (kombu's pyamqp transport, "Transport Options")
            broker_transport_options={"confirm_publish": True},
        )
        self.engine = sa.create_engine(self.urls.sync_db)
        lane = self

        @inbox_task(
            self.app,
            session_factory=sessionmaker(self.engine),
            inbox=self.ledger.inbox,
            consumer_name=self.consumer_name,
            options=DeliveryOptions(on_settled=self.settled),
            name=f"{self.token}.pay",
        )
        def pay(session: Session, idempotency_key: str) -> None:
            session.execute(lane.ledger.statement(lane.name, idempotency_key))

        self.task = pay
        self.stop_flag = threading.Event()

    def consume(self) -> None:
        from celery.contrib.testing.worker import start_worker

        with start_worker(
            self.app,
            pool="threads",
            perform_ping_check=False,
            loglevel="WARNING",
            shutdown_timeout=30,
        ):
            self.stop_flag.wait()

    def publish(self, message_id: str) -> None:
        self.task.apply_async(kwargs={"idempotency_key": message_id}, queue=self.token)

    def stop(self) -> None:
        self.stop_flag.set()

    def close(self) -> None:
        self.engine.dispose()
        _delete_queues(self.urls.amqp, self.token, dead_letter_queue_name(self.token))


class StoreWorkerLane(Lane):
    """The inbox store's :class:`~sa_inbox.Worker` (2 threads): its producer writes each
    message into the store (a database write: refused while the database is down, so not
    counted as sent); a delivery's count is the row's ``attempts``."""

    name = "store-worker"

    def setup(self) -> None:
        from sa_inbox import InboxStore

        self.metadata = sa.MetaData()
        self.store = InboxStore(self.metadata, table_name=f"{self.token}_store")
        self.engine = sa.create_engine(self.urls.sync_db)
        self.metadata.create_all(self.engine)

    def consume(self) -> None:
        from sa_inbox import Worker

        def handler(session: Session, message: Any) -> None:
            session.execute(self.ledger.statement(self.name, message.message_id))

        self.worker = Worker(
            self.store.bind(self.engine),
            handler,
            consumer_name=self.consumer_name,
            concurrency=2,
            batch_size=10,
            poll_interval=0.2,
            visibility_timeout=LEASE * 2,
        )
        self.worker.run(handle_signals=False)

    def publish(self, message_id: str) -> None:
        with self.engine.begin() as conn:
            self.store.receive(conn, message_id, {}, consumer_name=self.consumer_name)

    def stop(self) -> None:
        self.worker.stop()

    def deliveries(self) -> tuple[Counter[Disposition], int]:
        t = self.store.table
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.status, t.c.attempts)).all()
        dispositions: Counter[Disposition] = Counter()
        for status, attempts in rows:
            if status == "dead":
                dispositions[Disposition.DEAD_LETTERED] += 1
            elif attempts > 1:
                dispositions[Disposition.RETRY] += attempts - 1
        return dispositions, max((int(a) for _, a in rows), default=0)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.metadata.drop_all(self.engine)
        self.engine.dispose()


class RelayLane(Lane):
    """The outbox relay to a Redis stream: its producer writes each message into the outbox
    (refused while the database is down); applied means in the stream, a delivery's count is
    the row's ``attempts``, doubled means published twice (at least once, by contract)."""

    name = "relay"

    def setup(self) -> None:
        import redis

        from sa_inbox.outbox import Outbox

        self.metadata = sa.MetaData()
        self.outbox = Outbox(self.metadata, table_name=f"{self.token}_outbox")
        self.engine = sa.create_engine(self.urls.sync_db)
        self.metadata.create_all(self.engine)
        self.client = redis.Redis.from_url(self.urls.redis)
        self.consumer_name = f"outbox relay of {self.token}_outbox"

    def consume(self) -> None:
        from sa_inbox.brokers.redis import Publisher as RedisPublisher
        from sa_inbox.outbox import OutboxRelay

        self.relay = OutboxRelay(
            self.engine,
            self.outbox,
            RedisPublisher(self.client),
            poll_interval=0.1,
            visibility_timeout=LEASE * 2,
        )
        self.relay.run()

    def publish(self, message_id: str) -> None:
        with self.engine.begin() as conn:
            self.outbox.publish(conn, self.token, b"{}", message_id=message_id)

    def stop(self) -> None:
        self.relay.stop()

    def applied(self) -> Counter[str]:
        return Counter(
            fields[b"message_id"].decode() for _, fields in self.client.xrange(self.token)
        )

    def deliveries(self) -> tuple[Counter[Disposition], int]:
        t = self.outbox.table
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.status, t.c.attempts)).all()
        dispositions: Counter[Disposition] = Counter()
        for status, attempts in rows:
            if status == "dead":
                dispositions[Disposition.DEAD_LETTERED] += 1
            elif attempts > 1:
                dispositions[Disposition.RETRY] += attempts - 1
        return dispositions, max((int(a) for _, a in rows), default=0)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.delete(self.token)
            self.metadata.drop_all(self.engine)
        self.engine.dispose()


class SqsLane(Lane):
    """The boto3 :class:`~sa_inbox.brokers.sqs.Consumer` on the live moto server, its queue
    hiding a received message :data:`SQS_LEASE` seconds (the heartbeat and the outage gate
    keep it hidden while held), its own dead-letter queue.

    For a server restart (:meth:`make_queues` again: moto keeps queues in memory) and a
    message in flight through it: :attr:`paused` makes publishes fail (attempted, not
    sent), and :attr:`pause_after_one` sets it after the next publish that succeeds; with
    :attr:`hold_next` set, the next message the handler gets waits in it until
    :attr:`release` is set (:attr:`holding` says it is there). A publish holds
    :attr:`publishing` from its check of :attr:`paused` to its pause after one: set
    :attr:`paused` under it, and no send is still on its way to the queue."""

    name = "sqs"

    def setup(self) -> None:
        self.client = self.make_client()
        self.dead = f"{self.token}-dead"
        self.make_queues()
        self.paused = threading.Event()
        self.publishing = threading.Lock()
        self.pause_after_one = threading.Event()
        self.hold_next = threading.Event()
        self.holding = threading.Event()
        self.release = threading.Event()
        self.held_id: str | None = None

    def make_client(self) -> Any:
        import boto3
        from botocore.config import Config

        from sa_inbox.brokers.sqs import client_options

        config = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=2)
        return boto3.client("sqs", config=config, **client_options(self.urls.sqs))

    def make_queues(self) -> None:
        """Create the queue and its dead-letter queue (again, after a restart)."""
        self.client.create_queue(QueueName=self.dead)
        attributes = {"VisibilityTimeout": str(int(SQS_LEASE))}
        self.url = self.client.create_queue(QueueName=self.token, Attributes=attributes)["QueueUrl"]

    def count(self, *attributes: str) -> int:
        """The sum of the queue's ``ApproximateNumberOfMessages...`` ``attributes``."""
        names = [f"ApproximateNumberOfMessages{a}" for a in attributes]
        reply = self.client.get_queue_attributes(QueueUrl=self.url, AttributeNames=names)
        return sum(int(n) for n in reply["Attributes"].values())

    def waiting(self) -> int:
        """Messages the queue holds that no receive took (visible or delayed)."""
        return self.count("", "Delayed")

    def empty(self) -> bool:
        """Whether the queue holds nothing: none waiting, none received and not deleted."""
        return self.count("", "Delayed", "NotVisible") == 0

    def outage_ending(self) -> None:
        self.hidden_at_restart = self.count("NotVisible")

    def consumer_options(self) -> dict[str, Any]:
        return {
            "consumer_name": self.consumer_name,
            "inbox": self.ledger.inbox,
            "dead_letter": self.dead,
            "visibility_timeout": int(SQS_LEASE),
            "wait_time": 1,
            "on_settled": self.settled,
        }

    def consume(self) -> None:
        from sa_inbox.brokers.sqs import Consumer

        engine = sa.create_engine(self.urls.sync_db)
        self.consumer = Consumer(
            self.make_client(),
            self.token,
            session_factory=sessionmaker(engine),
            handler=self.handler,
            **with_options(self.consumer_options()),
        )
        try:
            self.consumer.run()
        finally:
            engine.dispose()

    def held(self, delivery: Delivery) -> bool:
        """Whether this message is the one to hold (the first after :attr:`hold_next`)."""
        if not self.hold_next.is_set() or self.holding.is_set():
            return False
        self.held_id = delivery.message_id
        self.holding.set()
        return True

    def handler(self, session: Session, delivery: Delivery) -> None:
        if self.held(delivery):
            self.release.wait(60)
        super().handler(session, delivery)

    def publish(self, message_id: str) -> None:
        with self.publishing:
            if self.paused.is_set():
                raise RuntimeError("publishing paused")
            self.client.send_message(
                QueueUrl=self.url,
                MessageBody="{}",
                MessageAttributes={"message_id": {"DataType": "String", "StringValue": message_id}},
            )
            if self.pause_after_one.is_set():
                self.paused.set()
                self.pause_after_one.clear()

    def pause(self) -> None:
        """Stop publishing; returns once no send is on its way."""
        with self.publishing:
            self.paused.set()

    def stop(self) -> None:
        self.consumer.stop()

    def close(self) -> None:
        for name in (self.token, self.dead):
            with contextlib.suppress(Exception):
                url = self.client.get_queue_url(QueueName=name)["QueueUrl"]
                self.client.delete_queue(QueueUrl=url)


class AsyncSqsLane(_LoopLane, SqsLane):
    """The aiobotocore :class:`~sa_inbox.brokers.sqs.AsyncConsumer`, as :class:`SqsLane`."""

    name = "sqs-async"

    async def consume_async(self) -> None:
        from aiobotocore.config import AioConfig
        from aiobotocore.session import get_session

        from sa_inbox.brokers.sqs import AsyncConsumer, client_options

        engine = create_async_engine(self.urls.async_db)
        config = AioConfig(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=2)
        options = client_options(self.urls.sqs)
        try:
            async with get_session().create_client("sqs", config=config, **options) as client:
                self.consumer = AsyncConsumer(
                    client,
                    self.token,
                    session_factory=async_sessionmaker(engine),
                    handler=self.handler_async,
                    **with_options(self.consumer_options()),
                )
                await self.consumer.run()
        finally:
            await engine.dispose()

    async def handler_async(self, session: AsyncSession, delivery: Delivery) -> None:
        if self.held(delivery):
            # as the sync lane's release.wait(60): a disruption that failed never hangs the run
            deadline = time.monotonic() + 60
            while not self.release.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        await super().handler_async(session, delivery)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.consumer.stop)


LANE_TYPES: dict[str, type[Lane]] = {
    lane.name: lane
    for lane in (
        PikaLane,
        AioPikaLane,
        RedisLane,
        AsyncRedisLane,
        NatsLane,
        FastStreamLane,
        CeleryLane,
        StoreWorkerLane,
        RelayLane,
        SqsLane,
        AsyncSqsLane,
    )
}


def servers_sh(*args: str) -> None:
    """Runs ``scripts/servers.sh ARGS``; on a failure its output (the server's log tail that
    it prints) is in the AssertionError."""
    done = subprocess.run(
        [str(SERVERS_SH), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, (
        f"servers.sh {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}"
    )


RABBITMQCTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")


def rabbitmqctl(server_dir: Path, *args: str) -> str:
    """``rabbitmqctl ARGS`` on the node ``servers.sh start`` started in ``server_dir``, with
    the environment ``servers.sh`` gives it (``rabbitmq_env``)."""
    d = server_dir / "rabbitmq"

    def port(name: str) -> str:
        return (d / f"{name}.port").read_text().strip()

    env = {
        **os.environ,
        "HOME": str(d),
        "RABBITMQ_NODENAME": "sa_inbox_test@localhost",
        "ERL_EPMD_PORT": port("epmd"),
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": port("amqp"),
        "RABBITMQ_DIST_PORT": port("dist"),
        "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
        "RABBITMQ_LOG_BASE": str(d / "log"),
        "RABBITMQ_PID_FILE": str(d / "rabbitmq.pid"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
        "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
        "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
    }
    done = subprocess.run(
        [str(RABBITMQCTL), *args], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout


@dataclass
class Outage:
    """One run's settings (see :func:`run_outage`)."""

    database: str
    server_dir: Path
    lanes: tuple[str, ...] = LANES
    rate: float = 10.0
    outage: float = 15.0
    lead: float = 1.0
    tail: float = 2.0
    #: The server killed and restarted: the database's by default, or a broker
    #: (``rabbitmq``, ``redis``, ``nats``).
    server: str | None = None
    #: Instead of a kill and restart: called once (``rabbitmqctl close_all_connections``),
    #: then ``outage`` seconds more of publishing.
    disrupt: Callable[[], None] | None = None
    #: Kill the server after the lanes' set-up and before their consumers start: each
    #: consumer starts during the outage.
    at_start: bool = False

    @property
    def killed(self) -> str:
        if self.server is not None:
            return self.server
        return "postgresql" if self.database == "postgresql" else "mysql"

    def drain_bound(self, messages: int) -> float:
        """Seconds after the restart by which every lane has applied ``messages``: the
        longest wait between two probes, the leases a lost settlement waits out, and
        :data:`PER_MESSAGE` per message."""
        return DEFAULT_OUTAGE_BACKOFF.maximum + 2 * LEASE + 10.0 + messages * PER_MESSAGE


def run_outage(settings: Outage, types: Mapping[str, type[Lane]] = LANE_TYPES) -> list[LaneFigures]:
    """One outage under every lane of ``settings`` (see the module); the figures per lane.

    :param types: the lane of each name (a test's own lanes).
    """
    urls = Urls.from_environment(settings.database)
    ledger = Ledger(urls.sync_db)
    lanes = [types[name](urls, ledger) for name in settings.lanes]
    directory = str(settings.server_dir)
    published: dict[str, list[str]] = {lane.name: [] for lane in lanes}
    attempted: Counter[str] = Counter()
    publishing = threading.Event()
    try:
        with recording() as records:
            for lane in lanes:
                lane.setup()
            if settings.at_start:
                killed_at = time.monotonic()
                servers_sh("kill", directory, settings.killed)
            for lane in lanes:
                lane.start()
            time.sleep(2.0)  # the consumers connect and check their tables
            publishers = [
                threading.Thread(
                    target=_publish_steadily,
                    args=(lane, settings.rate, publishing, published, attempted),
                    daemon=True,
                )
                for lane in lanes
            ]
            for publisher in publishers:
                publisher.start()
            time.sleep(settings.lead)
            if settings.at_start:
                time.sleep(max(0.0, killed_at + settings.outage - time.monotonic()))
                _outage_ending(lanes)
                servers_sh("restart", directory, settings.killed)
            elif settings.disrupt is not None:
                killed_at = time.monotonic()
                settings.disrupt()
                time.sleep(settings.outage)
            else:
                killed_at = time.monotonic()
                servers_sh("kill", directory, settings.killed)
                time.sleep(settings.outage)
                _outage_ending(lanes)
                servers_sh("restart", directory, settings.killed)
            restarted_at = time.monotonic()
            time.sleep(settings.tail)
            publishing.set()
            for publisher in publishers:
                publisher.join()
            most = max(len(ids) for ids in published.values())
            deadline = restarted_at + settings.drain_bound(most)
            drained = _wait_drained(lanes, ledger, published, deadline)
            early = {
                lane.name for lane in lanes if lane.thread is None or not lane.thread.is_alive()
            }
            if len(drained) < len(lanes) and os.environ.get("SA_INBOX_OUTAGE_DIAGNOSE"):
                import faulthandler
                import sys

                faulthandler.dump_traceback(sys.stdout, all_threads=True)
            _stop(lanes)
        figures = []
        for lane in lanes:
            drain = drained[lane.name] - restarted_at if lane.name in drained else -1.0
            lane_figures = _figures(
                lane,
                ledger,
                published[lane.name],
                records,
                settings,
                drain,
                restarted_at - killed_at,
            )
            lane_figures.stopped_early = lane.name in early
            lane_figures.attempted = attempted[lane.name]
            figures.append(lane_figures)
        return figures
    finally:
        publishing.set()  # a failed run leaves no publisher or consumer to the next test
        _stop(lanes, quiet=True)
        for lane in lanes:
            with contextlib.suppress(Exception):
                lane.close()
        ledger.drop()


def _stop(lanes: list[Lane], *, quiet: bool = False) -> None:
    """Stop each lane whose consumer still runs (``quiet``: whatever a stop raises), then
    wait up to 30 s for each thread."""
    running = [lane for lane in lanes if lane.thread is not None and lane.thread.is_alive()]
    for lane in running:
        with contextlib.suppress(*((Exception,) if quiet else ())):
            lane.stop()
    for lane in running:
        assert lane.thread is not None
        lane.thread.join(30)


def _outage_ending(lanes: list[Lane]) -> None:
    for lane in lanes:
        try:
            lane.outage_ending()
        except Exception as exc:  # a measure, not the run
            logger.warning("lane %s: outage_ending failed: %s", lane.name, exc)


def _publish_steadily(
    lane: Lane,
    rate: float,
    done: threading.Event,
    published: dict[str, list[str]],
    attempted: Counter[str],
) -> None:
    """``rate`` messages per second to ``lane`` (its own thread), until ``done``."""
    start = time.monotonic()
    n = 0
    while not done.is_set():
        message_id = f"{lane.token}-{n}"
        attempted[lane.name] += 1
        try:
            lane.publish(message_id)
        except Exception as exc:  # not counted as sent (it may have reached the broker)
            logger.debug("lane %s: publish of %s failed: %s", lane.name, message_id, exc)
        else:
            published[lane.name].append(message_id)
        n += 1
        delay = start + n / rate - time.monotonic()
        if delay > 0:
            done.wait(delay)


def _wait_drained(
    lanes: list[Lane], ledger: Ledger, published: dict[str, list[str]], deadline: float
) -> dict[str, float]:
    """Waits until each lane applied all it was sent (or the deadline); when each did."""
    drained: dict[str, float] = {}
    while time.monotonic() < deadline and len(drained) < len(lanes):
        for lane in lanes:
            if lane.name not in drained and len(lane.applied()) >= len(published[lane.name]):
                drained[lane.name] = time.monotonic()
        time.sleep(0.2)
    return drained


def _figures(
    lane: Lane,
    ledger: Ledger,
    published: list[str],
    records: Records,
    settings: Outage,
    drain: float,
    measured: float,
) -> LaneFigures:
    rows = lane.applied()
    dispositions, max_delivery_count = lane.deliveries()
    tracebacks = [
        r
        for r in records.records
        if r.exc_info and r.name.startswith("sa_inbox") and r.levelno >= logging.WARNING
    ]
    return LaneFigures(
        lane=lane.name,
        database=settings.database,
        outage_seconds=settings.outage,
        rate=settings.rate,
        published=len(published),
        applied=len(rows),
        lost=len(set(published) - set(rows)),
        doubled=sum(1 for n in rows.values() if n > 1),
        dead_letters=dispositions[Disposition.DEAD_LETTERED],
        retries=dispositions[Disposition.RETRY],
        duplicates=dispositions[Disposition.DUPLICATE],
        max_delivery_count=max_delivery_count,
        outage_warnings=len(records.of(lane.consumer_name, "inbox.database.unavailable")),
        outage_infos=len(records.of(lane.consumer_name, "inbox.database.available")),
        connection_losses=len(records.actions(lane.token, "connection_lost")),
        reconnections=len(records.actions(lane.token, "reconnected")),
        tracebacks=len(tracebacks),
        drain_seconds=round(drain, 2),
        outage_measured=round(measured, 2),
        hidden_at_restart=getattr(lane, "hidden_at_restart", None),
    )


def as_json(figures: list[LaneFigures]) -> str:
    return json.dumps([asdict(f) for f in figures], indent=2)
