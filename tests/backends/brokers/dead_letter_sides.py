"""Each broker's side of the dead-letter tests: a fresh queue / stream and its dead-letter
queue / stream, publishing as a producer does, and a real consumer of the adapter run until
it settled a number of deliveries.

The consumers run the payments app's handler (:class:`Payments`), which fails on the keys
it is told are poison until it is fixed (``handler.fixed = True``): a poison message is then
dead-lettered after ``max_deliveries`` = 3, and applied once replayed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from sa_inbox import Inbox
from sa_inbox.brokers import Delivery, DeliveryOptions, Settlement
from tests.support.app import CONSUMER, App

#: The async driver of each backend (the NATS consumer is asyncio only).
ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}
ASYNC_DRIVERS["mysql"] = "mysql+aiomysql"
#: Deliveries allowed before a failing message is dead-lettered.
MAX_DELIVERIES = 3
#: Seconds a consumer run may take before the test fails.
RUN_TIMEOUT = 30.0

#: A message to publish: (key or None, amount).
Message = tuple[str | None, str]


class Payments:
    """The handler: pays ``delivery.body`` to account 1; raises for a key of ``poison``
    until :attr:`fixed`."""

    def __init__(self, app: App, poison: set[str] | None = None) -> None:
        self.app = app
        self.poison = poison or set()
        self.fixed = False

    def check(self, delivery: Delivery) -> Decimal:
        if delivery.message_id in self.poison and not self.fixed:
            raise RuntimeError(f"cannot apply {delivery.message_id}")
        return Decimal(delivery.body.decode())

    def sync(self, session: Any, delivery: Delivery) -> None:
        amount = self.check(delivery)
        self.app.apply_payment(session, delivery.message_id or "", 1, amount)

    async def asynchronous(self, session: AsyncSession, delivery: Delivery) -> None:
        amount = self.check(delivery)
        await self.app.apply_payment_async(session, delivery.message_id or "", 1, amount)


def unique(prefix: str) -> str:
    nats_prefix = os.environ.get("SA_INBOX_TEST_NATS_PREFIX", "")
    token = uuid.uuid4().hex[:10]
    return f"{nats_prefix}_{prefix}_{token}" if nats_prefix else f"{prefix}_{token}"


def async_url(engine: sa.Engine) -> str:
    url = engine.url.set(drivername=ASYNC_DRIVERS[engine.url.get_backend_name()])
    return url.render_as_string(hide_password=False)


class Side:
    """What every broker's side offers the tests."""

    #: ``sa-inbox`` broker name, for the URL variable.
    broker: str
    #: The broker's URL and the dead-letter queue / stream, as ``replay(url, dead)`` takes.
    url: str
    dead: str

    def publish(self, messages: list[Message]) -> None:
        raise NotImplementedError

    def consume(
        self, app: App, inbox: Inbox, handler: Payments, settlements: int
    ) -> list[Settlement]:
        raise NotImplementedError

    def source_count(self) -> int:
        """Messages in the source queue / stream not yet consumed."""
        raise NotImplementedError

    def target(self) -> str:
        """The dead-letter queue as one URL (``stats --dead-letters``)."""
        return f"{self.url.rstrip('/')}/{self.dead}"

    def delete(self) -> None:
        raise NotImplementedError


def _until(settlements: list[Settlement], count: int, stop: Any) -> Any:
    def settled(settlement: Settlement) -> None:
        settlements.append(settlement)
        if len(settlements) >= count:
            stop()

    return settled


# -- RabbitMQ ----------------------------------------------------------------------------


