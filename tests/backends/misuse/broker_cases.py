"""The misuse matrix's cases for the broker adapters, each delivering through the live broker
(RabbitMQ, Redis, NATS started by ``scripts/servers.sh``; skipped where its URL is unset).

Each delivery publishes the message (the same id every time) to the case's own queue or
stream, then makes and runs the consumer the way a new user would with the wrong object in
one place: refused when made or at start, before any SQL, with the message left on the
broker; or, where the intent is unambiguous (an AsyncInbox for an asyncio consumer),
processed once and acked as a duplicate after.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import ConfigurationError
from sa_inbox.brokers import Delivery, DeliveryOptions, Settlement
from tests.conftest import broker_url

from .cases import case
from .env import AMOUNT, CONSUMER, Env

#: Seconds a consumer of a "once" case may take to settle its one delivery.
DEADLINE = 20.0


def _pay(env: Env) -> Callable[[Session, Delivery], None]:
    def pay(session: Session, delivery: Delivery) -> None:
        env.app.apply_payment(session, delivery.message_id or "", 1, AMOUNT)

    return pay


def _apay(env: Env) -> Callable[[AsyncSession, Delivery], Any]:
    async def handler(session: AsyncSession, delivery: Delivery) -> None:
        await env.app.apply_payment_async(session, delivery.message_id or "", 1, AMOUNT)

    return handler


def _autocommit(env: Env, asynchronous: bool) -> Any:
    """A session factory on an AUTOCOMMIT engine: a claim would commit on its own."""
    if asynchronous:
        return async_sessionmaker(env.aengine.execution_options(isolation_level="AUTOCOMMIT"))
    return sessionmaker(env.app.engine.execution_options(isolation_level="AUTOCOMMIT"))


def _handler_of_kind(env: Env, kind: str) -> Callable[..., Any]:
    """``async def`` for a synchronous consumer; a plain ``def`` returning the coroutine
    (awaited by the consumer) for an asyncio one."""
    if kind == "async def handler":

        async def pay(session: Session, delivery: Delivery) -> None:
            env.app.apply_payment(session, delivery.message_id or "", 1, AMOUNT)

        return pay

    def apay(session: AsyncSession, delivery: Delivery) -> Any:
        return env.app.apply_payment_async(session, delivery.message_id or "", 1, AMOUNT)

    return apay


def _objects(env: Env, wrong: str, *, asynchronous: bool) -> dict[str, Any]:
    """The consumer's objects, the one named ``wrong`` put in its place."""
    objects: dict[str, Any] = {
        "session_factory": env.ASession if asynchronous else env.app.Session,
        "inbox": env.app.inbox,
        "handler": _apay(env) if asynchronous else _pay(env),
    }
    if wrong.startswith("AUTOCOMMIT"):
        objects["session_factory"] = _autocommit(env, asynchronous)
    elif "sessionmaker" in wrong or wrong in ("Connection", "AsyncConnection"):
        objects["session_factory"] = env.wrong(wrong)
    elif wrong in ("AsyncInbox", "Inbox"):
        objects["inbox"] = env.wrong(wrong)
    elif wrong.endswith("def handler"):
        objects["handler"] = _handler_of_kind(env, wrong)
    return objects


# -- RabbitMQ ----------------------------------------------------------------------------

#: The pika and the aio-pika consumer, known by their module (every broker package has a
#: Consumer and an AsyncConsumer).
_PIKA = "sa_inbox.brokers.rabbitmq.Consumer"
_RABBIT = "sa_inbox.brokers.rabbitmq.AsyncConsumer"


def _rabbit_queue(env: Env, mid: str) -> str:
    """The case's quorum queue (made once), with ``mid`` published to it once more."""
    import pika

    from sa_inbox.brokers.rabbitmq import dead_letter_queue_name, declare_queue

    connection = pika.BlockingConnection(pika.URLParameters(broker_url("rabbitmq")))
    channel = connection.channel()
    channel.confirm_delivery()
    if "queue" not in env.kept:
        env.kept["queue"] = name = f"sa-inbox-misuse-{uuid.uuid4().hex[:10]}"
        declare_queue(channel, name)
        env.cleanups.append(lambda: _delete_queues(name, dead_letter_queue_name(name)))
    properties = pika.BasicProperties(message_id=mid, delivery_mode=2)
    channel.basic_publish("", env.kept["queue"], b"10.00", properties, mandatory=True)
    connection.close()
    return str(env.kept["queue"])


