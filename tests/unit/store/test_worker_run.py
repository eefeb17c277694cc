"""A run driven step by step (``Worker.begin_run``), as the asyncio worker drives it: the same
limits, outcomes and summary as ``Worker.run`` (in-memory store, real threads)."""

from __future__ import annotations

import threading

import pytest

from sa_inbox.exc import ConfigurationError, MissingTable
from sa_inbox.store import DONE, PENDING, StoredMessage, Worker
from sa_inbox.store.worker import MAX_MESSAGES, WorkerSummary
from sa_inbox.testing import MemoryStore


def test_a_run_driven_by_its_steps_ends_as_run_would() -> None:
    store = MemoryStore(context="ctx")
    for i in range(5):
        store.receive(f"m-{i}", {"n": i})
    handled: list[str] = []
    worker = Worker(
        store, lambda context, m: handled.append(m.message_id), batch_size=2, concurrency=2
    )
    run = worker.begin_run(max_messages=3)
    assert run.owns_consumer_name()
    loops = [threading.Thread(target=run.loop, args=(i,)) for i in range(2)]
    for loop in loops:
        loop.start()
    for loop in loops:
        loop.join(60)
    summary = run.finish()
    assert summary == WorkerSummary(processed=3, reason=MAX_MESSAGES)
    assert sorted(handled) == ["m-0", "m-1", "m-2"]
    assert [store.row(f"m-{i}").status for i in range(5)] == [DONE] * 3 + [PENDING] * 2


def test_a_configuration_error_of_a_step_is_raised_by_finish() -> None:
    store = MemoryStore(context="ctx")
    store.receive("m-0", {})

    def handler(context: object, message: StoredMessage) -> None:
        raise MissingTable("the business table does not exist")

    run = Worker(store, handler).begin_run(until_empty=True)
    assert run.owns_consumer_name()
    run.loop(0)
    with pytest.raises(ConfigurationError):
        run.finish()
    assert store.row("m-0").status == PENDING and store.row("m-0").attempts == 0
