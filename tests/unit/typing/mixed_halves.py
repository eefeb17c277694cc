# A user's file mixing the synchronous and asyncio halves of the API. Each line ending in
# "# mix" must be rejected by mypy --strict; the others must type-check.
from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

import sa_inbox
import sa_inbox.asyncio
from sa_inbox import Inbox, InboxStore
from sa_inbox.asyncio import AsyncInbox, AsyncInboxStore, AsyncOutbox, AsyncWorker
from sa_inbox.outbox import Outbox, OutboxRelay
from sa_inbox.store import StoredMessage

engine = sa.create_engine("sqlite://")
aengine = create_async_engine("sqlite+aiosqlite://")
metadata = sa.MetaData()
inbox = Inbox(metadata)
ainbox = AsyncInbox(inbox)
store = InboxStore(metadata)
astore = AsyncInboxStore(store)
outbox = Outbox(metadata)
Factory = sessionmaker(engine)
AsyncFactory = async_sessionmaker(aengine)


def pay(session: Session) -> None: ...


async def apay(session: AsyncSession) -> None: ...


def work(session: Session, message: StoredMessage) -> None: ...


async def awork(session: AsyncSession, message: StoredMessage) -> None: ...


def ack() -> None: ...


async def synchronous(session: Session) -> None:
    sa_inbox.handle(Factory, inbox, "m", "c", pay, ack=ack, nack=ack)
    sa_inbox.handle(Factory, ainbox, "m", "c", pay, ack=ack, nack=ack)  # mix
    sa_inbox.handle(AsyncFactory, inbox, "m", "c", pay, ack=ack, nack=ack)  # mix
    inbox.claim(session, "m", "c")
    await ainbox.claim(session, "m", "c")  # mix
    sa_inbox.register_claim(session, ainbox, "m", "c")  # mix
    store.bind(engine)
    store.bind(aengine)  # mix
    store.receive(session, "m", {})
    await astore.receive(session, "m", {})  # mix
    await AsyncOutbox(outbox).publish(session, "d", {})  # mix
    OutboxRelay(aengine, outbox, Any)  # mix


async def asynchronous(session: AsyncSession) -> None:
    await sa_inbox.asyncio.handle(AsyncFactory, inbox, "m", "c", apay, ack=ack, nack=ack)
    await sa_inbox.asyncio.handle(AsyncFactory, ainbox, "m", "c", apay, ack=ack, nack=ack)
    await sa_inbox.asyncio.handle(Factory, inbox, "m", "c", apay, ack=ack, nack=ack)  # mix
    await ainbox.claim(session, "m", "c")
    inbox.claim(session, "m", "c")  # mix
    sa_inbox.asyncio.register_claim(session, ainbox, "m", "c")
    sa_inbox.register_claim(session, inbox, "m", "c")  # mix
    AsyncWorker(astore.bind(aengine), awork)
    AsyncWorker(store.bind(engine), awork)  # mix
    astore.bind(engine)  # mix
    store.receive(session, "m", {})  # mix
    outbox.publish(session, "d", {})  # mix