def _rabbit_left(env: Env) -> int:
    """Messages ready on the case's queue (a refused consumer's channel is closed: what it
    held is back there), once the count settles."""
    import time

    import pika

    from sa_inbox.brokers.rabbitmq import dead_letter_queue_name

    if "queue" not in env.kept:
        return 0
    connection = pika.BlockingConnection(pika.URLParameters(broker_url("rabbitmq")))
    try:
        channel = connection.channel()
        deadline = time.monotonic() + 10
        while True:
            ready = channel.queue_declare(env.kept["queue"], passive=True).method.message_count
            dead = channel.queue_declare(
                dead_letter_queue_name(env.kept["queue"]), passive=True
            ).method.message_count
            if ready + dead >= 3 or time.monotonic() > deadline:
                return int(ready)
            time.sleep(0.1)
    finally:
        connection.close()


def _delete_queues(*names: str) -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(broker_url("rabbitmq")))
    channel = connection.channel()
    for name in names:
        channel.queue_delete(name)
    connection.close()


def _run_blocking(env: Env, mid: str, wrong: str) -> None:
    from sa_inbox.brokers.rabbitmq import Consumer

    queue = _rabbit_queue(env, mid)
    consumer: Any = None

    def settled(_: Settlement) -> None:
        consumer.stop()

    consumer = Consumer(
        broker_url("rabbitmq"),
        queue,
        consumer_name=CONSUMER,
        options=DeliveryOptions(on_settled=settled),
        **_objects(env, wrong, asynchronous=False),
    )
    timer = threading.Timer(DEADLINE, consumer.stop)
    timer.start()
    try:
        consumer.run()
    finally:
        timer.cancel()


async def _run_aio_pika(env: Env, mid: str, wrong: str) -> None:
    from sa_inbox.brokers.rabbitmq import AsyncConsumer

    queue = await asyncio.to_thread(_rabbit_queue, env, mid)
    stop = asyncio.Event()
    consumer = AsyncConsumer(
        broker_url("rabbitmq"),
        queue,
        consumer_name=CONSUMER,
        options=DeliveryOptions(on_settled=lambda _: stop.set()),
        **_objects(env, wrong, asynchronous=True),
    )
    await asyncio.wait_for(consumer.run(stop), DEADLINE)


for _wrong in (
    "AsyncInbox",
    "async_sessionmaker",
    "async_sessionmaker.begin",
    "sessionmaker.begin",
    "Connection",
    "async def handler",
):

    @case(f"{_PIKA}()", _wrong, left=_rabbit_left)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        _run_blocking(env, mid, wrong)


@case(f"{_PIKA}()", "options a dict", kind=ConfigurationError, left=_rabbit_left)
def _(env: Env, mid: str) -> None:
    from sa_inbox.brokers.rabbitmq import Consumer

    queue = _rabbit_queue(env, mid)
    objects = _objects(env, "-", asynchronous=False)
    Consumer(
        broker_url("rabbitmq"),
        queue,
        consumer_name=CONSUMER,
        options={"key_source": ""},  # type: ignore[arg-type]
        **objects,
    ).run()


for _entry in (f"{_PIKA}.run", f"{_PIKA}.check"):

    @case(_entry, "AUTOCOMMIT sessionmaker", kind=ConfigurationError, left=_rabbit_left)
    def _(env: Env, mid: str, entry: str = _entry) -> None:
        if entry.endswith("run"):
            _run_blocking(env, mid, "AUTOCOMMIT")
        else:
            from sa_inbox.brokers.rabbitmq import Consumer

            _rabbit_queue(env, mid)
            objects = _objects(env, "AUTOCOMMIT", asynchronous=False)
            Consumer("amqp://unused/", "q", consumer_name=CONSUMER, **objects).check()


for _wrong in ("sessionmaker", "sessionmaker.begin", "async_sessionmaker.begin", "AsyncConnection"):

    @case(f"{_RABBIT}()", _wrong, left=_rabbit_left)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        await _run_aio_pika(env, mid, wrong)