class Rabbit(Side):
    """A quorum queue and its dead-letter queue (:func:`declare_queue`), pika's consumer."""

    broker = "rabbitmq"

    def __init__(self, url: str) -> None:
        import pika

        from sa_inbox.brokers.rabbitmq import declare_queue

        self.url = url
        self.queue = unique("dl")
        self._connection = pika.BlockingConnection(pika.URLParameters(url))
        self.channel = self._connection.channel()
        self.channel.confirm_delivery()
        self.dead = declare_queue(self.channel, self.queue)

    def publish(self, messages: list[Message]) -> None:
        import pika

        for key, amount in messages:
            properties = pika.BasicProperties(message_id=key, delivery_mode=2)
            self.channel.basic_publish("", self.queue, amount.encode(), properties, mandatory=True)

    def consume(
        self, app: App, inbox: Inbox, handler: Payments, settlements: int
    ) -> list[Settlement]:
        from sa_inbox.brokers.rabbitmq import Consumer

        seen: list[Settlement] = []
        consumer: Consumer | None = None
        consumer = Consumer(
            self.url,
            self.queue,
            session_factory=app.Session,
            inbox=inbox,
            consumer_name=CONSUMER,
            handler=handler.sync,
            options=DeliveryOptions(
                max_deliveries=MAX_DELIVERIES,
                on_settled=_until(seen, settlements, lambda: consumer and consumer.stop()),
            ),
            keyless_wait=0.2,
        )
        timer = threading.Timer(RUN_TIMEOUT, consumer.stop)
        timer.start()
        try:
            consumer.run()
        finally:
            timer.cancel()
        assert len(seen) >= settlements, f"{len(seen)} of {settlements} settled"
        return seen

    def source_count(self) -> int:
        return int(self.channel.queue_declare(self.queue, passive=True).method.message_count)

    def delete(self) -> None:
        self.channel.queue_delete(self.queue)
        self.channel.queue_delete(self.dead)
        self._connection.close()


# -- Redis -------------------------------------------------------------------------------


class Redis(Side):
    """A stream and ``<stream>:dead``, redis-py's consumer (polled)."""

    broker = "redis"

    def __init__(self, url: str) -> None:
        import redis

        self.url = url
        self.stream = unique("dl")
        self.dead = f"{self.stream}:dead"
        self.client = redis.Redis.from_url(url)

    def publish(self, messages: list[Message]) -> None:
        for key, amount in messages:
            fields = {"body": amount} if key is None else {"message_id": key, "body": amount}
            self.client.xadd(self.stream, fields)

    def consume(
        self, app: App, inbox: Inbox, handler: Payments, settlements: int
    ) -> list[Settlement]:
        from sa_inbox.brokers.redis import Consumer as RedisConsumer

        consumer = RedisConsumer(
            self.client,
            self.stream,
            group=CONSUMER,
            session_factory=app.Session,
            inbox=inbox,
            handler=handler.sync,
            options=DeliveryOptions(max_deliveries=MAX_DELIVERIES),
            visibility_timeout=0.3,
            block_timeout=0.1,
        )
        seen: list[Settlement] = []
        deadline = time.monotonic() + RUN_TIMEOUT
        while len(seen) < settlements:
            assert time.monotonic() < deadline, f"{len(seen)} of {settlements} settled"
            seen += consumer.poll()
        return seen

    def source_count(self) -> int:
        """Entries the group has not read yet (XINFO GROUPS ``lag``); all if no group yet."""
        groups = self.client.xinfo_groups(self.stream) if self.client.exists(self.stream) else []
        if not groups:
            return int(self.client.xlen(self.stream))
        return int(groups[0]["lag"] or 0)

    def delete(self) -> None:
        self.client.delete(self.stream, self.dead)
        self.client.close()


# -- NATS JetStream ----------------------------------------------------------------------


