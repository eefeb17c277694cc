"""The misuse matrix's cases for the Kafka and SQS adapters, each delivering through the live
broker (Tansu and moto, started by ``scripts/servers.sh``; skipped where its URL is unset).

As for the other brokers (:mod:`.broker_cases`): each delivery publishes the message (the
same id every time) to the case's own topic or queue, then makes and runs the consumer with
the wrong object in one place: refused when made or at start, before any SQL or request,
with the message left on the broker (Kafka: the group committed no offset past it; SQS: the
queue still holds it); or, where the intent is unambiguous (an AsyncInbox for an asyncio
consumer), processed once and acked as a duplicate after.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

from sa_inbox import ConfigurationError
from sa_inbox.brokers import DeliveryOptions, Settlement
from sa_inbox.outbox import OutboxMessage
from tests.conftest import broker_url

from .broker_cases import DEADLINE, _objects
from .cases import case, claim_and_pay
from .env import CONSUMER, Env

# -- Kafka -------------------------------------------------------------------------------

_KAFKA = "sa_inbox.brokers.kafka"


def _servers() -> str:
    from tests.backends.brokers.kafka_support import bootstrap

    return bootstrap(broker_url("kafka"))


def _kafka_topic(env: Env, mid: str) -> str:
    """The case's topic (made once, with the Kafka tables of the inbox: a consumer that is
    not refused runs), with ``mid`` published to it once more."""
    from sa_inbox.brokers.kafka import kafka_tables
    from tests.backends.brokers.kafka_support import create_topic, publish

    if "topic" not in env.kept:
        tables = kafka_tables(env.app.inbox)
        env.app.metadata.create_all(env.app.engine, [tables.attempts, tables.offsets])
        env.kept["topic"] = create_topic(_servers())
        env.kept["group"] = f"misuse-{uuid.uuid4().hex[:10]}"
        env.kept["published"] = 0
    publish(_servers(), env.kept["topic"], [(mid, "10.00")])
    env.kept["published"] += 1
    return str(env.kept["topic"])


def _kafka_left(env: Env) -> int:
    """Records of the case's topic past the group's committed offset."""
    from tests.backends.brokers.kafka_support import committed

    if "topic" not in env.kept:
        return 0
    done = committed(_servers(), env.kept["group"], env.kept["topic"], 1).get(0, 0)
    return int(env.kept["published"]) - done


def _kafka_consumer(env: Env, mid: str, wrong: str, *, asynchronous: bool, **kw: Any) -> Any:
    from sa_inbox.brokers.kafka import AsyncConsumer, Consumer
    from tests.backends.brokers.kafka_support import FAST_ASYNC, FAST_SYNC

    topic = _kafka_topic(env, mid)
    make = AsyncConsumer if asynchronous else Consumer
    return make(
        topic,
        bootstrap_servers=_servers(),
        group_id=env.kept["group"],
        consumer_name=CONSUMER,
        config=FAST_ASYNC if asynchronous else FAST_SYNC,
        **_objects(env, wrong, asynchronous=asynchronous),
        options=DeliveryOptions(**kw),
    )


def _run_kafka(env: Env, mid: str, wrong: str) -> None:
    consumer: Any = None

    def settled(_: Settlement) -> None:
        consumer.stop()

    consumer = _kafka_consumer(env, mid, wrong, asynchronous=False, on_settled=settled)
    timer = threading.Timer(DEADLINE, consumer.stop)
    timer.start()
    try:
        consumer.run()
    finally:
        timer.cancel()


async def _run_kafka_async(env: Env, mid: str, wrong: str) -> None:
    stop = asyncio.Event()
    consumer = await asyncio.to_thread(
        _kafka_consumer, env, mid, wrong, asynchronous=True, on_settled=lambda _: stop.set()
    )
    await asyncio.wait_for(consumer.run(stop), DEADLINE)


for _wrong in (
    "AsyncInbox",
    "async_sessionmaker",
    "sessionmaker.begin",
    "Connection",
    "async def handler",
):

    @case(f"{_KAFKA}.Consumer()", _wrong, left=_kafka_left)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        _run_kafka(env, mid, wrong)


for _entry in (f"{_KAFKA}.Consumer.run", f"{_KAFKA}.Consumer.check"):

    @case(_entry, "AUTOCOMMIT sessionmaker", kind=ConfigurationError, left=_kafka_left)
    def _(env: Env, mid: str, entry: str = _entry) -> None:
        if entry.endswith("run"):
            _run_kafka(env, mid, "AUTOCOMMIT")
        else:
            _kafka_consumer(env, mid, "AUTOCOMMIT", asynchronous=False).check()


for _wrong in ("sessionmaker", "sessionmaker.begin", "async_sessionmaker.begin", "AsyncConnection"):

    @case(f"{_KAFKA}.AsyncConsumer()", _wrong, left=_kafka_left)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        await _run_kafka_async(env, mid, wrong)


# one "once" case: each delivery's consumer joins the group anew (seconds each)
@case(f"{_KAFKA}.AsyncConsumer()", "AsyncInbox", expect="once")
async def _(env: Env, mid: str) -> None:
    await _run_kafka_async(env, mid, "AsyncInbox")


for _entry in (f"{_KAFKA}.AsyncConsumer.run", f"{_KAFKA}.AsyncConsumer.check"):

    @case(_entry, "AUTOCOMMIT async_sessionmaker", kind=ConfigurationError, left=_kafka_left)
    async def _(env: Env, mid: str, entry: str = _entry) -> None:
        if entry.endswith("run"):
            await _run_kafka_async(env, mid, "AUTOCOMMIT")
        else:
            consumer = await asyncio.to_thread(
                _kafka_consumer, env, mid, "AUTOCOMMIT", asynchronous=True
            )
            await consumer.check()


@case(f"{_KAFKA}.kafka_tables", "a Table")
def _(env: Env, mid: str) -> None:
    from sa_inbox.brokers.kafka import kafka_tables

    kafka_tables(env.wrong("a Table"))
    claim_and_pay(env, mid)


# -- SQS ---------------------------------------------------------------------------------

_SQS = "sa_inbox.brokers.sqs"


def _sqs_queue(env: Env, mid: str) -> Any:
    """The case's queue (made once), with ``mid`` sent to it once more."""
    from tests.backends.brokers.sqs_support import Queues, sqs_client

    if "sqs" not in env.kept:
        client = sqs_client(broker_url("sqs"))
        env.kept["sqs"] = queues = Queues.make(client, visibility_timeout=30)
        env.cleanups.append(queues.delete)
    queues = env.kept["sqs"]
    if mid:
        queues.send([(mid, "10.00")])
    return queues