for _inbox in ("Inbox", "AsyncInbox", "plain def handler"):

    @case(f"{_RABBIT}()", _inbox, expect="once")
    async def _(env: Env, mid: str, inbox: str = _inbox) -> None:
        await _run_aio_pika(env, mid, inbox)


for _entry in (f"{_RABBIT}.run", f"{_RABBIT}.check"):

    @case(_entry, "AUTOCOMMIT async_sessionmaker", kind=ConfigurationError, left=_rabbit_left)
    async def _(env: Env, mid: str, entry: str = _entry) -> None:
        if entry.endswith("run"):
            await _run_aio_pika(env, mid, "AUTOCOMMIT")
        else:
            from sa_inbox.brokers.rabbitmq import AsyncConsumer

            await asyncio.to_thread(_rabbit_queue, env, mid)
            objects = _objects(env, "AUTOCOMMIT", asynchronous=True)
            await AsyncConsumer("amqp://unused/", "q", consumer_name=CONSUMER, **objects).check()


# -- Redis Streams -----------------------------------------------------------------------

#: The redis-py and the redis.asyncio consumer, known by their module.
_REDIS = "sa_inbox.brokers.redis.Consumer"
_AREDIS = "sa_inbox.brokers.redis.AsyncConsumer"

_FAST = {"visibility_timeout": 0.3, "block_timeout": 0.05}


def _redis_stream(env: Env, mid: str) -> str:
    """The case's stream, with ``mid`` added to it once more."""
    import redis

    client = redis.Redis.from_url(broker_url("redis"))
    if "stream" not in env.kept:
        env.kept["stream"] = name = f"sa-inbox-misuse:{uuid.uuid4().hex}"
        env.cleanups.append(lambda: _delete_stream(name))
    client.xadd(env.kept["stream"], {"message_id": mid, "body": "10.00"})
    client.close()
    return str(env.kept["stream"])


def _redis_left(env: Env) -> int:
    """Entries of the case's stream its group has not acked: unread, or read and pending
    (a dead-lettered entry is acked on the source)."""
    import redis

    if "stream" not in env.kept:
        return 0
    client = redis.Redis.from_url(broker_url("redis"), decode_responses=True)
    try:
        name = env.kept["stream"]
        groups = {g["name"]: g for g in client.xinfo_groups(name)}
        if CONSUMER not in groups:
            return int(client.xlen(name))
        unread = client.xrange(name, f"({groups[CONSUMER]['last-delivered-id']}", "+")
        pending = client.xpending(name, CONSUMER)["pending"]
        return len(unread) + int(pending)
    finally:
        client.close()


def _delete_stream(name: str) -> None:
    import redis

    client = redis.Redis.from_url(broker_url("redis"))
    client.delete(name, f"{name}:dead")
    client.close()


def _run_redis(
    env: Env, mid: str, wrong: str, *, check_only: bool = False, given: Any = None
) -> None:
    """The sync consumer on a redis-py client (or on ``given``): run, or ``check()``."""
    import redis

    from sa_inbox.brokers.redis import Consumer

    stream = _redis_stream(env, mid)
    client = redis.Redis.from_url(broker_url("redis"))
    try:
        consumer = Consumer(
            client if given is None else given,
            stream,
            group=CONSUMER,
            **_objects(env, wrong, asynchronous=False),
            **_FAST,
        )
        if check_only:
            consumer.check()
            return
        stop = threading.Event()
        consumer.run(stop) if wrong.startswith("AUTOCOMMIT") else _poll_once(consumer)
    finally:
        client.close()


def _poll_once(consumer: Any) -> None:
    """Poll until the consumer settled one entry."""
    for _ in range(400):
        if consumer.poll():
            return
    raise AssertionError("nothing settled")


async def _run_redis_async(
    env: Env, mid: str, wrong: str, *, check_only: bool = False, given: Any = None
) -> None:
    """The asyncio consumer on a redis.asyncio client (or on ``given``): run, or ``check()``."""
    import redis.asyncio

    from sa_inbox.brokers.redis import AsyncConsumer

    stream = await asyncio.to_thread(_redis_stream, env, mid)
    client = redis.asyncio.Redis.from_url(broker_url("redis"))
    try:
        consumer = AsyncConsumer(
            client if given is None else given,
            stream,
            group=CONSUMER,
            **_objects(env, wrong, asynchronous=True),
            **_FAST,
        )
        if check_only:
            await consumer.check()
        elif wrong.startswith("AUTOCOMMIT"):
            await consumer.run()
        else:
            for _ in range(400):
                if await consumer.poll():
                    return
            raise AssertionError("nothing settled")
    finally:
        await client.aclose()


