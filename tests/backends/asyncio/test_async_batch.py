"""The batch transaction mode on the asyncio worker, on every async driver (aiosqlite,
asyncpg, psycopg 3 async, aiomysql): the same batch code as the sync worker, run in
greenlets, and the same checks of business state (effects, balances, store rows)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from sa_inbox.asyncio import AsyncInboxStore, AsyncWorker
from sa_inbox.store import DONE, PENDING, StoredMessage
from sa_inbox.store.worker import Backoff, WorkerSummary
from tests.backends.store.test_store_batch import (
    ACCOUNTS,
    drain_with_duplicates,
    kill_mid_batch,
    ordered_in_batches,
    receive,
    rows,
)
from tests.support.store_app import StoreApp, make_async_engine

pytestmark = pytest.mark.backend

CHILD = "tests.backends.asyncio.store_child"


@pytest.mark.parametrize(
    "failing",
    [{4: "raise"}, {2: "raise", 6: "sql"}],
    ids=["one-fails", "savepoint-isolates-a-database-error"],
)
def test_async_batch_fails_the_failing_messages_alone(
    async_url: str, store_app: StoreApp, failing: dict[int, str]
) -> None:
    receive(store_app, 10)

    async def handler(session: AsyncSession, message: StoredMessage) -> None:
        seq = message.payload["seq"]
        await session.execute(store_app.effect(message))
        await session.execute(store_app.credit(seq % ACCOUNTS))
        if failing.get(seq) == "raise":
            raise RuntimeError(f"handler of {message.message_id} fails")
        if failing.get(seq) == "sql":  # a duplicate key: aborts a PostgreSQL transaction
            await session.execute(store_app.accounts.insert().values(id=0, balance=0))

    async def main() -> WorkerSummary:
        engine = make_async_engine(async_url)
        try:
            worker = AsyncWorker(
                AsyncInboxStore(store_app.store).bind(engine),
                handler,
                transaction="batch",
                batch_size=10,
                backoff=Backoff(base=60, maximum=60),
            )
            return await worker.run(max_messages=10, handle_signals=False)
        finally:
            await engine.dispose()

    summary = asyncio.run(main())
    others = [f"m-{i}" for i in range(10) if i not in failing]
    assert sorted(store_app.effect_ids()) == sorted(others)
    expected = Counter(i % ACCOUNTS for i in range(10) if i not in failing)
    assert store_app.balances() == {a: expected[a] for a in range(ACCOUNTS)}
    assert rows(store_app) == {m: (DONE, 1) for m in others} | {
        f"m-{i}": (PENDING, 1) for i in failing
    }
    assert (summary.processed, summary.retried) == (10 - len(failing), len(failing))
    assert summary.batch_reruns == 1, "one re-run, with savepoints, without the first failure"


def test_async_worker_processes_drain_with_duplicates_exactly_once(
    async_url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    drain_with_duplicates(async_url, store_app, tmp_path, CHILD)


def test_async_sigkill_mid_batch_commits_nothing_and_loses_nothing(
    async_url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    kill_mid_batch(async_url, store_app, tmp_path, CHILD)


def test_async_ordered_mode_is_kept_in_batch_mode(
    async_url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    ordered_in_batches(async_url, store_app, tmp_path, CHILD)
