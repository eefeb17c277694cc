"""The worker's rules, on the in-memory store with a fake clock (no database, no sleeping)."""

from __future__ import annotations

import datetime
import os
import signal
import threading
from collections import Counter
from typing import Any

import pytest

from sa_inbox.exc import InvalidMessageId, InvalidStoreArgument
from sa_inbox.store import DEAD, DONE, PENDING, PROCESSING, Incoming, StoredMessage
from sa_inbox.testing import MemoryStore
from sa_inbox.worker import TRANSIENT_RETRIES, Backoff, Worker

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


def test_receive_skips_duplicates_and_refuses_bad_input(store: MemoryStore) -> None:
    assert store.receive("m1", {"amount": 1})
    assert not store.receive("m1", {"amount": 999})
    assert store.receive_many([Incoming("m2", 2), Incoming("m1", 3), Incoming("m3", 4)]) == {
        "m2",
        "m3",
    }
    with pytest.raises(InvalidStoreArgument):
        store.receive("bad", {"x": object()})
    with pytest.raises(InvalidStoreArgument):
        store.receive("nan", float("nan"))
    with pytest.raises(InvalidMessageId):
        store.receive(" padded", 1)
    assert [r.message_id for r in store.rows] == ["m1", "m2", "m3"]
    assert store.row("m1").payload == {"amount": 1}


def test_every_message_processed_once(store: MemoryStore, clock: Clock) -> None:
    seen: list[tuple[Any, str]] = []
    for i in range(25):
        store.receive(f"m{i}", i)
    w = worker(store, lambda ctx, m: seen.append((ctx, m.message_id)), clock, batch_size=4)
    w.run(until_empty=True, handle_signals=False)
    assert sorted(mid for _, mid in seen) == sorted(f"m{i}" for i in range(25))
    assert {ctx for ctx, _ in seen} == {"ctx"}
    assert store.counts() == {PENDING: 0, PROCESSING: 0, DONE: 25, DEAD: 0}
    assert all(r.attempts == 1 for r in store.rows)
    assert w.stats["done"] == 25


def test_failure_backs_off_then_succeeds(store: MemoryStore, clock: Clock) -> None:
    calls: list[int] = []

    def flaky(ctx: Any, message: StoredMessage) -> None:
        calls.append(message.attempts)
        if message.attempts == 1:
            raise RuntimeError("database of the partner is down")

    store.receive("m1", 1)
    w = worker(store, flaky, clock)
    assert w.run_once() == 1
    row = store.row("m1")
    assert (row.status, row.attempts) == (PENDING, 1)
    assert row.available_at == START + datetime.timedelta(seconds=1)
    assert row.last_error == "RuntimeError: database of the partner is down"
    assert w.run_once() == 0, "not claimable before the back-off"
    clock.advance(1)
    assert w.run_once() == 1
    assert (row.status, row.attempts, calls) == (DONE, 2, [1, 2])


def test_poison_message_goes_dead_others_flow(store: MemoryStore, clock: Clock) -> None:
    done: list[str] = []

    def handler(ctx: Any, message: StoredMessage) -> None:
        if message.payload == "poison":
            raise ValueError("cannot parse")
        done.append(message.message_id)

    store.receive("bad", "poison")
    for i in range(5):
        store.receive(f"ok{i}", i)
    w = worker(store, handler, clock, max_attempts=3)
    for _ in range(10):
        w.run_once()
        clock.advance(60)
    bad = store.row("bad")
    assert (bad.status, bad.attempts, bad.last_error) == (DEAD, 3, "ValueError: cannot parse")
    assert sorted(done) == [f"ok{i}" for i in range(5)]
    assert store.counts()[DONE] == 5
    assert w.stats["dead"] == 1 and w.stats["retry"] == 2


def test_abandoned_claim_comes_back_after_visibility_timeout(
    store: MemoryStore, clock: Clock
) -> None:
    ran: list[str] = []
    store.receive("m1", 1)
    crashed = store.claim(
        consumer_name="default",
        claimed_by="dead-worker#1",
        limit=5,
        visibility_timeout=10,
        max_attempts=3,
        ordered=False,
        now=clock(),
    )
    assert [m.attempts for m in crashed] == [1]
    w = worker(store, lambda ctx, m: ran.append(m.claimed_by), clock)
    clock.advance(9.9)
    assert w.run_once() == 0, "still within the visibility timeout"
    clock.advance(0.2)
    assert w.run_once() == 1
    assert store.row("m1").attempts == 2 and len(ran) == 1
    # the first worker wakes up: its claim is gone, its handler must not run
    assert not store.complete(crashed[0], lambda ctx, m: ran.append("twice"), now=clock())
    assert not store.fail(crashed[0], "late", retry_at=None, now=clock())
    assert len(ran) == 1 and store.row("m1").status == DONE


def test_reaper_dead_letters_a_message_that_kills_its_worker(
    store: MemoryStore, clock: Clock
) -> None:
    store.receive("killer", 1)
    for attempt in range(1, 4):
        batch = store.claim(
            consumer_name="default",
            claimed_by=f"w#{attempt}",
            limit=1,
            visibility_timeout=10,
            max_attempts=3,
            ordered=False,
            now=clock(),
        )
        assert [m.attempts for m in batch] == [attempt]
        clock.advance(11)  # the worker died with the row in hand
    w = worker(store, lambda ctx, m: None, clock)
    assert w.run_once() == 0, "attempts used up: not claimed a fourth time"
    w.reap()
    row = store.row("killer")
    assert row.status == DEAD and "abandoned" in (row.last_error or "")


