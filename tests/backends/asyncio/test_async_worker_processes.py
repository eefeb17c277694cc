"""The AsyncWorker in real processes (:mod:`tests.backends.asyncio.store_child`), on every
async driver, through the sync store tests' helpers (start at a barrier, the batch log, the
effects table, which keeps a message processed twice as two rows so that it can be counted).

Two worker processes of four tasks each drain a store exactly once; a worker process
SIGKILLed mid-batch loses nothing and applies nothing twice; ordered mode keeps each
aggregate's order under four tasks.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from sa_inbox.asyncio import AsyncInboxStore, AsyncWorker
from sa_inbox.store import (
    DEAD,
    DEFAULT_CONSUMER,
    DONE,
    PENDING,
    PROCESSING,
    Incoming,
    StoredMessage,
)
from tests.backends.store.test_store_backends import (
    VISIBILITY,
    finish,
    kill_while_handling,
    ordered_stream,
    read_batches,
    reaped,
    receive_stream,
    receive_while_running,
    release_together,
    start,
    stream_with_duplicates,
    wait_until,
)
from tests.support.app import hand_over
from tests.support.store_app import StoreApp, make_async_engine

pytestmark = pytest.mark.backend

CHILD = "tests.backends.asyncio.store_child"


def tasks_of(batches: list[dict[str, Any]], pid: int) -> set[str]:
    """The tasks of process ``pid`` that claimed a batch (the token is ``name/task#n``)."""
    return {b["token"].split("/")[1].split("#")[0] for b in batches if b["pid"] == pid}


def test_worker_processes_drain_the_store_exactly_once(
    async_url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    count, duplicates = 400, 60
    stream = stream_with_duplicates(count, duplicates, seed=4)
    assert receive_stream(store_app, stream) == count, "every redelivery skipped at receive"
    log = tmp_path / "batches.jsonl"
    children = [start(async_url, "drain", log, CHILD, batch=10, concurrency=4) for _ in range(2)]
    release_together(children)
    stats = [finish(child) for child in children]

    batches = read_batches(log)
    claimed = [i for batch in batches for i in batch["ids"]]
    assert len(claimed) == len(set(claimed)) == count, "no row was in two batches"
    pids = {b["pid"] for b in batches}
    assert len(pids) == 2, "both processes took part"
    per_process = [len(tasks_of(batches, pid)) for pid in pids]
    if async_url.startswith("sqlite"):
        # one writer at a time: a process's tasks take turns at the file's lock, and on a
        # loaded machine one task can win every turn of its process
        assert sum(per_process) > len(pids), "several tasks took batches"
    else:
        assert all(n > 1 for n in per_process), "several tasks in each"
    assert sum(s.get("done", 0) for s in stats) == count
    effects = store_app.effect_ids()
    assert len(effects) == len(set(effects)) == count, "every message processed exactly once"
    assert store_app.store.counts(store_app.engine) == {
        PENDING: 0,
        PROCESSING: 0,
        DONE: count,
        DEAD: 0,
    }


def test_sigkilled_worker_mid_batch_loses_nothing_and_applies_nothing_twice(
    async_url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    total = 12
    receive_stream(store_app, [Incoming(f"m-{i:02d}", {"seq": i}) for i in range(total)])
    log = tmp_path / "batches.jsonl"
    options = {"batch": 4, "concurrency": 2, "hang_at": 1, "visibility": VISIBILITY}
    with reaped([start(async_url, "drain", log, CHILD, **options)]) as [child]:
        kill_while_handling(child, "m-01")

    t = store_app.store.table
    with store_app.engine.connect() as conn:
        status = dict(conn.execute(sa.select(t.c.message_id, t.c.status)).all())
    done = sorted(m for m, s in status.items() if s == DONE)
    in_hand = sorted(m for m, s in status.items() if s == PROCESSING)
    assert "m-01" in in_hand, "the message in hand was held by the dead worker"
    (hung,) = [b for b in read_batches(log) if store_app.row("m-01")["id"] in b["ids"]]
    assert len(hung["ids"]) == 4 and "m-00" in done, "killed mid-batch: m-00 done, m-01 not"
    assert sorted(store_app.effect_ids()) == done, "exactly the committed messages applied"

    seen: list[StoredMessage] = []

    async def handler(session: AsyncSession, message: StoredMessage) -> None:
        seen.append(message)
        await store_app.apply_async(session, message)

    hand_over(store_app.store, store_app.engine, handler, DEFAULT_CONSUMER)

    async def drain() -> None:
        engine = make_async_engine(async_url)
        try:
            worker = AsyncWorker(
                AsyncInboxStore(store_app.store).bind(engine),
                handler,
                visibility_timeout=VISIBILITY,
                poll_interval=0.05,
                concurrency=2,
            )
            await worker.run(until_empty=True, handle_signals=False)
        finally:
            await engine.dispose()

    claimed_at = store_app.row("m-01")["claimed_at"]
    time.sleep(max(0.0, VISIBILITY - (time.time() - claimed_at.timestamp())) + 0.2)
    asyncio.run(drain())
    assert sorted(m.message_id for m in seen) == sorted(set(status) - set(done))
    assert all(m.attempts == 2 for m in seen if m.message_id in in_hand), "the kill counted"
    effects = store_app.effect_ids()
    assert sorted(effects) == [f"m-{i:02d}" for i in range(total)], "each applied once"
    assert store_app.store.counts(store_app.engine)[DONE] == total


def test_ordered_mode_keeps_per_aggregate_order_under_four_tasks(
    async_url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    """As the sync test: the stream arrives out of order across aggregates while the worker
    runs; every 5th message fails its first attempt, so its aggregate's next one must wait."""
    aggregates, per_aggregate = 12, 10
    rng = random.Random(7)
    stream = ordered_stream(aggregates, per_aggregate, rng)
    log = tmp_path / "batches.jsonl"
    child = start(async_url, "serve", log, CHILD, batch=5, concurrency=4, ordered=1, fail_first=5)
    release_together([child])
    receive_while_running(store_app, stream, rng)
    total = aggregates * per_aggregate
    wait_until(lambda: store_app.store.counts(store_app.engine)[DONE] == total, 60, "all processed")
    child.send_signal(signal.SIGTERM)
    finish(child)

    applied = store_app.effects_by_aggregate()
    assert applied == {f"a{a:02d}": list(range(per_aggregate)) for a in range(aggregates)}
    batches = read_batches(log)
    claimed = [i for batch in batches for i in batch["ids"]]
    retried = aggregates * len(range(0, per_aggregate, 5))  # seq 0 and 5 fail once
    assert len(claimed) == total + retried, "claimed once, and once more after a failure"
    assert len(tasks_of(batches, batches[0]["pid"])) > 1, "several tasks took part"
