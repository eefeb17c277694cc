"""The store contract: the same scenarios on every :class:`~sa_inbox.store.MessageStore`.

Each scenario runs on the in-memory store (:class:`sa_inbox.testing.MemoryStore`) and on the
database store on SQLite, PostgreSQL, MariaDB (and Oracle when its URL is set), through the
adapter of :mod:`tests.contract.stores` and one fake clock: deduplicated receive, claim
order, attempts counted at claim, back-off, dead letters, release, reap, replay,
per-aggregate order, the visibility timeout and the claim token, ``has_unfinished`` and
``consumer_name=None``. Each asserts on the rows and on the handler's business change.

What only one store has stays with that store: SQL, real concurrency (threads, processes),
SIGKILL, transactions rolled back (tests/backends/store/), and the worker's own rules and the
in-memory store's introspection (tests/unit/store/).
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from sa_inbox.exc import InvalidArgument, InvalidMessageId
from sa_inbox.store import (
    DEAD,
    DONE,
    PENDING,
    PROCESSING,
    Incoming,
    MessageStore,
    ReapResult,
    StoredMessage,
)
from sa_inbox.store.protocol import Handler
from sa_inbox.store.worker import EMPTY, Backoff, Worker, WorkerSummary

from .stores import START, StoreUnderTest

VISIBILITY = 10  # seconds: the visibility timeout of the scenarios' workers


def worker(sut: StoreUnderTest, handler: Any, **kw: Any) -> Worker:
    """A worker on ``sut``'s fake clock."""
    kw.setdefault("visibility_timeout", VISIBILITY)
    kw.setdefault("max_attempts", 3)
    kw.setdefault("backoff", Backoff(base=1.0, maximum=60.0))
    kw.setdefault("poll_interval", 0.01)
    return Worker(sut.store, handler, clock=sut.clock, **kw)


def claim(
    sut: StoreUnderTest,
    claimed_by: str,
    *,
    limit: int = 10,
    consumer_name: str | None = "default",
    visibility_timeout: float = VISIBILITY,
    max_attempts: int = 3,
    ordered: bool = False,
) -> list[StoredMessage]:
    """A claim through the protocol, at the clock's time."""
    return sut.store.lease(
        consumer_name=consumer_name,
        claimed_by=claimed_by,
        limit=limit,
        visibility_timeout=visibility_timeout,
        max_attempts=max_attempts,
        ordered=ordered,
        now=sut.clock(),
    )


# -- receive ---------------------------------------------------------------------------------


def test_receive_stores_each_message_once_and_refuses_bad_input(sut: StoreUnderTest) -> None:
    assert sut.receive("m-1", {"amount": "10.00"}, aggregate_id="acct-1")
    assert not sut.receive("m-1", {"amount": "99.00"})
    assert sut.receive("M-1", [1, 2], message_type="case differs")
    new = sut.receive_many(
        [Incoming("m-2", None), Incoming("m-1", 0), Incoming("m-3", "x"), Incoming("m-2", 1)]
    )
    assert new == {"m-2", "m-3"}
    with pytest.raises(InvalidArgument):
        sut.receive("bad", {"x": object()})
    with pytest.raises(InvalidArgument):
        sut.receive("nan", float("nan"))
    with pytest.raises(InvalidArgument):
        sut.receive("inf", {"amount": float("inf")})
    with pytest.raises(InvalidMessageId):
        sut.receive(" padded", 1)
    assert sut.message_ids() == ["m-1", "M-1", "m-2", "m-3"]
    assert sut.counts() == {PENDING: 4, PROCESSING: 0, DONE: 0, DEAD: 0}
    assert sut.row("m-1").payload == {"amount": "10.00"}
    assert sut.row("m-1").aggregate_id == "acct-1"
    assert sut.row("M-1").payload == [1, 2]
    assert sut.row("M-1").message_type == "case differs"
    assert sut.row("m-2").payload is None


def test_a_refused_batch_stores_nothing(sut: StoreUnderTest) -> None:
    """A batch with one invalid message is refused whole: the valid ones are not stored."""
    with pytest.raises(InvalidMessageId):
        sut.receive_many([Incoming("m-3", 1), Incoming("", 2)])
    assert sut.message_ids() == []
    assert sut.receive("m-3", 1), "the refused batch did not count"


