"""What the NATS tests and their consumer child share: the streams of one test, and a
consumer run that stops after a number of settlements."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

import nats
from nats.js import JetStreamContext
from nats.js.api import ConsumerInfo
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from sa_inbox.brokers import Delivery, Settlement
from sa_inbox.brokers.nats import AsyncConsumer, backoff
from tests.support.app import CONSUMER, App
from tests.support.options import with_options

#: Seconds JetStream waits for an ack in these tests (a killed consumer's message returns).
ACK_WAIT = 1.0
#: The poison message's body: the handler raises on it.
POISON = b"boom"


@dataclass(frozen=True)
class Names:
    """One test's stream, its dead-letter stream, their subjects and the durable consumer,
    all prefixed with ``$SA_INBOX_TEST_NATS_PREFIX`` (the brokers are shared)."""

    stream: str
    subject: str
    dead_stream: str
    dead_subject: str
    durable: str

    @classmethod
    def fresh(cls) -> Names:
        prefix = os.environ.get("SA_INBOX_TEST_NATS_PREFIX", "")
        token = f"{prefix}_{uuid.uuid4().hex[:10]}" if prefix else uuid.uuid4().hex[:10]
        return cls(
            stream=f"{token}_pay",
            subject=f"{token}.pay",
            dead_stream=f"{token}_dead",
            dead_subject=f"{token}.dead",
            durable=f"{token}_billing",
        )

    def as_args(self) -> list[str]:
        return list(asdict(self).values())


async def declare(js: JetStreamContext, names: Names, *, duplicate_window: float = 0) -> None:
    """The stream and its dead-letter stream (``duplicate_window`` seconds, 0: 2 minutes)."""
    await js.add_stream(
        name=names.stream, subjects=[names.subject], duplicate_window=duplicate_window
    )
    await js.add_stream(name=names.dead_stream, subjects=[names.dead_subject])


async def delete(js: JetStreamContext, names: Names) -> None:
    for stream in (names.stream, names.dead_stream):
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_stream(stream)


async def publish(
    js: JetStreamContext, names: Names, messages: list[tuple[dict[str, str] | None, bytes]]
) -> list[bool]:
    """Publishes each ``(headers, body)``; whether JetStream called it a duplicate."""
    acks = [await js.publish(names.subject, body, headers=headers) for headers, body in messages]
    return [bool(ack.duplicate) for ack in acks]


async def consumer_info(js: JetStreamContext, names: Names) -> ConsumerInfo:
    info: ConsumerInfo = await js.consumer_info(names.stream, names.durable)
    return info


def pay(app: App) -> Any:
    """The handler: the payment of ``body`` to account 1; raises on :data:`POISON`."""

    async def handler(session: AsyncSession, delivery: Delivery) -> None:
        if delivery.body == POISON:
            raise ValueError("cannot parse the payment")
        amount = Decimal(delivery.body.decode())
        await app.apply_payment_async(session, delivery.message_id or "", 1, amount)

    return handler


async def run_consumer(
    js: JetStreamContext,
    names: Names,
    async_url: str,
    app: App,
    *,
    settlements: int,
    handler: Any = None,
    timeout: float = 20.0,
    **kw: Any,
) -> list[Settlement]:
    """Runs an :class:`AsyncConsumer` until ``settlements`` messages are settled (or
    ``timeout``)."""
    engine = create_async_engine(async_url)
    seen: list[Settlement] = []
    stop = asyncio.Event()

    def on_settled(settlement: Settlement) -> None:
        seen.append(settlement)
        if len(seen) >= settlements:
            stop.set()

    options: dict[str, Any] = {
        "consumer_name": CONSUMER,
        "ack_wait": ACK_WAIT,
        "retry_delay": backoff(0.05, 0.2),
        "fetch_timeout": 0.5,
        "max_deliveries": 3,
        **kw,
    }
    try:
        await asyncio.wait_for(
            AsyncConsumer(
                js,
                names.stream,
                names.durable,
                session_factory=async_sessionmaker(engine),
                inbox=app.inbox,
                handler=handler or pay(app),
                **with_options(
                    {"dead_letter": names.dead_subject, "on_settled": on_settled, **options}
                ),
            ).run(stop),
            timeout,
        )
    finally:
        await engine.dispose()
    return seen