for _wrong in (
    "AsyncInbox",
    "async_sessionmaker",
    "sessionmaker.begin",
    "Connection",
    "async def handler",
):

    @case(f"{_REDIS}()", _wrong, left=_redis_left)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        _run_redis(env, mid, wrong)


@case(f"{_REDIS}()", "redis.asyncio client", left=_redis_left)
async def _(env: Env, mid: str) -> None:
    import redis.asyncio

    given = redis.asyncio.Redis.from_url(broker_url("redis"))
    try:
        await asyncio.to_thread(_run_redis, env, mid, "-", given=given)
    finally:
        await given.aclose()


@case(f"{_REDIS}()", "a URL string", left=_redis_left)
def _(env: Env, mid: str) -> None:
    _run_redis(env, mid, "-", given=broker_url("redis"))


for _entry in (f"{_REDIS}.run", f"{_REDIS}.check"):

    @case(_entry, "AUTOCOMMIT sessionmaker", kind=ConfigurationError, left=_redis_left)
    def _(env: Env, mid: str, entry: str = _entry) -> None:
        _run_redis(env, mid, "AUTOCOMMIT", check_only=entry.endswith("check"))


for _wrong in ("sessionmaker", "async_sessionmaker.begin", "AsyncConnection"):

    @case(f"{_AREDIS}()", _wrong, left=_redis_left)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        await _run_redis_async(env, mid, wrong)


for _inbox in ("Inbox", "AsyncInbox", "plain def handler"):

    @case(f"{_AREDIS}()", _inbox, expect="once")
    async def _(env: Env, mid: str, inbox: str = _inbox) -> None:
        await _run_redis_async(env, mid, inbox)


@case(f"{_AREDIS}()", "redis.Redis client", left=_redis_left)
async def _(env: Env, mid: str) -> None:
    import redis

    given = redis.Redis.from_url(broker_url("redis"))
    try:
        await _run_redis_async(env, mid, "-", given=given)
    finally:
        given.close()


for _entry in (f"{_AREDIS}.run", f"{_AREDIS}.check"):

    @case(_entry, "AUTOCOMMIT async_sessionmaker", kind=ConfigurationError, left=_redis_left)
    async def _(env: Env, mid: str, entry: str = _entry) -> None:
        await _run_redis_async(env, mid, "AUTOCOMMIT", check_only=entry.endswith("check"))


# -- NATS JetStream ----------------------------------------------------------------------


#: The NATS consumer object, known by its module.
_NATS = "sa_inbox.brokers.nats.AsyncConsumer"


async def _nats_consume(
    env: Env,
    mid: str,
    wrong: str,
    *,
    check_only: bool = False,
    as_object: bool = False,
    on_connection: bool = False,
) -> None:
    """Publish ``mid`` (its own Nats-Msg-Id header: the stream's duplicate window is off) to
    the case's stream and consume until one message is settled: with :func:`consume`, or
    ``as_object`` with :class:`AsyncConsumer`; ``on_connection``, given the connection
    instead of its JetStream context."""
    import nats

    from sa_inbox.brokers.nats import AsyncConsumer, check, consume

    nc = await nats.connect(broker_url("nats"))
    js = nc.jetstream()
    try:
        if "nats" not in env.kept:
            token = uuid.uuid4().hex[:10]
            env.kept["nats"] = token
            await js.add_stream(name=f"misuse_{token}", subjects=[f"misuse.{token}"])
            await js.add_stream(name=f"misuse_{token}_dead", subjects=[f"misuse.{token}.dead"])
            env.cleanups.append(lambda: asyncio.run(_delete_streams(token)))
        token = env.kept["nats"]
        headers = {"Idempotency-Key": mid}
        await js.publish(f"misuse.{token}", b"10.00", headers=headers)
        objects = _objects(env, wrong, asynchronous=True)
        options: dict[str, Any] = {
            "consumer_name": CONSUMER,
            "fetch_timeout": 0.1,
            **objects,
        }
        shared = {"dead_letter": f"misuse.{token}.dead", "key_source": "Idempotency-Key"}
        if as_object:
            consumer = AsyncConsumer(
                nc if on_connection else js,
                f"misuse_{token}",
                "billing",
                options=DeliveryOptions(**shared, on_settled=lambda _: consumer.stop()),
                **options,
            )
            if check_only:
                await consumer.check()
            else:
                await asyncio.wait_for(consumer.run(), DEADLINE)
            return
        if check_only:
            await check(**objects)
            return
        stop = asyncio.Event()
        with warnings.catch_warnings():  # deprecated: still refuses what AsyncConsumer does
            warnings.simplefilter("ignore", DeprecationWarning)
            consuming = consume(
                js,
                f"misuse_{token}",
                "billing",
                stop=stop,
                options=DeliveryOptions(**shared, on_settled=lambda _: stop.set()),
                **options,
            )
            await asyncio.wait_for(consuming, DEADLINE)
    finally:
        await nc.close()