# -- claim, process ----------------------------------------------------------------------------


def test_claim_takes_rows_in_received_order_and_counts_the_attempt(sut: StoreUnderTest) -> None:
    """Claim order is ``(received_at, id)``; each claim counts an attempt and holds the row."""
    sut.clock.advance(10)
    sut.receive("late-row-early-time", {"seq": 1})
    sut.clock.set(START)
    for i in range(4):
        sut.receive(f"m{i}", {"seq": i})
    sut.clock.advance(10)
    sut.receive("last", {"seq": 9})
    sut.clock.advance(1)
    first = claim(sut, "w#1", limit=3)
    assert [m.message_id for m in first] == ["m0", "m1", "m2"]
    assert {(m.attempts, m.claimed_by) for m in first} == {(1, "w#1")}
    second = claim(sut, "w#2", limit=10)
    assert [m.message_id for m in second] == ["m3", "late-row-early-time", "last"]
    assert claim(sut, "w#3") == [], "every row is in a worker's hands"
    row = sut.row("m0")
    assert (row.status, row.attempts, row.claimed_by) == (PROCESSING, 1, "w#1")
    assert row.claimed_at == sut.clock()
    assert sut.counts() == {PENDING: 0, PROCESSING: 6, DONE: 0, DEAD: 0}


def test_every_message_processed_once(sut: StoreUnderTest) -> None:
    seen: list[tuple[bool, str]] = []

    def handler(context: Any, message: StoredMessage) -> None:
        seen.append((sut.is_handler_context(context), message.message_id))
        sut.apply(context, message)

    for i in range(25):
        sut.receive(f"m{i}", {"seq": i})
    w = worker(sut, handler, batch_size=4)
    w.run(until_empty=True, handle_signals=False)
    assert [mid for _, mid in seen] == [f"m{i}" for i in range(25)], "in claim order"
    assert {is_context for is_context, _ in seen} == {True}
    assert sut.effect_ids() == [f"m{i}" for i in range(25)], "processed exactly once"
    assert sut.counts() == {PENDING: 0, PROCESSING: 0, DONE: 25, DEAD: 0}
    assert {sut.row(f"m{i}").attempts for i in range(25)} == {1}
    assert sut.row("m0").processed_at == sut.clock()
    assert w.stats["done"] == 25


def test_release_gives_back_the_claim_and_uncounts_the_attempt(sut: StoreUnderTest) -> None:
    for i in range(3):
        sut.receive(f"m{i}", {"seq": i})
    batch = claim(sut, "w#1")
    assert [m.attempts for m in batch] == [1, 1, 1]
    assert sut.store.release(batch[:2]) == 2
    assert sut.store.release(batch[:2]) == 0, "no longer held: nothing to release"
    for mid in ("m0", "m1"):
        row = sut.row(mid)
        assert (row.status, row.attempts, row.claimed_by) == (PENDING, 0, None)
    assert sut.row("m2").status == PROCESSING
    again = claim(sut, "w#2")
    assert [(m.message_id, m.attempts) for m in again] == [("m0", 1), ("m1", 1)]
    assert sut.store.release([batch[2]]) == 1
    assert sut.effect_ids() == []


def test_stop_releases_the_unstarted_rest_of_the_batch(sut: StoreUnderTest) -> None:
    for i in range(5):
        sut.receive(f"m{i}", {"seq": i})

    def handler(context: Any, message: StoredMessage) -> None:
        sut.apply(context, message)
        w.stop()

    w = worker(sut, handler, batch_size=5)
    w.run(handle_signals=False)
    assert sut.counts() == {PENDING: 4, PROCESSING: 0, DONE: 1, DEAD: 0}
    assert [sut.row(f"m{i}").attempts for i in range(1, 5)] == [0, 0, 0, 0]
    assert w.stats["released"] == 4
    assert sut.effect_ids() == ["m0"]