class Nats(Side):
    """A stream (subject ``<token>.pay``) and a dead-letter stream (``<token>.dead``), the
    adapter's ``AsyncConsumer``. The stream's ``duplicate_window`` is short, so a replayed
    message's ``Nats-Msg-Id`` is not dropped as a duplicate of the original publish."""

    broker = "nats"
    #: Seconds JetStream remembers a ``Nats-Msg-Id`` in the source stream.
    DUPLICATE_WINDOW = 0.5

    def __init__(self, url: str, *, duplicate_window: float = DUPLICATE_WINDOW) -> None:
        self.url = url
        token = unique("dl")
        self.stream, self.subject = f"{token}_pay", f"{token}.pay"
        self.dead, self.dead_subject = f"{token}_dead", f"{token}.dead"
        self.durable = f"{token}_billing"
        self.duplicate_window = duplicate_window
        self._published_at = 0.0
        self._run(self._declare())

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run(coroutine)

    async def _js(self) -> Any:
        import nats

        nc = await nats.connect(self.url)
        return nc, nc.jetstream()

    async def _declare(self) -> None:
        nc, js = await self._js()
        await js.add_stream(
            name=self.stream, subjects=[self.subject], duplicate_window=self.duplicate_window
        )
        await js.add_stream(name=self.dead, subjects=[self.dead_subject])
        await nc.close()

    def publish(self, messages: list[Message]) -> None:
        async def main() -> None:
            nc, js = await self._js()
            for key, amount in messages:
                headers = None if key is None else {"Nats-Msg-Id": key}
                ack = await js.publish(self.subject, amount.encode(), headers=headers)
                assert not ack.duplicate
            await nc.close()

        self._run(main())
        self._published_at = time.monotonic()

    def wait_out_the_duplicate_window(self) -> None:
        """Sleep until the source stream forgot the last publish's ``Nats-Msg-Id``."""
        left = self._published_at + self.duplicate_window + 0.2 - time.monotonic()
        if left > 0:
            time.sleep(left)

    def consume(
        self, app: App, inbox: Inbox, handler: Payments, settlements: int
    ) -> list[Settlement]:
        from sa_inbox.brokers.nats import AsyncConsumer, backoff

        async def main() -> list[Settlement]:
            nc, js = await self._js()
            engine = create_async_engine(async_url(app.engine))
            stop = asyncio.Event()
            seen: list[Settlement] = []
            try:
                await asyncio.wait_for(
                    AsyncConsumer(
                        js,
                        self.stream,
                        self.durable,
                        session_factory=async_sessionmaker(engine),
                        inbox=inbox,
                        handler=handler.asynchronous,
                        options=DeliveryOptions(
                            dead_letter=self.dead_subject,
                            max_deliveries=MAX_DELIVERIES,
                            retry_delay=backoff(0.05, 0.2),
                            on_settled=_until(seen, settlements, stop.set),
                        ),
                        consumer_name=CONSUMER,
                        ack_wait=2.0,
                        fetch_timeout=0.3,
                    ).run(stop),
                    RUN_TIMEOUT,
                )
            finally:
                await engine.dispose()
                await nc.close()
            return seen

        return list(self._run(main()))

    def source_count(self) -> int:
        async def main() -> int:
            nc, js = await self._js()
            try:
                info = await js.consumer_info(self.stream, self.durable)
                return int(info.num_pending + info.num_ack_pending)
            except Exception:  # no consumer yet: every message is pending
                return int((await js.stream_info(self.stream)).state.messages)
            finally:
                await nc.close()

        return int(self._run(main()))

    def delete(self) -> None:
        async def main() -> None:
            nc, js = await self._js()
            for stream in (self.stream, self.dead):
                await js.delete_stream(stream)
            await nc.close()

        self._run(main())


SIDES: dict[str, type[Side]] = {"rabbitmq": Rabbit, "redis": Redis, "nats": Nats}


# -- FastStream's middleware, in this process --------------------------------------------