def _sqs_left(env: Env) -> int:
    """Messages still on the case's queue, visible or in flight (a deleted one was acked; a
    dead-lettered one moved to the dead-letter queue)."""
    if "sqs" not in env.kept:
        return 0
    return sum(env.kept["sqs"].counts())


def _sqs_published(env: Env) -> tuple[int, int]:
    """(messages on the case's queue, 0): a refused publisher sends nothing."""
    return _sqs_left(env), 0


def _aio_client() -> Any:
    """An aiobotocore client context (entered by ``async with``)."""
    from aiobotocore.session import get_session

    from sa_inbox.brokers.sqs import client_options

    return get_session().create_client("sqs", **client_options(broker_url("sqs")))


def _sqs_consumer(env: Env, client: Any, mid: str, wrong: str, *, asynchronous: bool) -> Any:
    """The consumer on ``client``, the object named ``wrong`` in its place (a wrong client
    is ``client`` itself)."""
    from sa_inbox.brokers.sqs import AsyncConsumer, Consumer

    queues = _sqs_queue(env, mid)
    make = AsyncConsumer if asynchronous else Consumer
    objects = _objects(env, "-" if wrong.endswith("client") else wrong, asynchronous=asynchronous)
    return make(
        client,
        queues.name,
        consumer_name=CONSUMER,
        options=DeliveryOptions(dead_letter=queues.dead_name),
        wait_time=0,
        **objects,
    )


async def _until_settled(consumer: Any) -> None:
    while not await consumer.poll():
        pass


def _run_sqs(env: Env, mid: str, wrong: str, *, client: Any = None, check: bool = False) -> None:
    """The sync consumer on a boto3 client (or ``client``): run, or ``check()``."""
    from tests.backends.brokers.sqs_support import sqs_client

    client = client if client is not None else sqs_client(broker_url("sqs"))
    consumer = _sqs_consumer(env, client, mid, wrong, asynchronous=False)
    if check:
        consumer.check()
        return
    stop = threading.Event()
    timer = threading.Timer(DEADLINE, stop.set)
    timer.start()
    try:
        if wrong.startswith("AUTOCOMMIT"):
            consumer.run(stop)
        else:
            while not stop.is_set() and not consumer.poll():
                pass
    finally:
        timer.cancel()
        consumer.close()


