"""The AsyncWorker's tasks wait on the event loop (``LoopWaiting``): a stop request, from the
loop or from another thread, ends their waits at once, whatever the poll interval; nothing
polls (on every async driver)."""

from __future__ import annotations

import asyncio
import threading
from decimal import Decimal

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from sa_inbox.asyncio import AsyncInboxStore, AsyncWorker
from sa_inbox.asyncio.waiting import LoopWaiting
from sa_inbox.store import InboxStore, Incoming, StoredMessage
from tests.backends.asyncio.test_async import run
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

#: A poll interval far longer than the test may take: a wait it ends proves the stop did.
POLL = 600.0


@pytest.mark.parametrize("from_thread", [False, True], ids=["loop", "thread"])
def test_a_stop_ends_every_task_s_wait(app: App, async_url: str, from_thread: bool) -> None:
    store = InboxStore(app.metadata, table_name="waiting_store", consumers=False)
    store.table.create(app.engine)
    astore = AsyncInboxStore(store)

    async def handler(session: AsyncSession, message: StoredMessage) -> None:
        await app.apply_payment_async(session, message.message_id, 1, Decimal(2))

    async def scenario(engine: AsyncEngine) -> object:
        async with async_sessionmaker(engine).begin() as session:
            await astore.receive_many(
                session, [Incoming(f"m-{i}", {}) for i in range(3)], consumer_name=CONSUMER
            )
        worker = AsyncWorker(
            astore.bind(engine),
            handler,
            consumer_name=CONSUMER,
            concurrency=2,
            poll_interval=POLL,
        )
        assert (
            isinstance(worker.waiting, LoopWaiting)
            and worker.sync_worker.stop_event is worker.waiting
        )
        running = asyncio.create_task(worker.run(handle_signals=False))
        while worker.summary.processed < 3:  # then both tasks wait POLL seconds
            await asyncio.sleep(0.01)
        if from_thread:
            stopper = threading.Thread(target=worker.stop)
            stopper.start()
            stopper.join()
        else:
            worker.stop()
        return await asyncio.wait_for(running, POLL / 10)

    try:
        summary = run(async_url, scenario)
    finally:
        store.table.drop(app.engine)
    assert summary.processed == 3 and summary.reason == "stopped"  # type: ignore[attr-defined]
    assert app.ledger_rows() == 3 and app.balance(1) == Decimal(6)
