"""The worker's rules, on the in-memory store with a fake clock (no database, no sleeping)."""

from __future__ import annotations

import datetime
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import pytest

from sa_inbox.exc import (
    InvalidArgument,
    InvalidHandler,
    InvalidMessageId,
    InvalidSessionFactory,
    MissingTable,
)
from sa_inbox.store import DEAD, DONE, PENDING, PROCESSING, StoredMessage
from sa_inbox.store.worker import (
    EMPTY,
    ERROR,
    MAX_MESSAGES,
    MAX_SECONDS,
    STOPPED,
    TRANSIENT_RETRIES,
    Backoff,
    Worker,
    WorkerSummary,
)
from sa_inbox.testing import MemoryStore

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryStore:
    return MemoryStore(context="ctx", clock=clock)


def worker(store: MemoryStore, handler: Any, clock: Clock, **kw: Any) -> Worker:
    kw.setdefault("visibility_timeout", 10)
    kw.setdefault("max_attempts", 3)
    kw.setdefault("backoff", Backoff(base=1.0, maximum=60.0))
    return Worker(store, handler, clock=clock, poll_interval=0.01, **kw)


def test_sigterm_stops_the_worker_gracefully(store: MemoryStore, clock: Clock) -> None:
    for i in range(3):
        store.receive(f"m{i}", i)
    w = worker(store, lambda ctx, m: os.kill(os.getpid(), signal.SIGTERM), clock, batch_size=3)
    previous = signal.getsignal(signal.SIGTERM)
    w.run()
    assert signal.getsignal(signal.SIGTERM) == previous, "handler restored"
    assert store.counts()[DONE] == 1 and store.counts()[PENDING] == 2


#: A worker process whose handler receives SIGTERM while the main thread holds the stop
#: event's lock, as a signal landing inside ``Event.wait`` would.
SIGNAL_IN_WAIT = """
import os, signal, time
from sa_inbox.store.worker import Worker
from sa_inbox.testing import MemoryStore

store = MemoryStore(context="ctx")
for i in range(3):
    store.receive(f"m{i}", i)

def handler(ctx, message):
    with worker.stop_event._cond:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)

worker = Worker(store, handler, poll_interval=0.01, batch_size=3)
summary = worker.run()
print(summary.reason, {k: v for k, v in store.counts().items() if v})
"""


def test_sigterm_while_the_stop_event_is_locked_still_stops_the_worker() -> None:
    # Python runs the handler between two bytecodes of the main thread: one that took the
    # event's lock would wait for itself forever.
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_IN_WAIT], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    reason, counts = done.stdout.split(" ", 1)
    assert reason == STOPPED
    assert eval(counts) == {DONE: 1, PENDING: 2}


def test_threads_claim_disjoint_batches(store: MemoryStore, clock: Clock) -> None:
    for i in range(400):
        store.receive(f"m{i}", i)
    batches: list[list[int]] = []
    lock = threading.Lock()

    def on_lease(token: str, batch: Any) -> None:
        with lock:
            batches.append([m.id for m in batch])

    w = worker(store, lambda ctx, m: None, clock, concurrency=4, batch_size=7, on_lease=on_lease)
    w.run(until_empty=True, handle_signals=False)
    claimed = [i for batch in batches for i in batch]
    assert len(claimed) == len(set(claimed)) == 400
    assert store.counts()[DONE] == 400


