"""A user's application, for the tests of :mod:`sa_inbox.testing`'s exactly-once checks: a
payments ledger, its sa-inbox handlers, and consumers of its own written right and wrong.

:func:`setup` makes the tables on a database (dropped first) and returns a session factory
of the URL's half (``sessionmaker``, or ``async_sessionmaker`` for an async driver), kept in
:data:`SESSION` for the consumers that claim by themselves. The pytester files of
``tests/backends/testkit`` import it as a user's test imports their application.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import Inbox, idempotency_key
from sa_inbox.brokers import Delivery
from sa_inbox.testing import BrokerDelivery, Message
from tests.support.app import sync_driver_url

CONSUMER = "billing"
CENTS = 500

metadata = sa.MetaData()
inbox = Inbox(metadata)
ledger = sa.Table(
    "kit_ledger",
    metadata,
    sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
    sa.Column("payment", sa.String(64), nullable=False),
    sa.Column("cents", sa.Integer, nullable=False),
)
#: A dedup table of the consumers' own, with its unique constraint.
claims = sa.Table("kit_claims", metadata, sa.Column("message_id", sa.String(64), primary_key=True))
#: A dedup table without one.
loose_claims = sa.Table(
    "kit_loose_claims",
    metadata,
    sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
    sa.Column("message_id", sa.String(64), nullable=False),
)

#: The session factory of the last :func:`setup`.
SESSION: Any = None
#: The payment provider's log: every charge() call, as (cents, idempotency key).
CHARGES: list[tuple[int, str | None]] = []


def is_async(url: str) -> bool:
    return sa.make_url(url).get_driver_name() in ("aiosqlite", "asyncpg", "aiomysql")


def setup(url: str) -> Any:
    """Fresh tables on ``url``'s database; its session factory (also :data:`SESSION`)."""
    global SESSION
    teardown()
    engine = sa.create_engine(sync_driver_url(url))
    metadata.drop_all(engine)
    metadata.create_all(engine)
    engine.dispose()
    if is_async(url):
        from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

        SESSION = async_sessionmaker(create_async_engine(url))
    else:
        # SQLite: a writer waits for another's lock up to 30 s (the default is 5 s)
        options = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
        SESSION = sessionmaker(sa.create_engine(url, **options))
    CHARGES.clear()
    return SESSION


def teardown() -> None:
    """Close the connections of the last :func:`setup`'s synchronous engine."""
    bind = None if SESSION is None else SESSION.kw.get("bind")
    if isinstance(bind, sa.Engine):
        bind.dispose()


# -- the message, its state --------------------------------------------------------------


def payment(message_id: str) -> Message:
    """A new payment, as its producer sends it."""
    return Message(message_id, json.dumps({"payment": message_id, "cents": CENTS}).encode())


def ledger_rows(session: Session, message: Message) -> int:
    """The payment's ledger rows (1 once it is applied)."""
    query = (
        sa.select(sa.func.count()).select_from(ledger).where(ledger.c.payment == message.message_id)
    )
    return int(session.scalar(query) or 0)


def _row(body: bytes) -> dict[str, Any]:
    data = json.loads(body)
    return {"payment": data["payment"], "cents": data["cents"]}


# -- sa-inbox handlers ---------------------------------------------------------------------


def apply(session: Session, delivery: Delivery) -> None:
    """Right: the business change, nothing else."""
    session.execute(ledger.insert().values(_row(delivery.body)))


async def apply_async(session: Any, delivery: Delivery) -> None:
    await session.execute(ledger.insert().values(_row(delivery.body)))


def apply_and_commit(session: Session, delivery: Delivery) -> None:
    """Wrong: commits the claim's transaction itself."""
    apply(session, delivery)
    session.commit()


async def apply_and_commit_async(session: Any, delivery: Delivery) -> None:
    await apply_async(session, delivery)
    await session.commit()


def charge(cents: int, idempotency_key: str | None = None) -> None:
    """The payment provider (an HTTP call in production)."""
    CHARGES.append((cents, idempotency_key))


async def charge_async(cents: int, idempotency_key: str | None = None) -> None:
    CHARGES.append((cents, idempotency_key))


def apply_and_charge(session: Session, delivery: Delivery) -> None:
    """Wrong: charges the card with no idempotency key."""
    charge(CENTS)
    apply(session, delivery)


def apply_and_charge_keyed(session: Session, delivery: Delivery) -> None:
    """Right: the charge carries the message's idempotency key."""
    assert delivery.message_id is not None
    charge(CENTS, idempotency_key=idempotency_key(delivery.message_id, CONSUMER, "charge"))
    apply(session, delivery)


async def apply_and_charge_async(session: Any, delivery: Delivery) -> None:
    await charge_async(CENTS)
    await apply_async(session, delivery)


async def apply_and_charge_keyed_async(session: Any, delivery: Delivery) -> None:
    assert delivery.message_id is not None
    key = idempotency_key(delivery.message_id, CONSUMER, "charge")
    await charge_async(CENTS, idempotency_key=key)
    await apply_async(session, delivery)