@pytest.mark.parametrize(
    "bad",
    [
        {"limit": 0},
        {"limit": True},
        {"max_attempts": 0},
        {"visibility_timeout": 0},
        {"visibility_timeout": -1.5},
        {"claimed_by": ""},
        {"claimed_by": " padded"},
        {"consumer_name": ""},
    ],
    ids=lambda bad: "-".join(f"{k}={v!r}" for k, v in bad.items()),
)
def test_bad_claim_arguments_are_refused_before_anything_is_claimed(
    sut: StoreUnderTest, bad: dict[str, Any]
) -> None:
    sut.receive("m1", {"seq": 1})
    arguments: dict[str, Any] = {
        "consumer_name": "default", "claimed_by": "w#1", "limit": 5,
        "visibility_timeout": VISIBILITY, "max_attempts": 3, "ordered": False,
    }  # fmt: skip
    with pytest.raises((InvalidArgument, InvalidMessageId)):
        sut.store.lease(**{**arguments, **bad}, now=sut.clock())
    row = sut.row("m1")
    assert (row.status, row.attempts, row.claimed_by) == (PENDING, 0, None)


# -- failures -----------------------------------------------------------------------------------


def test_failure_backs_off_then_succeeds(sut: StoreUnderTest) -> None:
    calls: list[int] = []

    def flaky(context: Any, message: StoredMessage) -> None:
        calls.append(message.attempts)
        if message.attempts == 1:
            raise RuntimeError("database of the partner is down")
        sut.apply(context, message)

    sut.receive("m1", {"seq": 1})
    w = worker(sut, flaky)
    assert w.run_once() == 1
    row = sut.row("m1")
    assert (row.status, row.attempts) == (PENDING, 1)
    assert row.available_at == START + datetime.timedelta(seconds=1)
    assert row.last_error == "RuntimeError: database of the partner is down"
    assert w.run_once() == 0, "not claimable before the back-off"
    sut.clock.advance(1)
    assert w.run_once() == 1
    row = sut.row("m1")
    assert (row.status, row.attempts, calls) == (DONE, 2, [1, 2])
    assert sut.effect_ids() == ["m1"]


def test_poison_message_goes_dead_others_flow(sut: StoreUnderTest) -> None:
    def handler(context: Any, message: StoredMessage) -> None:
        if message.payload.get("poison"):
            raise ValueError("cannot parse")
        sut.apply(context, message)

    sut.receive("bad", {"poison": True})
    for i in range(5):
        sut.receive(f"ok{i}", {"seq": i})
    w = worker(sut, handler, max_attempts=3)
    for _ in range(10):
        w.run_once()
        sut.clock.advance(60)
    bad = sut.row("bad")
    assert (bad.status, bad.attempts, bad.last_error) == (DEAD, 3, "ValueError: cannot parse")
    assert bad.processed_at is None
    assert sorted(sut.effect_ids()) == [f"ok{i}" for i in range(5)], "poison left no effect"
    assert sut.counts() == {PENDING: 0, PROCESSING: 0, DONE: 5, DEAD: 1}
    assert w.stats["dead"] == 1 and w.stats["retry"] == 2


# -- abandoned claims: visibility timeout, claim token, reap --------------------------------


def test_abandoned_claim_comes_back_after_visibility_timeout(sut: StoreUnderTest) -> None:
    ran: list[str] = []

    def handler(context: Any, message: StoredMessage) -> None:
        ran.append(message.claimed_by)
        sut.apply(context, message)

    sut.receive("m1", {"seq": 1})
    crashed = claim(sut, "dead-worker#1", limit=5)
    assert [m.attempts for m in crashed] == [1]
    w = worker(sut, handler)
    sut.clock.advance(9.9)
    assert w.run_once() == 0, "still within the visibility timeout"
    sut.clock.advance(0.2)
    assert w.run_once() == 1
    assert sut.row("m1").attempts == 2 and len(ran) == 1
    assert ran[0] != "dead-worker#1", "a claim token of its own"
    # the first worker wakes up: its claim is gone, its handler must not run
    late: Handler = lambda context, message: ran.append("twice")  # noqa: E731
    assert not sut.store.complete(crashed[0], late, now=sut.clock())
    assert not sut.store.fail(crashed[0], "late", retry_at=None, now=sut.clock())
    assert len(ran) == 1 and sut.row("m1").status == DONE
    assert sut.effect_ids() == ["m1"]