class FastStreamRun:
    """A FastStream broker with :class:`~sa_inbox.brokers.faststream.InboxMiddleware`
    running in this process on ``name`` (a RabbitMQ quorum queue the test declared, a Redis
    stream with a reading and an ``XAUTOCLAIM`` subscriber, a NATS stream it declares), its
    handler :class:`Payments` keyed on the ``idempotency-key`` header."""

    KEY = "idempotency-key"

    def __init__(
        self, kind: str, url: str, name: str, app: App, inbox: Inbox, handler: Payments
    ) -> None:
        self.kind, self.url, self.name = kind, url, name
        self.app, self.inbox, self.handler = app, inbox, handler
        self.seen: list[Settlement] = []
        self._changed = asyncio.Event()

    async def __aenter__(self) -> FastStreamRun:
        from typing import Annotated

        from faststream import AckPolicy, Context

        from sa_inbox.brokers.faststream import InboxMiddleware

        self.engine = create_async_engine(async_url(self.app.engine))

        def settled(settlement: Settlement) -> None:
            self.seen.append(settlement)
            self._changed.set()

        middleware = InboxMiddleware(
            session_factory=async_sessionmaker(self.engine),
            inbox=self.inbox,
            consumer_name=CONSUMER,
            options=DeliveryOptions(
                key_source=self.KEY, max_deliveries=MAX_DELIVERIES, on_settled=settled
            ),
        )
        handler = self.handler

        async def pay(
            body: Any,
            session: Annotated[AsyncSession, Context("inbox_session")],
            message: Annotated[Any, Context("message")],
        ) -> None:
            delivery = Delivery(message.headers.get(self.KEY), str(body["amount"]).encode())
            await handler.asynchronous(session, delivery)

        self.broker = self._broker(middleware)
        self._subscribe(pay, AckPolicy.MANUAL)
        await self.broker.connect()
        await self.broker.start()
        return self

    def _broker(self, middleware: Any) -> Any:
        if self.kind == "rabbit":
            from faststream.rabbit import RabbitBroker

            return RabbitBroker(self.url, middlewares=[middleware], logger=None)
        if self.kind == "redis":
            from faststream.redis import RedisBroker

            return RedisBroker(self.url, middlewares=[middleware], logger=None)
        from faststream.nats import NatsBroker

        return NatsBroker(self.url, middlewares=[middleware], logger=None)

    def _subscribe(self, pay: Any, manual: Any) -> None:
        if self.kind == "rabbit":
            from faststream.rabbit import QueueType, RabbitQueue

            queue = RabbitQueue(self.name, queue_type=QueueType.QUORUM, declare=False)
            self.broker.subscriber(queue, ack_policy=manual)(pay)
        elif self.kind == "redis":
            from faststream.redis import StreamSub

            self.broker.subscriber(stream=StreamSub(self.name, group="g", consumer="c"))(pay)
            reclaim = StreamSub(
                self.name, group="g", consumer="c", min_idle_time=300, polling_interval=100
            )
            self.broker.subscriber(stream=reclaim)(pay)
        else:
            from faststream.nats import JStream, PullSub

            self.broker.subscriber(
                self.name,
                stream=JStream(self.name, subjects=[self.name]),
                durable="d",
                pull_sub=PullSub(batch_size=1, timeout=0.2),
                ack_policy=manual,
            )(pay)

    async def publish(self, messages: list[Message]) -> None:
        for key, amount in messages:
            headers = {} if key is None else {self.KEY: key}
            if self.kind == "redis":
                await self.broker.publish({"amount": amount}, stream=self.name, headers=headers)
            else:
                await self.broker.publish({"amount": amount}, self.name, headers=headers)

    async def settled(self, count: int) -> list[Settlement]:
        """Waits until ``count`` deliveries were settled in all."""
        deadline = time.monotonic() + RUN_TIMEOUT
        while len(self.seen) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"{len(self.seen)} of {count} settled"
            self._changed.clear()
            with suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return self.seen

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.broker.stop()
        finally:
            await self.engine.dispose()


@contextmanager
def faststream_queue(kind: str, url: str) -> Iterator[tuple[str, str]]:
    """A fresh queue / stream for :class:`FastStreamRun` and its dead-letter queue / stream
    (RabbitMQ: :func:`declare_queue`'s; Redis: the middleware's ``<name>:dead``; NATS: the
    stream FastStream declares, no dead-letter stream: ``""``), deleted after."""
    name = unique("fs")
    if kind == "rabbit":
        import pika

        from sa_inbox.brokers.rabbitmq import declare_queue

        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        dead = declare_queue(channel, name)
        try:
            yield name, dead
        finally:
            channel.queue_delete(name)
            channel.queue_delete(dead)
            connection.close()
    elif kind == "redis":
        import redis

        client = redis.Redis.from_url(url)
        try:
            yield name, f"{name}:dead"
        finally:
            client.delete(name, f"{name}:dead")
            client.close()
    else:
        try:
            yield name, ""
        finally:

            async def delete() -> None:
                import nats

                nc = await nats.connect(url)
                await nc.jetstream().delete_stream(name)
                await nc.close()

            asyncio.run(delete())