def test_per_aggregate_order_with_a_retry_in_front(store: MemoryStore, clock: Clock) -> None:
    order: list[str] = []

    def handler(ctx: Any, message: StoredMessage) -> None:
        if message.message_id == "a1" and message.attempts == 1:
            raise RuntimeError("first try fails")
        order.append(message.message_id)

    for mid, aggregate in [("a1", "A"), ("b1", "B"), ("a2", "A"), ("b2", "B"), ("a3", "A")]:
        store.receive(mid, mid, aggregate_id=aggregate)
    w = worker(store, handler, clock, batch_size=10, ordered=True)
    assert w.run_once() == 2, "one head per aggregate: a1 and b1"
    assert w.run_once() == 1, "b2; a2 waits behind a1's back-off"
    assert w.run_once() == 0
    clock.advance(1)
    while w.run_once():
        pass
    assert order == ["b1", "b2", "a1", "a2", "a3"]


def test_stop_releases_the_unstarted_rest_of_the_batch(store: MemoryStore, clock: Clock) -> None:
    for i in range(5):
        store.receive(f"m{i}", i)
    w = worker(store, lambda ctx, m: w.stop(), clock, batch_size=5)
    w.run(handle_signals=False)
    assert store.counts() == {PENDING: 4, PROCESSING: 0, DONE: 1, DEAD: 0}
    assert [r.attempts for r in store.rows if r.status == PENDING] == [0, 0, 0, 0]
    assert w.stats["released"] == 4


def test_sigterm_stops_the_worker_gracefully(store: MemoryStore, clock: Clock) -> None:
    for i in range(3):
        store.receive(f"m{i}", i)
    w = worker(store, lambda ctx, m: os.kill(os.getpid(), signal.SIGTERM), clock, batch_size=3)
    previous = signal.getsignal(signal.SIGTERM)
    w.run()
    assert signal.getsignal(signal.SIGTERM) == previous, "handler restored"
    assert store.counts()[DONE] == 1 and store.counts()[PENDING] == 2


def test_threads_claim_disjoint_batches(store: MemoryStore, clock: Clock) -> None:
    for i in range(400):
        store.receive(f"m{i}", i)
    batches: list[list[int]] = []
    lock = threading.Lock()

    def on_claim(token: str, batch: Any) -> None:
        with lock:
            batches.append([m.id for m in batch])

    w = worker(store, lambda ctx, m: None, clock, concurrency=4, batch_size=7, on_claim=on_claim)
    w.run(until_empty=True, handle_signals=False)
    claimed = [i for batch in batches for i in batch]
    assert len(claimed) == len(set(claimed)) == 400
    assert store.counts()[DONE] == 400


def test_replay_dead_after_a_fix(store: MemoryStore, clock: Clock) -> None:
    fixed = False

    def handler(ctx: Any, message: StoredMessage) -> None:
        if not fixed:
            raise RuntimeError("bug")

    store.receive("m1", 1)
    w = worker(store, handler, clock, max_attempts=1)
    w.run_once()
    assert store.row("m1").status == DEAD
    fixed = True
    with pytest.raises(InvalidStoreArgument):
        store.replay()
    with pytest.raises(InvalidStoreArgument, match="dead or done"):
        store.replay(status=PENDING)
    assert store.replay(status=DEAD) == 1
    w.run_once()
    assert (store.row("m1").status, store.row("m1").attempts) == (DONE, 1)


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
    with pytest.raises(InvalidStoreArgument):
        Worker(store, lambda ctx, m: None, **kw)


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
    with pytest.raises(InvalidStoreArgument, match=r"backoff must be a Backoff\(base=seconds"):
        worker(store, lambda ctx, message: None, clock, backoff=5.0)


def test_memory_claim_for_every_consumer_and_what_is_still_unfinished(
    store: MemoryStore, clock: Clock
) -> None:
    store.receive("b1", 1, consumer_name="billing", aggregate_id="A")
    store.receive("b2", 2, consumer_name="billing", aggregate_id="A")
    store.receive("s1", 3, consumer_name="shipping", aggregate_id="A")
    assert store.has_unfinished(consumer_name=None)
    assert not store.has_unfinished(consumer_name="default")
    claim: dict[str, Any] = {
        "limit": 10, "visibility_timeout": 60, "max_attempts": 3, "ordered": True, "now": clock()
    }  # fmt: skip
    assert store.claim(consumer_name="default", claimed_by="d#1", **claim) == []
    first = store.claim(consumer_name=None, claimed_by="all#1", **claim)
    assert [(m.consumer_name, m.message_id) for m in first] == [
        ("billing", "b1"),
        ("shipping", "s1"),
    ]
    assert store.has_unfinished(consumer_name="shipping"), "processing is unfinished"
    for message in first:
        assert store.complete(message, lambda ctx, m: None, now=clock())
    assert not store.has_unfinished(consumer_name="shipping")
    [second] = store.claim(consumer_name=None, claimed_by="all#2", **claim)
    assert second.message_id == "b2"
    assert store.complete(second, lambda ctx, m: None, now=clock())
    assert not store.has_unfinished(consumer_name=None)