@pytest.mark.parametrize(
    "kw",
    [
        {"batch_size": 0},
        {"concurrency": -1},
        {"max_attempts": True},
        {"visibility_timeout": 0},
        {"poll_interval": "1"},
    ],
)
def test_bad_worker_arguments(store: MemoryStore, kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        Worker(store, lambda ctx, m: None, **kw)


@pytest.mark.parametrize("name", ["", " billing", "billing\n"])
def test_a_consumer_name_no_claim_could_take_is_refused_when_made(
    store: MemoryStore, name: str
) -> None:
    with pytest.raises(InvalidMessageId, match="consumer_name"):
        Worker(store, lambda ctx, m: None, consumer_name=name)


def test_backoff_doubles_and_caps() -> None:
    backoff = Backoff(base=0.5, maximum=3.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


class Deadlock(Exception):
    """Stands for a driver's deadlock error in the test below."""


class DeadlockingStore(MemoryStore):
    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, Deadlock)


def test_transient_errors_are_retried_before_they_count(clock: Clock) -> None:
    store = DeadlockingStore(clock=clock)
    store.receive("m1", 1)
    store.receive("m2", 2)
    calls: Counter[str] = Counter()

    def handler(ctx: Any, message: StoredMessage) -> None:
        calls[message.message_id] += 1
        if message.message_id == "m1" and calls["m1"] <= 2:
            raise Deadlock()
        if message.message_id == "m2":
            raise Deadlock()

    w = worker(store, handler, clock)
    w.run_once()
    assert (store.row("m1").status, store.row("m1").attempts, calls["m1"]) == (DONE, 1, 3)
    assert calls["m2"] == 1 + TRANSIENT_RETRIES, "then it counts as a failed attempt"
    assert (store.row("m2").status, store.row("m2").last_error) == (PENDING, "Deadlock: ")


def test_backoff_is_a_backoff_object_not_seconds(store: MemoryStore, clock: Clock) -> None:
    # seconds given directly would only fail at the first failed message, inside the loop
    with pytest.raises(InvalidArgument, match=r"backoff must be a Backoff\(base=seconds"):
        worker(store, lambda ctx, message: None, clock, backoff=5.0)


# -- run(): its contract ---------------------------------------------------------------------


def real_worker(store: MemoryStore, handler: Any, **kw: Any) -> Worker:
    """A worker on the real clock, with short waits (for back-offs that must pass)."""
    kw.setdefault("max_attempts", 3)
    kw.setdefault("backoff", Backoff(base=0.05, maximum=0.1))
    return Worker(store, handler, poll_interval=0.01, **kw)


def test_until_empty_retries_a_failed_message_after_its_backoff() -> None:
    store = MemoryStore()
    store.receive("m1", 1)
    store.receive("poison", 2)

    def handler(ctx: Any, message: StoredMessage) -> None:
        if message.message_id == "poison" or message.attempts == 1:
            raise RuntimeError(f"attempt {message.attempts} fails")

    w = real_worker(store, handler)
    summary = w.run(until_empty=True, handle_signals=False)
    assert (store.row("m1").status, store.row("m1").attempts) == (DONE, 2)
    assert (store.row("poison").status, store.row("poison").attempts) == (DEAD, 3)
    assert summary == WorkerSummary(processed=1, retried=3, dead=1, reason=EMPTY)
    assert w.summary == summary, "one run: the worker's totals are the run's"
    assert (w.stats["done"], w.stats["retry"], w.stats["dead"]) == (1, 3, 1)


def test_max_messages_claims_no_more_than_the_limit() -> None:
    store = MemoryStore()
    for i in range(20):
        store.receive(f"m{i}", i)
    w = real_worker(store, lambda ctx, m: None, concurrency=3, batch_size=4)
    summary = w.run(until_empty=True, max_messages=7, handle_signals=False)
    assert summary == WorkerSummary(processed=7, reason=MAX_MESSAGES)
    assert store.counts() == {PENDING: 13, PROCESSING: 0, DONE: 7, DEAD: 0}
    assert {r.attempts for r in store.rows if r.status == PENDING} == {0}, "never claimed"
    rest = w.run(until_empty=True, max_messages=100, handle_signals=False)
    assert rest == WorkerSummary(processed=13, reason=EMPTY), "counts of the second run"
    assert w.summary.processed == 20


def test_max_seconds_ends_a_run_that_would_wait_and_releases_the_batch(clock: Clock) -> None:
    store = MemoryStore(clock=clock)
    store.receive("never-ready", 0)
    w = worker(store, lambda ctx, m: (_ for _ in ()).throw(RuntimeError("no")), clock)
    assert w.run_once() == 1, "failed: pending again after a back-off the fake clock never ends"
    summary = w.run(until_empty=True, max_seconds=0.2, handle_signals=False)
    assert summary == WorkerSummary(reason=MAX_SECONDS)
    assert store.row("never-ready").status == PENDING
    assert not w.stop_event.is_set(), "the limit ended that run only"

    for i in range(3):
        store.receive(f"slow{i}", i)
    slow = worker(store, lambda ctx, m: time.sleep(0.3), clock, batch_size=3)
    summary = slow.run(max_seconds=0.1, handle_signals=False)
    assert summary == WorkerSummary(processed=1, released=2, reason=MAX_SECONDS)
    assert [(r.status, r.attempts) for r in store.rows[1:]] == [
        (DONE, 1),
        (PENDING, 0),
        (PENDING, 0),
    ]


def test_on_message_sees_each_final_outcome(store: MemoryStore, clock: Clock) -> None:
    for mid in ("ok", "bad", "later"):
        store.receive(mid, mid)
    seen: list[tuple[str, str]] = []

    def on_message(message: StoredMessage, outcome: str) -> None:
        seen.append((message.message_id, outcome))
        if message.message_id == "ok":
            raise ValueError("a broken metrics hook")

    def handler(ctx: Any, message: StoredMessage) -> None:
        if message.message_id == "bad":
            w.stop()
            raise RuntimeError("bad")

    w = worker(store, handler, clock, batch_size=3, max_attempts=1, on_message=on_message)
    summary = w.run(handle_signals=False)
    assert seen == [("ok", "done"), ("bad", "dead"), ("later", "released")]
    assert summary == WorkerSummary(processed=1, dead=1, released=1, errors=1, reason=STOPPED)
    assert store.row("ok").status == DONE, "the hook's error changes nothing"


@pytest.mark.parametrize("error", [MissingTable, InvalidSessionFactory])
def test_a_configuration_error_in_the_handler_stops_the_worker(
    store: MemoryStore, clock: Clock, error: type[Exception], caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(4):
        store.receive(f"m{i}", i)

    def handler(ctx: Any, message: StoredMessage) -> None:
        if message.message_id == "m1":
            raise error("set up wrongly")

    w = worker(store, handler, clock, batch_size=4)
    with caplog.at_level(logging.INFO, logger="sa_inbox.store.worker"), pytest.raises(error):
        w.run(until_empty=True, handle_signals=False)
    assert [(r.status, r.attempts, r.last_error) for r in store.rows] == [
        (DONE, 1, None),
        (PENDING, 0, None),
        (PENDING, 0, None),
        (PENDING, 0, None),
    ], "not a failed attempt: released with the attempt uncounted"
    assert w.summary == WorkerSummary(processed=1, released=3, reason=ERROR)
    with pytest.raises(error):
        w.run_once()  # outside a run: raised to the caller, the worker is not stopped
    assert not w.stop_event.is_set()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        f"worker stopped by a configuration error (no message is at fault, no attempt "
        f"counted as failed): {error.__name__}: set up wrongly"
    ]


def test_a_configuration_error_stops_every_thread(
    store: MemoryStore, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(9):
        store.receive(f"m{i}", i)
    barrier = threading.Barrier(3, timeout=30)

    def handler(ctx: Any, message: StoredMessage) -> None:
        barrier.wait()  # all three threads hold a batch
        raise MissingTable("no table")

    w = worker(store, handler, clock, batch_size=3, concurrency=3)
    with caplog.at_level(logging.INFO, logger="sa_inbox.store.worker"), pytest.raises(MissingTable):
        w.run(until_empty=True, handle_signals=False)
    assert store.counts() == {PENDING: 9, PROCESSING: 0, DONE: 0, DEAD: 0}
    assert {(r.attempts, r.last_error) for r in store.rows} == {(0, None)}
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1


class TablelessStore(MemoryStore):
    """A store whose every claim finds no table, as a database store without its table."""

    def lease(self, **kw: Any) -> list[StoredMessage]:
        raise MissingTable("the table inbox_store does not exist")


def test_a_configuration_error_from_the_store_is_raised_not_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = real_worker(TablelessStore(), lambda ctx, m: None, concurrency=2)
    with (
        caplog.at_level(logging.INFO, logger="sa_inbox.store.worker"),
        pytest.raises(MissingTable, match="inbox_store does not exist"),
    ):
        w.run(until_empty=True, max_seconds=30, handle_signals=False)
    assert w.summary == WorkerSummary(reason=ERROR)
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1
    assert not w.stop_event.is_set()


class FlakyStore(MemoryStore):
    """Claims fail ``failures`` times with ``error`` (a database that is away), then work."""

    def __init__(self, error: Exception, failures: int) -> None:
        super().__init__()
        self.error, self.failures = error, failures

    def lease(self, **kw: Any) -> list[StoredMessage]:
        if self.failures:
            self.failures -= 1
            raise self.error
        return super().lease(**kw)

    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, Deadlock)


@pytest.mark.parametrize(
    ("error", "counted"),
    [(ConnectionError("server closed the connection"), "errors"), (Deadlock(), "transient")],
)
def test_after_an_error_the_worker_waits_its_error_backoff_not_the_poll_interval(
    error: Exception, counted: str
) -> None:
    store = FlakyStore(error, failures=3)
    store.receive("m1", 1)
    w = Worker(store, lambda ctx, m: None, poll_interval=3600)
    summary = w.run(until_empty=True, max_seconds=60, handle_signals=False)
    assert store.row("m1").status == DONE
    expected = {"errors": 3} if counted == "errors" else {"transient_retries": 3}
    assert summary == WorkerSummary(processed=1, reason=EMPTY, **expected)


class ReapDeadlockingStore(DeadlockingStore):
    """Every reap fails with a deadlock (a Galera write-set from another node aborting the
    reap's locking read, error 1213)."""

    def reap(self, **kw: Any) -> Any:
        raise Deadlock()


def test_a_transient_error_in_the_reap_is_no_worker_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = ReapDeadlockingStore()
    store.receive("m1", 1)
    w = Worker(store, lambda ctx, m: None, reap_interval=0.01, poll_interval=0.01)
    with caplog.at_level(logging.INFO, logger="sa_inbox"):
        summary = w.run(until_empty=True, max_seconds=60, handle_signals=False)
    assert store.row("m1").status == DONE
    assert summary.errors == 0 and summary.transient_retries >= 1
    assert summary.processed == 1 and summary.reason == EMPTY
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_handler_that_cannot_take_session_and_message_is_refused(store: MemoryStore) -> None:
    def one_argument(message: StoredMessage) -> None: ...

    with pytest.raises(InvalidHandler, match=r"cannot be called as handler\(session, message\)"):
        Worker(store, one_argument)  # type: ignore[arg-type]
    with pytest.raises(InvalidHandler, match="not callable"):
        Worker(store, 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="max_messages"):
        Worker(store, lambda ctx, m: None).run(max_messages=0, handle_signals=False)


def test_an_async_handler_is_refused_before_anything_is_claimed(store: MemoryStore) -> None:
    """The synchronous worker cannot await a coroutine: refused at construction, and a
    plain function returning an awaitable is a failed attempt, never ``done``."""
    from sa_inbox.exc import AsyncHandlerError

    async def handler(session: object, message: StoredMessage) -> None: ...

    store.receive("m1", {})
    with pytest.raises(AsyncHandlerError, match="coroutine function"):
        Worker(store, handler)
    w = Worker(store, lambda ctx, m: handler(ctx, m), max_attempts=1)
    assert w.run(until_empty=True, handle_signals=False).dead == 1
    row = store.row("m1")
    assert row.status == DEAD and "AsyncHandlerError" in (row.last_error or "")


def test_a_shutdown_timeout_gives_back_the_unstarted_rest_of_an_abandoned_batch(
    store: MemoryStore,
) -> None:
    """A handler that outlasts the shutdown timeout is abandoned; the rest of its batch, never
    started, used to stay ``processing`` until the visibility timeout (an attempt used)."""
    for i in range(5):
        store.receive(f"m{i}", {})
    started, release = threading.Event(), threading.Event()

    def handler(session: object, message: StoredMessage) -> None:
        started.set()
        release.wait(10)

    w = Worker(store, handler, batch_size=5, concurrency=2, poll_interval=0.01)
    threading.Timer(0.0, lambda: (started.wait(5), w.stop())).start()
    summary = w.run(handle_signals=False, shutdown_timeout=0.2)
    try:
        statuses = sorted(row.status for row in store.rows)
        assert statuses == [PENDING] * 4 + [PROCESSING]
        assert summary.released == 4 and summary.processed == 0
    finally:
        release.set()