def _nats_left(env: Env) -> int:
    """Messages of the case's stream the durable consumer has not acked or terminated
    (dead-lettered): not yet delivered, or delivered and awaiting their ack."""

    async def count() -> int:
        import nats
        from nats.js.errors import NotFoundError

        nc = await nats.connect(broker_url("nats"))
        try:
            js = nc.jetstream()
            stream = f"misuse_{env.kept['nats']}"
            try:
                info = await js.consumer_info(stream, "billing")
            except NotFoundError:
                return int((await js.stream_info(stream)).state.messages)
            return int(info.num_pending) + int(info.num_ack_pending)
        finally:
            await nc.close()

    return asyncio.run(count()) if "nats" in env.kept else 0


async def _delete_streams(token: str) -> None:
    import nats

    nc = await nats.connect(broker_url("nats"))
    js = nc.jetstream()
    for name in (f"misuse_{token}", f"misuse_{token}_dead"):
        await js.delete_stream(name)
    await nc.close()


@case(f"{_NATS}()", "the NATS connection", left=_nats_left)
async def _(env: Env, mid: str) -> None:
    await _nats_consume(env, mid, "-", as_object=True, on_connection=True)


for _wrong in ("sessionmaker", "sessionmaker.begin", "async_sessionmaker.begin", "AsyncConnection"):

    @case("sa_inbox.brokers.nats.consume", _wrong, left=_nats_left)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        await _nats_consume(env, mid, wrong)


for _inbox in ("Inbox", "AsyncInbox", "plain def handler"):

    @case("sa_inbox.brokers.nats.consume", _inbox, expect="once")
    async def _(env: Env, mid: str, inbox: str = _inbox) -> None:
        await _nats_consume(env, mid, inbox)


@case(
    "sa_inbox.brokers.nats.consume",
    "AUTOCOMMIT async_sessionmaker",
    kind=ConfigurationError,
    left=_nats_left,
)
async def _(env: Env, mid: str) -> None:
    await _nats_consume(env, mid, "AUTOCOMMIT")


for _wrong in ("sessionmaker", "AUTOCOMMIT async_sessionmaker"):

    @case("sa_inbox.brokers.nats.check", _wrong, kind=ConfigurationError, left=_nats_left)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        await _nats_consume(env, mid, wrong, check_only=True)


for _wrong in ("sessionmaker", "sessionmaker.begin", "async_sessionmaker.begin", "AsyncConnection"):

    @case(f"{_NATS}()", _wrong, left=_nats_left)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        await _nats_consume(env, mid, wrong, as_object=True)


for _inbox in ("Inbox", "AsyncInbox", "plain def handler"):

    @case(f"{_NATS}()", _inbox, expect="once")
    async def _(env: Env, mid: str, inbox: str = _inbox) -> None:
        await _nats_consume(env, mid, inbox, as_object=True)


for _entry in (f"{_NATS}.run", f"{_NATS}.check"):

    @case(_entry, "AUTOCOMMIT async_sessionmaker", kind=ConfigurationError, left=_nats_left)
    async def _(env: Env, mid: str, entry: str = _entry) -> None:
        check_only = entry.endswith("check")
        await _nats_consume(env, mid, "AUTOCOMMIT", check_only=check_only, as_object=True)