def test_a_worker_looks_for_abandoned_claims_at_most_once_per_poll_interval(
    sut: StoreUnderTest,
) -> None:
    """The first claim looks for abandoned claims; the claims within ``poll_interval`` of
    that search take pending rows only; the first claim after it looks again."""
    claimed: list[tuple[str, int]] = []

    def handler(context: Any, message: StoredMessage) -> None:
        claimed.append((message.message_id, message.attempts))
        sut.apply(context, message)

    for n in range(1, 5):
        sut.receive(f"m{n}", {"seq": n})
    assert [m.message_id for m in claim(sut, "dead-worker#1", limit=1)] == ["m1"]  # t = 0
    sut.clock.advance(3)
    assert [m.message_id for m in claim(sut, "dead-worker#2", limit=1)] == ["m2"]  # t = 3
    w = worker(sut, handler, poll_interval=5, batch_size=1)
    sut.clock.advance(7.1)  # t = 10.1: m1 abandoned
    assert w.run_once() == 1
    sut.clock.advance(3.1)  # t = 13.2: m2 abandoned too, 3.1 s after the last search
    assert w.run_once() == 1
    sut.clock.advance(1.9)  # t = 15.1: 5 s after the last search
    assert w.run_once() == 1
    assert claimed == [("m1", 2), ("m3", 1), ("m2", 2)]
    assert sorted(sut.effect_ids()) == ["m1", "m2", "m3"]
    assert sut.counts() == {PENDING: 1, PROCESSING: 0, DONE: 3, DEAD: 0}


def test_reap_releases_or_dead_letters_abandoned_claims(sut: StoreUnderTest) -> None:
    sut.receive_many([Incoming("a", {"seq": 1}), Incoming("b", {"seq": 2})])

    def claimed(token: str) -> list[int]:
        return [m.attempts for m in claim(sut, token, limit=5, visibility_timeout=0.2)]

    def reap() -> ReapResult:
        return sut.store.reap(
            consumer_name="default", visibility_timeout=0.2, max_attempts=3, now=sut.clock()
        )

    assert claimed("crashed#1") == [1, 1]
    assert reap() == ReapResult(0, 0), "not abandoned yet"
    sut.clock.advance(0.3)
    assert reap() == ReapResult(2, 0)
    assert sut.counts()[PENDING] == 2
    assert sut.row("a").claimed_by is None
    assert claimed("crashed#2") == [2, 2]
    sut.clock.advance(0.3)
    assert claimed("crashed#3") == [3, 3], "the claim itself takes abandoned rows"
    sut.clock.advance(0.3)
    assert claimed("next") == [], "attempts used up: never claimed a fourth time"
    assert reap() == ReapResult(0, 2)
    row = sut.row("a")
    assert row.status == DEAD and "abandoned" in (row.last_error or "")
    assert (row.last_error or "").startswith("lease abandoned")
    assert sut.counts() == {PENDING: 0, PROCESSING: 0, DONE: 0, DEAD: 2}


def test_reaper_dead_letters_a_message_that_kills_its_worker(sut: StoreUnderTest) -> None:
    sut.receive("killer", {"seq": 1})
    for attempt in range(1, 4):
        batch = claim(sut, f"w#{attempt}", limit=1)
        assert [m.attempts for m in batch] == [attempt]
        sut.clock.advance(11)  # the worker died with the row in hand
    w = worker(sut, sut.apply)
    assert w.run_once() == 0, "attempts used up: not claimed a fourth time"
    w.reap()
    row = sut.row("killer")
    assert row.status == DEAD and "abandoned" in (row.last_error or "")
    assert sut.effect_ids() == []


# -- replay ---------------------------------------------------------------------------------


def test_replay_dead_after_a_fix(sut: StoreUnderTest) -> None:
    fixed = False

    def handler(context: Any, message: StoredMessage) -> None:
        if not fixed:
            raise RuntimeError("bug")
        sut.apply(context, message)

    sut.receive("m1", {"seq": 1})
    w = worker(sut, handler, max_attempts=1)
    w.run_once()
    assert sut.row("m1").status == DEAD
    fixed = True
    with pytest.raises(InvalidArgument):
        sut.replay()
    with pytest.raises(InvalidArgument, match="dead or done"):
        sut.replay(status=PENDING)
    with pytest.raises(InvalidArgument, match="dead or done"):
        sut.replay(status=PROCESSING)
    assert sut.replay(status=DEAD) == 1
    row = sut.row("m1")
    assert (row.status, row.attempts, row.claimed_by) == (PENDING, 0, None)
    assert row.last_error == "RuntimeError: bug", "kept"
    w.run_once()
    assert (sut.row("m1").status, sut.row("m1").attempts) == (DONE, 1)
    assert sut.effect_ids() == ["m1"]
    assert sut.replay(status=DEAD) == 0


