"""The ownership tests' service and its consumer process.

Two handlers of one service, ``create_order`` and ``send_invoice`` (and their ``async def``
twins), each writing one row in ``order_effects``: the message id and the handler's name.

As a process, ``python -m tests.backends.consumers.orders URL HANDLER COUNT [PAUSE_AFTER]``
(or ``python tests/backends/consumers/orders.py ...``): prints ``READY`` once connected and
waits for a line on stdin (the barrier), then delivers ``evt-0`` … ``evt-<COUNT-1>`` to
HANDLER under the consumer name ``orders`` with :func:`sa_inbox.handle` (an ``_async``
handler on the URL's async driver: :func:`sa_inbox.asyncio.handle`), counting the acks and
nacks; after PAUSE_AFTER messages it prints ``PAUSED`` and waits for another line. It
prints ``DONE <acks> <nacks>`` and exits 0, or ``REFUSED <message id> <owner> <acks>
<nacks>`` and exits 3 when the name belongs to another handler. ``... URL name`` prints
the :func:`~sa_inbox.consumers.handler_name` of ``create_order``.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

import sa_inbox
import sa_inbox.asyncio
from sa_inbox import Inbox
from sa_inbox.consumers import handler_name
from sa_inbox.exc import ConsumerNameTaken
from tests.support.child import say

CONSUMER = "orders"
#: Exit status of a process refused the consumer name.
REFUSED = 3


class Orders:
    """The inbox (with its consumers table) and the effects table, on one MetaData."""

    def __init__(self, **inbox_options: Any) -> None:
        self.metadata = sa.MetaData()
        self.inbox = Inbox(self.metadata, **inbox_options)
        self.effects = sa.Table(
            "order_effects",
            self.metadata,
            sa.Column(
                "id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                sa.Identity(),
                primary_key=True,
            ),
            sa.Column("message_id", sa.String(255), nullable=False),
            sa.Column("handler", sa.String(64), nullable=False),
        )

    def reset(self, engine: sa.Engine) -> None:
        self.metadata.drop_all(engine, checkfirst=True)
        self.metadata.create_all(engine)

    def effects_by_handler(self, engine: sa.Engine) -> dict[str, int]:
        """Effect rows per handler: what each handler applied."""
        t = self.effects
        query = sa.select(t.c.handler, sa.func.count()).group_by(t.c.handler)
        with engine.connect() as conn:
            return {str(name): int(count) for name, count in conn.execute(query)}

    def claims(self, engine: sa.Engine, consumer_name: str = CONSUMER) -> int:
        t = self.inbox.table
        query = sa.select(sa.func.count()).where(t.c.consumer_name == consumer_name)
        with engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def owners(self, engine: sa.Engine) -> list[tuple[str, str]]:
        """``(consumer_name, handler)`` of every owner row of the inbox."""
        assert self.inbox.consumers is not None
        t = self.inbox.consumers.table
        query = sa.select(t.c.consumer_name, t.c.handler).order_by(t.c.consumer_name)
        with engine.connect() as conn:
            return [(str(name), str(handler)) for name, handler in conn.execute(query)]


#: The service's schema (the handlers write through it).
ORDERS = Orders()


def _effect(message_id: str, handler: str) -> sa.Insert:
    return ORDERS.effects.insert().values(message_id=message_id, handler=handler)


def create_order(session: Session, message_id: str) -> None:
    """The order service's handler: one effect row."""
    session.execute(_effect(message_id, "create_order"))


def send_invoice(session: Session, message_id: str) -> None:
    """The billing handler someone gave the same consumer name."""
    session.execute(_effect(message_id, "send_invoice"))


async def create_order_async(session: AsyncSession, message_id: str) -> None:
    """:func:`create_order` on an AsyncSession."""
    await session.execute(_effect(message_id, "create_order"))


async def send_invoice_async(session: AsyncSession, message_id: str) -> None:
    """:func:`send_invoice` on an AsyncSession."""
    await session.execute(_effect(message_id, "send_invoice"))


HANDLERS = {
    "create_order": create_order,
    "send_invoice": send_invoice,
    "create_order_async": create_order_async,
    "send_invoice_async": send_invoice_async,
}


class Broker:
    """Counts the acks and nacks of the deliveries."""

    def __init__(self) -> None:
        self.acks = 0
        self.nacks = 0

    def ack(self) -> None:
        self.acks += 1

    def nack(self) -> None:
        self.nacks += 1


def _consume_sync(url: str, handler: Any, ids: list[str], pause_after: int, broker: Broker) -> None:
    engine = sa.create_engine(url)
    try:
        Session = sessionmaker(engine)
        with engine.connect():
            pass
        say("READY")
        sys.stdin.readline()
        for n, message_id in enumerate(ids):
            if n == pause_after:
                say("PAUSED")
                sys.stdin.readline()
            bound = functools.partial(handler, message_id=message_id)
            sa_inbox.handle(
                Session, ORDERS.inbox, message_id, CONSUMER, bound,
                ack=broker.ack, nack=broker.nack,
            )  # fmt: skip
    finally:
        engine.dispose()


async def _consume_async(
    url: str, handler: Any, ids: list[str], pause_after: int, broker: Broker
) -> None:
    engine = create_async_engine(url)
    try:
        Session = async_sessionmaker(engine)
        async with engine.connect():
            pass
        say("READY")
        await asyncio.to_thread(sys.stdin.readline)
        for n, message_id in enumerate(ids):
            if n == pause_after:
                say("PAUSED")
                await asyncio.to_thread(sys.stdin.readline)
            bound = functools.partial(handler, message_id=message_id)
            await sa_inbox.asyncio.handle(
                Session, ORDERS.inbox, message_id, CONSUMER, bound,
                ack=broker.ack, nack=broker.nack,
            )  # fmt: skip
    finally:
        await engine.dispose()


def main(argv: list[str]) -> int:
    url, handler_key, *rest = argv
    if handler_key == "name":
        say(handler_name(create_order))
        return 0
    count, *pause = rest
    ids = [f"evt-{n}" for n in range(int(count))]
    pause_after = int(pause[0]) if pause else -1
    handler = HANDLERS[handler_key]
    broker = Broker()
    try:
        if handler_key.endswith("_async"):  # on the URL's async driver
            asyncio.run(_consume_async(url, handler, ids, pause_after, broker))
        else:
            _consume_sync(url, handler, ids, pause_after, broker)
    except ConsumerNameTaken as exc:
        first = ids[broker.acks + broker.nacks]  # each delivery before it acked or nacked
        say(f"REFUSED {first} {exc.owner} {broker.acks} {broker.nacks}")
        return REFUSED
    say(f"DONE {broker.acks} {broker.nacks}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