# -- FastStream and Celery: refused when made, the message left on RabbitMQ ---------------


for _wrong in ("sessionmaker", "sessionmaker.begin", "a Table", "AsyncConnection"):

    @case("InboxMiddleware()", _wrong, left=_rabbit_left)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        from sa_inbox.brokers.faststream import InboxMiddleware

        await asyncio.to_thread(_rabbit_queue, env, mid)
        objects = _objects(env, wrong, asynchronous=True)
        if wrong == "a Table":
            objects["inbox"] = env.wrong(wrong)
        del objects["handler"]
        InboxMiddleware(consumer_name=CONSUMER, **objects)


@case(
    "InboxMiddleware.check",
    "AUTOCOMMIT async_sessionmaker",
    kind=ConfigurationError,
    left=_rabbit_left,
)
async def _(env: Env, mid: str) -> None:
    from sa_inbox.brokers.faststream import InboxMiddleware

    await asyncio.to_thread(_rabbit_queue, env, mid)
    objects = _objects(env, "AUTOCOMMIT", asynchronous=True)
    del objects["handler"]
    await InboxMiddleware(consumer_name=CONSUMER, **objects).check()


for _wrong in ("AsyncInbox", "async_sessionmaker", "sessionmaker.begin", "Connection"):

    @case("sa_inbox.brokers.celery.inbox_task", _wrong, left=_rabbit_left)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        from celery import Celery

        from sa_inbox.brokers.celery import inbox_task

        _rabbit_queue(env, mid)
        objects = _objects(env, wrong, asynchronous=False)
        del objects["handler"]
        app = Celery("misuse", broker=broker_url("rabbitmq"))

        @inbox_task(app, consumer_name=CONSUMER, **objects)
        def pay(session: Session, idempotency_key: str) -> None:
            env.app.apply_payment(session, idempotency_key, 1, AMOUNT)

        pay.apply(kwargs={"idempotency_key": mid})  # what the worker would run


@case("sa_inbox.brokers.celery.inbox_task", "async def body", left=_rabbit_left)
def _(env: Env, mid: str) -> None:
    from celery import Celery

    from sa_inbox.brokers.celery import inbox_task

    _rabbit_queue(env, mid)
    app = Celery("misuse", broker=broker_url("rabbitmq"))

    @inbox_task(app, consumer_name=CONSUMER, session_factory=env.app.Session, inbox=env.app.inbox)
    async def pay(session: Session, idempotency_key: str) -> None:
        env.app.apply_payment(session, idempotency_key, 1, AMOUNT)

    pay.apply(kwargs={"idempotency_key": mid})


# -- the shared flow: process() / process_async() with an in-memory settler ----------------


class _Settler:
    """Records each settlement in ``env.settled``: a refusal makes none."""

    def __init__(self, env: Env) -> None:
        self.settled = env.settled

    def ack(self) -> None:
        self.settled.append("ack")

    def retry(self) -> None:
        self.settled.append("nack")

    def dead_letter(self, reason: object, detail: str) -> None:
        self.settled.append("nack")


for _wrong in (
    "AsyncInbox",
    "async_sessionmaker",
    "sessionmaker.begin",
    "Connection",
    "async def handler",
):

    @case("sa_inbox.brokers.process", _wrong)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        from sa_inbox.brokers import process

        objects = _objects(env, wrong, asynchronous=False)
        process(Delivery(mid, b"10.00"), _Settler(env), consumer_name=CONSUMER, **objects)


for _wrong in ("sessionmaker", "async_sessionmaker.begin", "AsyncConnection"):

    @case("sa_inbox.brokers.process_async", _wrong)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        from sa_inbox.brokers import process_async

        objects = _objects(env, wrong, asynchronous=True)
        await process_async(
            Delivery(mid, b"10.00"), _Settler(env), consumer_name=CONSUMER, **objects
        )


for _wrong in ("AsyncInbox", "plain def handler"):

    @case("sa_inbox.brokers.process_async", _wrong, expect="once")
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        from sa_inbox.brokers import process_async

        objects = _objects(env, wrong, asynchronous=True)
        await process_async(
            Delivery(mid, b"10.00"), _Settler(env), consumer_name=CONSUMER, **objects
        )