def test_replay_by_id_never_touches_rows_in_hand_or_pending(sut: StoreUnderTest) -> None:
    for i in range(3):
        sut.receive(f"h{i}", {"seq": i})
    worker(sut, sut.apply).run(until_empty=True, handle_signals=False)
    assert claim(sut, "w#1") == [], "all done"
    assert sut.replay(ids=[sut.row("h0").id]) == 1
    [in_hand] = claim(sut, "w#2")
    assert in_hand.message_id == "h0"
    assert sut.replay(ids=[sut.row("h0").id]) == 0, "in a worker's hands"
    assert sut.replay(ids=[sut.row("h1").id]) == 1
    h1 = sut.row("h1")
    sut.clock.advance(5)
    assert sut.replay(ids=[h1.id]) == 0, "a pending row is not replayed"
    assert sut.row("h1").available_at == h1.available_at, "left untouched"
    assert sut.row("h0").status == PROCESSING
    assert sut.replay(status=DONE) == 1, "h2 only"
    assert sut.counts() == {PENDING: 2, PROCESSING: 1, DONE: 0, DEAD: 0}
    assert sut.effect_ids() == ["h0", "h1", "h2"]


# -- ordering, consumers, unfinished rows ------------------------------------------------------


def test_per_aggregate_order_with_a_retry_in_front(sut: StoreUnderTest) -> None:
    order: list[str] = []

    def handler(context: Any, message: StoredMessage) -> None:
        if message.message_id == "a1" and message.attempts == 1:
            raise RuntimeError("first try fails")
        order.append(message.message_id)
        sut.apply(context, message)

    for mid, aggregate in [("a1", "A"), ("b1", "B"), ("a2", "A"), ("b2", "B"), ("a3", "A")]:
        sut.receive(mid, {"seq": int(mid[1])}, aggregate_id=aggregate)
    w = worker(sut, handler, batch_size=10, ordered=True)
    assert w.run_once() == 2, "one head per aggregate: a1 and b1"
    assert w.run_once() == 1, "b2; a2 waits behind a1's back-off"
    assert w.run_once() == 0
    sut.clock.advance(1)
    while w.run_once():
        pass
    assert order == ["b1", "b2", "a1", "a2", "a3"]
    assert sut.effect_ids() == order


def test_dead_and_unkeyed_messages_do_not_block_an_aggregate(sut: StoreUnderTest) -> None:
    """With ``ordered``, a ``dead`` head no longer holds its aggregate back, and messages
    without an ``aggregate_id`` are never held back."""

    def handler(context: Any, message: StoredMessage) -> None:
        if message.message_id == "a1":
            raise ValueError("poison")
        sut.apply(context, message)

    sut.receive("a1", {"seq": 1}, aggregate_id="A")
    sut.receive("a2", {"seq": 2}, aggregate_id="A")
    sut.receive("n1", {"seq": 1})
    sut.receive("n2", {"seq": 2})
    w = worker(sut, handler, batch_size=10, ordered=True, max_attempts=1)
    assert w.run_once() == 3, "a1, and both unkeyed messages; a2 waits behind a1"
    assert sut.row("a1").status == DEAD
    assert w.run_once() == 1, "a2: the dead a1 does not block it"
    assert w.run_once() == 0
    assert sut.effect_ids() == ["n1", "n2", "a2"]
    assert sut.counts() == {PENDING: 0, PROCESSING: 0, DONE: 3, DEAD: 1}