async def _run_sqs_async(
    env: Env, mid: str, wrong: str, *, client: Any = None, check: bool = False
) -> None:
    """The asyncio consumer on an aiobotocore client (or ``client``): run, or ``check()``."""
    async with _aio_client() as aio:
        given = client if client is not None else aio
        consumer = await asyncio.to_thread(_sqs_consumer, env, given, mid, wrong, asynchronous=True)
        if check:
            await consumer.check()
            return
        try:
            if wrong.startswith("AUTOCOMMIT"):
                await asyncio.wait_for(consumer.run(), DEADLINE)
            else:
                await asyncio.wait_for(_until_settled(consumer), DEADLINE)
        finally:
            await consumer.aclose()


for _wrong in (
    "AsyncInbox",
    "async_sessionmaker",
    "sessionmaker.begin",
    "Connection",
    "async def handler",
):

    @case(f"{_SQS}.Consumer()", _wrong, left=_sqs_left)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        _run_sqs(env, mid, wrong)


@case(f"{_SQS}.Consumer()", "aiobotocore client", left=_sqs_left)
async def _(env: Env, mid: str) -> None:
    async with _aio_client() as aio:
        _run_sqs(env, mid, "aiobotocore client", client=aio)


for _entry in (f"{_SQS}.Consumer.run", f"{_SQS}.Consumer.check"):

    @case(_entry, "AUTOCOMMIT sessionmaker", kind=ConfigurationError, left=_sqs_left)
    def _(env: Env, mid: str, entry: str = _entry) -> None:
        _run_sqs(env, mid, "AUTOCOMMIT", check=entry.endswith("check"))


for _wrong in ("sessionmaker", "async_sessionmaker.begin", "AsyncConnection"):

    @case(f"{_SQS}.AsyncConsumer()", _wrong, left=_sqs_left)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        await _run_sqs_async(env, mid, wrong)


@case(f"{_SQS}.AsyncConsumer()", "boto3 client", left=_sqs_left)
async def _(env: Env, mid: str) -> None:
    from tests.backends.brokers.sqs_support import sqs_client

    await _run_sqs_async(env, mid, "boto3 client", client=sqs_client(broker_url("sqs")))


@case(f"{_SQS}.AsyncConsumer()", "aiobotocore client not entered", left=_sqs_left)
async def _(env: Env, mid: str) -> None:
    context = _aio_client()
    try:
        await _run_sqs_async(env, mid, "aiobotocore client", client=context)
    finally:
        async with context:  # its client is made on entering: no coroutine left un-awaited
            pass


for _inbox in ("Inbox", "AsyncInbox", "plain def handler"):

    @case(f"{_SQS}.AsyncConsumer()", _inbox, expect="once")
    async def _(env: Env, mid: str, inbox: str = _inbox) -> None:
        await _run_sqs_async(env, mid, inbox)


for _entry in (f"{_SQS}.AsyncConsumer.run", f"{_SQS}.AsyncConsumer.check"):

    @case(_entry, "AUTOCOMMIT async_sessionmaker", kind=ConfigurationError, left=_sqs_left)
    async def _(env: Env, mid: str, entry: str = _entry) -> None:
        await _run_sqs_async(env, mid, "AUTOCOMMIT", check=entry.endswith("check"))


def _outgoing(env: Env, mid: str) -> OutboxMessage:
    """The outbox row a relay would publish: ``mid`` to the case's queue."""
    queues = _sqs_queue(env, "")
    return OutboxMessage(id=1, message_id=mid, destination=queues.url, payload=b"10.00")


@case(f"{_SQS}.Publisher()", "aiobotocore client", state=_sqs_published)
async def _(env: Env, mid: str) -> None:
    from sa_inbox.brokers.sqs import Publisher

    message = await asyncio.to_thread(_outgoing, env, mid)
    async with _aio_client() as aio:
        Publisher(aio).publish(message)  # what the sync relay calls


@case(f"{_SQS}.AsyncPublisher()", "boto3 client", state=_sqs_published)
async def _(env: Env, mid: str) -> None:
    from sa_inbox.brokers.sqs import AsyncPublisher
    from tests.backends.brokers.sqs_support import sqs_client

    message = await asyncio.to_thread(_outgoing, env, mid)
    await AsyncPublisher(sqs_client(broker_url("sqs"))).publish(message)  # the async relay's call
