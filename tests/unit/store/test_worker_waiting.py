"""The worker waits and sleeps through the object it is given (``waiting=``): a stop request
ends a wait at once, whatever the poll interval (in-memory store, real threads)."""

from __future__ import annotations

import threading

import pytest

from sa_inbox.asyncio.waiting import LoopWaiting
from sa_inbox.exc import InvalidObject, SyncAsyncMismatch
from sa_inbox.store import DONE, StoredMessage, Worker
from sa_inbox.store.waiting import ThreadWaiting
from sa_inbox.testing import MemoryStore

#: A poll interval far longer than the test may take: a wait it ends proves the stop did.
POLL = 600.0


class Recording(ThreadWaiting):
    """The default waiting, recording its waits and sleeps."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []
        self.sleeps: list[float] = []
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        self.waiting.set()
        return super().wait(timeout)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def test_the_worker_waits_through_its_waiting_and_a_stop_ends_the_wait() -> None:
    store = MemoryStore(context="ctx")
    for i in range(3):
        store.receive(f"m-{i}", {"n": i})
    handled: list[str] = []

    def handler(context: object, message: StoredMessage) -> None:
        handled.append(message.message_id)

    waiting = Recording()
    worker = Worker(store, handler, poll_interval=POLL, waiting=waiting)
    assert worker.waiting is waiting and worker.stop_event is waiting
    runner = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    runner.start()
    assert waiting.waiting.wait(POLL / 10), "the worker never waited"
    worker.stop()
    runner.join(POLL / 10)
    assert not runner.is_alive(), "the stop did not end the wait"
    assert handled == ["m-0", "m-1", "m-2"]
    assert all(store.row(f"m-{i}").status == DONE for i in range(3))
    assert waiting.waits == [POLL] and worker.summary.reason == "stopped"


def test_the_default_is_a_threading_event() -> None:
    worker = Worker(MemoryStore(), lambda context, message: None)
    assert isinstance(worker.waiting, ThreadWaiting)
    assert isinstance(worker.stop_event, threading.Event)
    assert worker.waiting.on_event_loop is False


def test_a_waiting_that_is_not_one_is_refused_when_the_worker_is_made() -> None:
    with pytest.raises(InvalidObject, match="waiting must be"):
        Worker(MemoryStore(), lambda context, message: None, waiting=threading.Event())  # type: ignore[arg-type]


def test_an_event_loop_s_waiting_with_a_synchronous_store_is_refused() -> None:
    with pytest.raises(SyncAsyncMismatch, match="AsyncWorker"):
        Worker(MemoryStore(), lambda context, message: None, waiting=LoopWaiting())