def test_claim_for_every_consumer_and_what_is_still_unfinished(sut: StoreUnderTest) -> None:
    """``consumer_name=None`` claims every consumer's rows, ordered per (consumer,
    aggregate); ``has_unfinished`` sees pending and processing rows, not done ones."""
    store = sut.store
    sut.receive("b1", {"seq": 1}, consumer_name="billing", aggregate_id="A")
    sut.receive("b2", {"seq": 2}, consumer_name="billing", aggregate_id="A")
    sut.receive("s1", {"seq": 3}, consumer_name="shipping", aggregate_id="A")
    assert store.has_unfinished(consumer_name=None)
    assert store.has_unfinished(consumer_name="billing")
    assert not store.has_unfinished(consumer_name="default")
    assert claim(sut, "default#1", ordered=True) == [], "default: none of them"
    first = claim(sut, "all#1", consumer_name=None, ordered=True, visibility_timeout=60)
    assert [(m.consumer_name, m.message_id) for m in first] == [
        ("billing", "b1"),
        ("shipping", "s1"),
    ], "one head per (consumer, aggregate): b2 waits behind b1"
    assert store.has_unfinished(consumer_name="shipping"), "processing is unfinished"
    for message in first:
        assert store.complete(message, sut.apply, now=sut.clock())
    assert not store.has_unfinished(consumer_name="shipping")
    assert store.has_unfinished(consumer_name="billing"), "b2 is pending"
    [second] = claim(sut, "all#2", consumer_name=None, ordered=True, visibility_timeout=60)
    assert second.message_id == "b2"
    assert store.complete(second, sut.apply, now=sut.clock())
    assert not store.has_unfinished(consumer_name=None)
    assert sorted(sut.effect_ids()) == ["b1", "b2", "s1"]
    assert sut.counts() == {PENDING: 0, PROCESSING: 0, DONE: 3, DEAD: 0}


def test_a_worker_for_every_consumer(sut: StoreUnderTest) -> None:
    seen: list[tuple[str, str]] = []

    def handler(context: Any, message: StoredMessage) -> None:
        seen.append((message.consumer_name, message.message_id))
        sut.apply(context, message)

    for consumer in ("billing", "shipping", "default"):
        for seq in range(3):
            sut.receive(f"{consumer}-{seq}", {"seq": seq}, consumer_name=consumer, aggregate_id="A")
    w = worker(sut, handler, consumer_name=None, ordered=True)
    assert w.run(until_empty=True, handle_signals=False).processed == 9
    assert sorted(seen) == [
        (consumer, f"{consumer}-{seq}")
        for consumer in ("billing", "default", "shipping")
        for seq in range(3)
    ]
    applied = sut.effect_ids()
    for consumer in ("billing", "shipping", "default"):
        assert [m for m in applied if m.startswith(consumer)] == [
            f"{consumer}-{i}" for i in range(3)
        ]
    assert sut.counts() == {PENDING: 0, PROCESSING: 0, DONE: 9, DEAD: 0}


class SignallingStore:
    """``store``, setting ``waiting`` once a worker asks and is told rows are unfinished."""

    def __init__(self, store: MessageStore) -> None:
        self.inner = store
        self.waiting = threading.Event()

    def lease(self, **kw: Any) -> list[StoredMessage]:
        return self.inner.lease(**kw)

    def complete(self, message: StoredMessage, handler: Handler, *, now: datetime.datetime) -> bool:
        return self.inner.complete(message, handler, now=now)

    def fail(
        self,
        message: StoredMessage,
        error: str,
        *,
        retry_at: datetime.datetime | None,
        now: datetime.datetime,
    ) -> bool:
        return self.inner.fail(message, error, retry_at=retry_at, now=now)

    def release(self, messages: Sequence[StoredMessage]) -> int:
        return self.inner.release(messages)

    def reap(self, **kw: Any) -> ReapResult:
        return self.inner.reap(**kw)

    def has_unfinished(self, *, consumer_name: str | None) -> bool:
        unfinished = self.inner.has_unfinished(consumer_name=consumer_name)
        if unfinished:
            self.waiting.set()
        return unfinished

    def is_transient(self, exc: BaseException) -> bool:
        return self.inner.is_transient(exc)