def apply_leaving_a_thread(session: Session, delivery: Delivery) -> None:
    """Wrong: starts work it does not wait for."""
    threading.Thread(target=time.sleep, args=(2,), name="receipt-mailer").start()
    apply(session, delivery)


async def apply_leaving_a_task(session: Any, delivery: Delivery) -> None:
    asyncio.get_running_loop().create_task(asyncio.sleep(2), name="receipt-mailer")
    await apply_async(session, delivery)


def tag_key(delivery: BrokerDelivery) -> str:
    """Wrong: keys on the broker's delivery tag."""
    return f"tag-{delivery.delivery_tag}"


# -- consumers of the app's own --------------------------------------------------------------


def _insert_loose(conn_dialect: str, message_id: str) -> Any:
    """INSERT-or-skip into the table without a unique constraint: it never skips."""
    values = {"message_id": message_id}
    if conn_dialect == "postgresql":
        return postgresql.insert(loose_claims).values(values).on_conflict_do_nothing()
    if conn_dialect == "mysql":
        return mysql.insert(loose_claims).values(values).prefix_with("IGNORE")
    return sqlite.insert(loose_claims).values(values).on_conflict_do_nothing()


def claim_first(delivery: BrokerDelivery, ack: Any) -> None:
    """Right: Inbox.claim() by hand, the change, one commit, then the ack."""
    with SESSION.begin() as session:
        if inbox.claim(session, delivery.message_id, CONSUMER):
            session.execute(ledger.insert().values(_row(delivery.body)))
    ack()


def select_first(delivery: BrokerDelivery, ack: Any) -> None:
    """Wrong: checks its dedup table with a SELECT, then inserts."""
    with SESSION.begin() as session:
        found = session.scalar(
            sa.select(sa.func.count())
            .select_from(claims)
            .where(claims.c.message_id == delivery.message_id)
        )
        if not found:
            session.execute(claims.insert().values(message_id=delivery.message_id))
            session.execute(ledger.insert().values(_row(delivery.body)))
    ack()


def loose_claim(delivery: BrokerDelivery, ack: Any) -> None:
    """Wrong: insert-first, into a dedup table without a unique constraint."""
    with SESSION.begin() as session:
        name = session.get_bind().dialect.name
        inserted = session.execute(_insert_loose(name, str(delivery.message_id))).rowcount
        if inserted:
            session.execute(ledger.insert().values(_row(delivery.body)))
    ack()


def ack_before_commit(delivery: BrokerDelivery, ack: Any) -> None:
    """Wrong: acks inside the transaction, before its commit."""
    with SESSION.begin() as session:
        if inbox.claim(session, delivery.message_id, CONSUMER):
            session.execute(ledger.insert().values(_row(delivery.body)))
        session.flush()
        ack()


def tag_keyed(delivery: BrokerDelivery, ack: Any) -> None:
    """Wrong: claims the broker's delivery tag."""
    with SESSION.begin() as session:
        if inbox.claim(session, tag_key(delivery), CONSUMER):
            session.execute(ledger.insert().values(_row(delivery.body)))
    ack()


async def claim_first_async(delivery: BrokerDelivery, ack: Any) -> None:
    from sa_inbox.asyncio import AsyncInbox

    async with SESSION.begin() as session:
        if await AsyncInbox(inbox).claim(session, delivery.message_id, CONSUMER):
            await session.execute(ledger.insert().values(_row(delivery.body)))
    await ack()


async def select_first_async(delivery: BrokerDelivery, ack: Any) -> None:
    async with SESSION.begin() as session:
        found = await session.scalar(
            sa.select(sa.func.count())
            .select_from(claims)
            .where(claims.c.message_id == delivery.message_id)
        )
        if not found:
            await session.execute(claims.insert().values(message_id=delivery.message_id))
            await session.execute(ledger.insert().values(_row(delivery.body)))
    await ack()


async def loose_claim_async(delivery: BrokerDelivery, ack: Any) -> None:
    async with SESSION.begin() as session:
        name = session.get_bind().dialect.name
        result = await session.execute(_insert_loose(name, str(delivery.message_id)))
        if result.rowcount:
            await session.execute(ledger.insert().values(_row(delivery.body)))
    await ack()


async def ack_before_commit_async(delivery: BrokerDelivery, ack: Any) -> None:
    from sa_inbox.asyncio import AsyncInbox

    async with SESSION.begin() as session:
        if await AsyncInbox(inbox).claim(session, delivery.message_id, CONSUMER):
            await session.execute(ledger.insert().values(_row(delivery.body)))
        await session.flush()
        await ack()


async def tag_keyed_async(delivery: BrokerDelivery, ack: Any) -> None:
    from sa_inbox.asyncio import AsyncInbox

    async with SESSION.begin() as session:
        if await AsyncInbox(inbox).claim(session, tag_key(delivery), CONSUMER):
            await session.execute(ledger.insert().values(_row(delivery.body)))
    await ack()