def test_until_empty_waits_for_a_row_held_elsewhere_and_for_its_backoff(
    sut: StoreUnderTest,
) -> None:
    """A row in another worker's hands keeps ``run(until_empty=True)`` going; when that
    worker fails it (pending after a back-off), this run processes it before returning."""
    sut.receive("held", {"seq": 1})
    [held] = claim(sut, "other#1", limit=1, visibility_timeout=60)
    ran: list[int] = []

    def handler(context: Any, message: StoredMessage) -> None:
        ran.append(message.attempts)
        sut.apply(context, message)

    signalling = SignallingStore(sut.store)
    w = Worker(
        signalling, handler, clock=sut.clock, poll_interval=0.01, visibility_timeout=60,
        max_attempts=3,
    )  # fmt: skip
    summaries: list[WorkerSummary] = []
    runner = threading.Thread(
        target=lambda: summaries.append(w.run(until_empty=True, handle_signals=False))
    )
    runner.start()
    try:
        assert signalling.waiting.wait(30), "the run never asked whether rows were unfinished"
        retry_at = sut.clock() + datetime.timedelta(seconds=1)
        assert sut.store.fail(held, "the other worker failed", retry_at=retry_at, now=sut.clock())
        signalling.waiting.clear()
        assert signalling.waiting.wait(30), "the run stopped waiting during the back-off"
        assert ran == [] and sut.row("held").status == PENDING
        sut.clock.advance(1)
        runner.join(60)
    finally:
        w.stop()
        runner.join(30)
    assert summaries == [WorkerSummary(processed=1, reason=EMPTY)]
    assert ran == [2]
    row = sut.row("held")
    assert (row.status, row.attempts) == (DONE, 2)
    assert sut.effect_ids() == ["held"]


# -- the batch transaction mode (transaction="batch") ------------------------------------------


def test_batch_mode_processes_every_message_once_in_order(sut: StoreUnderTest) -> None:
    for i in range(25):
        sut.receive(f"m{i}", {"seq": i})
    w = worker(sut, sut.apply, batch_size=4, transaction="batch")
    summary = w.run(until_empty=True, handle_signals=False)
    assert sut.effect_ids() == [f"m{i}" for i in range(25)], "once each, in claim order"
    assert sut.counts() == {PENDING: 0, PROCESSING: 0, DONE: 25, DEAD: 0}
    assert {sut.row(f"m{i}").attempts for i in range(25)} == {1}
    assert sut.row("m0").processed_at == sut.clock()
    assert (summary.processed, summary.batch_reruns) == (25, 0)


@pytest.mark.parametrize("max_attempts", [3, 1], ids=["back-off", "dead"])
def test_batch_mode_a_failing_message_fails_alone(sut: StoreUnderTest, max_attempts: int) -> None:
    def handler(context: Any, message: StoredMessage) -> None:
        if message.payload.get("poison"):
            raise ValueError("cannot parse")
        sut.apply(context, message)

    for i in range(5):
        sut.receive(f"ok{i}", {"seq": i})
        if i == 2:
            sut.receive("bad", {"poison": True})
    w = worker(sut, handler, batch_size=10, transaction="batch", max_attempts=max_attempts)
    assert w.run_once() == 6
    assert sorted(sut.effect_ids()) == [f"ok{i}" for i in range(5)]
    bad = sut.row("bad")
    assert (bad.attempts, bad.last_error, bad.processed_at) == (1, "ValueError: cannot parse", None)
    if max_attempts > 1:
        assert (bad.status, bad.available_at) == (PENDING, START + datetime.timedelta(seconds=1))
    else:
        assert bad.status == DEAD
    assert {sut.row(f"ok{i}").status for i in range(5)} == {DONE}
    assert (w.summary.processed, w.summary.retried + w.summary.dead) == (5, 1)


def test_batch_mode_stop_releases_the_unstarted_rest(sut: StoreUnderTest) -> None:
    for i in range(5):
        sut.receive(f"m{i}", {"seq": i})

    def handler(context: Any, message: StoredMessage) -> None:
        sut.apply(context, message)
        w.stop()

    w = worker(sut, handler, batch_size=5, transaction="batch")
    w.run(handle_signals=False)
    assert sut.counts() == {PENDING: 4, PROCESSING: 0, DONE: 1, DEAD: 0}
    assert [sut.row(f"m{i}").attempts for i in range(1, 5)] == [0, 0, 0, 0]
    assert (w.stats["done"], w.stats["released"]) == (1, 4)
    assert sut.effect_ids() == ["m0"]
