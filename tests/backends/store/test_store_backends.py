"""The inbox store on real servers (SQLite, PostgreSQL, MariaDB; Oracle when configured).

Workers are separate processes (``tests/backends/store/child.py``) started together at a barrier;
every claimed batch is logged by the worker before it processes it, and the handler writes
one ``effects`` row per message in the transaction that marks the message done.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox.exc import InvalidArgument, InvalidMessageId, MissingTable
from sa_inbox.store import (
    DEAD,
    DEFAULT_CONSUMER,
    DONE,
    PENDING,
    PROCESSING,
    InboxStore,
    Incoming,
    StoredMessage,
    utc_now,
)
from sa_inbox.store.worker import ERROR, Backoff, Worker, WorkerSummary
from tests.support.app import hand_over
from tests.support.store_app import StoreApp, make_engine

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[3]
VISIBILITY = 2.0  # seconds: the visibility timeout of the crash tests


#: The worker process: ``child`` (sync); the asyncio tests pass their own.
CHILD = "tests.backends.store.child"


def start(
    url: str, mode: str, log_path: Path, child: str = CHILD, **options: object
) -> subprocess.Popen[str]:
    args = [f"{key}={value}" for key, value in options.items()]
    return subprocess.Popen(
        [sys.executable, "-m", child, url, mode, str(log_path), *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def release_together(children: list[subprocess.Popen[str]]) -> None:
    """The barrier: wait until every child is connected, then let them all go at once."""
    for child in children:
        assert child.stdout is not None and child.stdin is not None
        line = child.stdout.readline().strip()
        assert line == "READY", (
            f"child said {line!r}: {child.stderr.read() if child.stderr else ''}"
        )
    for child in children:
        assert child.stdin is not None
        child.stdin.write("GO\n")
        child.stdin.flush()


def kill_while_handling(child: subprocess.Popen[str], message_id: str) -> None:
    """Release ``child`` alone, wait until it says it is handling ``message_id``, SIGKILL
    it there and reap it."""
    release_together([child])
    assert child.stdout is not None
    assert child.stdout.readline().strip() == f"HANDLING {message_id}"
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL


@contextmanager
def reaped(children: list[subprocess.Popen[str]]) -> Iterator[list[subprocess.Popen[str]]]:
    """``children``, killed if still running when the block ends (a failed or timed-out
    test must not leave worker processes behind)."""
    try:
        yield children
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()


def finish(child: subprocess.Popen[str], timeout: float = 120) -> dict[str, int]:
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGUSR1)  # the child's faulthandler prints every thread's stack
        time.sleep(1)
        child.kill()
        out, err = child.communicate()
        raise AssertionError(f"child {child.pid} still running after {timeout} s:\n{err}") from None
    assert child.returncode == 0, err
    stats: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return stats


def read_batches(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def stream_with_duplicates(count: int, duplicates: int, seed: int) -> list[Incoming]:
    """``count`` messages plus ``duplicates`` redeliveries of earlier ones, later in the stream."""
    rng = random.Random(seed)
    stream = [Incoming(f"msg-{i:05d}", {"seq": i}) for i in range(count)]
    for _ in range(duplicates):
        position = rng.randrange(1, len(stream))
        stream.insert(position, stream[rng.randrange(position)])
    return stream


def receive_stream(app: StoreApp, stream: list[Incoming], chunk: int = 100) -> int:
    """Receive a stream as a consumer would: one transaction per broker poll. Returns new."""
    new = 0
    for start_at in range(0, len(stream), chunk):
        with app.engine.begin() as conn:
            new += len(app.store.receive_many(conn, stream[start_at : start_at + chunk]))
    return new


# -- receive ---------------------------------------------------------------------------------


def test_receive_rolled_back_or_refused_leaves_nothing(store_app: StoreApp) -> None:
    store = store_app.store
    with pytest.raises(RuntimeError), store_app.engine.begin() as conn:
        store.receive(conn, "m-1", 1)
        raise RuntimeError("the consumer failed before its commit")
    with store_app.engine.begin() as conn:
        with pytest.raises(InvalidArgument):
            store.receive(conn, "m-2", {"amount": float("inf")})
        with pytest.raises(InvalidMessageId):
            store.receive_many(conn, [Incoming("m-3", 1), Incoming("", 2)])
    assert store.counts(store_app.engine)[PENDING] == 0
    with store_app.engine.begin() as conn:
        assert store.receive(conn, "m-1", 1), "the rolled-back receive did not count"


# -- N worker processes ------------------------------------------------------------------------


def test_worker_processes_drain_the_store_exactly_once(
    url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    count, duplicates, workers = 2000, 300, 3
    stream = stream_with_duplicates(count, duplicates, seed=4)
    assert receive_stream(store_app, stream) == count, "every redelivery skipped at receive"
    log = tmp_path / "batches.jsonl"
    children = [start(url, "drain", log, batch=25) for _ in range(workers)]
    release_together(children)
    stats = [finish(child) for child in children]

    batches = read_batches(log)
    claimed = [i for batch in batches for i in batch["ids"]]
    assert len(claimed) == len(set(claimed)) == count, "no row was in two batches"
    assert len({b["pid"] for b in batches}) == workers, "every process took part"
    assert sum(s.get("done", 0) for s in stats) == count
    effects = store_app.effect_ids()
    assert len(effects) == len(set(effects)) == count, "every message processed exactly once"
    assert store_app.store.counts(store_app.engine) == {
        PENDING: 0,
        PROCESSING: 0,
        DONE: count,
        DEAD: 0,
    }


def ordered_stream(aggregates: int, per_aggregate: int, rng: random.Random) -> list[Incoming]:
    """Each aggregate's messages in its own order, interleaved at random with the other
    aggregates', with late redeliveries of earlier messages mixed in."""
    queues = [
        [
            Incoming(f"a{a:02d}-{s:02d}", {"seq": s}, aggregate_id=f"a{a:02d}")
            for s in range(per_aggregate)
        ]
        for a in range(aggregates)
    ]
    stream: list[Incoming] = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        stream.append(queue.pop(0))
        if rng.random() < 0.1:
            stream.append(rng.choice(stream))
    return stream


def receive_while_running(app: StoreApp, stream: list[Incoming], rng: random.Random) -> None:
    """Receive ``stream`` in polls of random size, as the workers run."""
    position = 0
    while position < len(stream):
        size = rng.randint(1, 25)
        with app.engine.begin() as conn:
            app.store.receive_many(conn, stream[position : position + size])
        position += size
        time.sleep(rng.random() * 0.02)


def test_per_aggregate_order_with_out_of_order_arrival(
    url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    aggregates, per_aggregate = 30, 12
    rng = random.Random(7)
    # The stream arrives while the workers are already running. Every 5th message fails
    # its first attempt, so the next message of its aggregate is claimable by time but
    # must wait.
    stream = ordered_stream(aggregates, per_aggregate, rng)
    log = tmp_path / "batches.jsonl"
    children = [
        start(url, "serve", log, batch=10, ordered=1, fail_first=5, visibility=30) for _ in range(3)
    ]
    release_together(children)
    receive_while_running(store_app, stream, rng)
    total = aggregates * per_aggregate
    wait_until(
        lambda: store_app.store.counts(store_app.engine)[DONE] == total, 120, "all processed"
    )
    for child in children:
        child.send_signal(signal.SIGTERM)
    for child in children:
        finish(child)

    applied = store_app.effects_by_aggregate()
    assert applied == {f"a{a:02d}": list(range(per_aggregate)) for a in range(aggregates)}
    claimed = [i for batch in read_batches(log) for i in batch["ids"]]
    retried = aggregates * len(range(0, per_aggregate, 5))  # seq 0, 5, 10 fail once
    assert len(claimed) == total + retried, "claimed once, and once more after a failure"
    for batch in read_batches(log):
        assert len(batch["ids"]) == len(set(batch["ids"]))


# -- crashes and failures -------------------------------------------------------------------


def test_sigkilled_worker_rows_come_back_after_the_visibility_timeout(
    url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    receive_stream(store_app, [Incoming(f"m-{i}", {"seq": i}) for i in range(5)])
    log = tmp_path / "batches.jsonl"
    with reaped([start(url, "hang", log, batch=5, visibility=VISIBILITY)]) as [child]:
        kill_while_handling(child, "m-0")
    [batch] = read_batches(log)
    assert len(batch["ids"]) == 5
    assert store_app.store.counts(store_app.engine)[PROCESSING] == 5, "held by the dead worker"
    claimed_at = store_app.row("m-0")["claimed_at"]
    timeout = datetime.timedelta(seconds=VISIBILITY)
    for now, claimable in ((claimed_at + timeout * 0.95, 0), (claimed_at + timeout * 1.05, 5)):
        with store_app.engine.begin() as conn:  # look, without keeping the claim
            candidates = store_app.store.candidates(
                visibility_timeout=VISIBILITY, max_attempts=5, now=now
            )[0]
            found = conn.execute(candidates(store_app.store.table)).scalars().all()
        assert len(found) == claimable, f"at {now - claimed_at} after the claim"

    seen: list[StoredMessage] = []

    def handler(session: Any, message: StoredMessage) -> None:
        seen.append(message)
        store_app.apply(session, message)

    hand_over(store_app.store, store_app.engine, handler, DEFAULT_CONSUMER)
    worker = Worker(
        store_app.store.bind(store_app.engine),
        handler,
        visibility_timeout=VISIBILITY,
        poll_interval=0.05,
    )
    wait = claimed_at + timeout - utc_now()
    if wait.total_seconds() > 0.2:
        assert worker.run_once() == 0, "not claimable within the visibility timeout"
    time.sleep(max(0.0, wait.total_seconds() + 0.1))
    worker.run(until_empty=True, handle_signals=False)
    assert sorted(m.message_id for m in seen) == [f"m-{i}" for i in range(5)]
    assert {m.attempts for m in seen} == {2}, "the killed attempt was counted"
    assert sorted(store_app.effect_ids()) == [f"m-{i}" for i in range(5)], "processed once"
    assert store_app.store.counts(store_app.engine)[DONE] == 5


def test_sigterm_finishes_the_message_in_hand_and_releases_the_rest(
    url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    receive_stream(store_app, [Incoming(f"m-{i}", {"seq": i}) for i in range(4)])
    child = start(url, "slow", tmp_path / "batches.jsonl", batch=4)
    release_together([child])
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "HANDLING m-0"
    child.send_signal(signal.SIGTERM)
    stats = finish(child, timeout=30)
    assert stats == {"done": 1, "released": 3}
    assert store_app.effect_ids() == ["m-0"]
    t = store_app.store.table
    with store_app.engine.connect() as conn:
        rows = conn.execute(sa.select(t.c.message_id, t.c.status, t.c.attempts).order_by(t.c.id))
        assert [tuple(r) for r in rows] == [
            ("m-0", DONE, 1),
            ("m-1", PENDING, 0),
            ("m-2", PENDING, 0),
            ("m-3", PENDING, 0),
        ]


def test_poison_message_goes_dead_others_flow_then_replay_after_fix(store_app: StoreApp) -> None:
    messages = [Incoming(f"m-{i:02d}", {"seq": i}) for i in range(40)]
    messages.insert(3, Incoming("poison", {"seq": -1, "poison": True}))
    receive_stream(store_app, messages)
    fixed = False

    def handler(session: Any, message: StoredMessage) -> None:
        store_app.apply(session, message)  # rolled back when the handler raises
        if message.payload.get("poison") and not fixed:
            raise ValueError(f"cannot handle {message.message_id}")

    worker = Worker(
        store_app.store.bind(store_app.engine),
        handler,
        batch_size=8,
        concurrency=2,
        max_attempts=3,
        backoff=Backoff(base=0.05, maximum=0.1),
        poll_interval=0.02,
    )

    def settled() -> bool:
        worker.run_once()
        counts = store_app.store.counts(store_app.engine)
        return counts[PENDING] == counts[PROCESSING] == 0

    wait_until(settled, 60, "the store to settle")
    row = store_app.row("poison")
    assert (row["status"], row["attempts"]) == (DEAD, 3)
    assert row["last_error"] == "ValueError: cannot handle poison"
    assert row["processed_at"] is None
    effects = store_app.effect_ids()
    assert sorted(effects) == sorted(f"m-{i:02d}" for i in range(40)), "poison left no effect"
    assert store_app.store.counts(store_app.engine) == {
        PENDING: 0,
        PROCESSING: 0,
        DONE: 40,
        DEAD: 1,
    }

    fixed = True
    assert store_app.store.replay(store_app.engine, status=DEAD) == 1
    worker.run(until_empty=True, handle_signals=False)
    row = store_app.row("poison")
    assert (row["status"], row["attempts"]) == (DONE, 1)
    assert store_app.effect_ids().count("poison") == 1
    assert store_app.store.replay(store_app.engine, status=DEAD) == 0


def test_slow_handler_past_the_visibility_timeout_is_not_taken(store_app: StoreApp) -> None:
    receive_stream(store_app, [Incoming("slow", {"seq": 0})])
    bound = store_app.store.bind(store_app.engine)
    started, release = threading.Event(), threading.Event()

    def slow(session: Any, message: StoredMessage) -> None:
        started.set()
        assert release.wait(30)
        store_app.apply(session, message)

    first = Worker(bound, slow, visibility_timeout=0.5, poll_interval=0.05)
    second = Worker(bound, store_app.apply, visibility_timeout=0.5, poll_interval=0.05)
    holder = threading.Thread(target=first.run_once)
    holder.start()
    assert started.wait(30)
    time.sleep(0.8)  # the claim is now older than the visibility timeout
    results: list[object] = []
    # SKIP LOCKED skips the row in hand (SQLite: the claim waits for the writer to commit)
    other = threading.Thread(target=lambda: results.extend([second.run_once(), second.reap()]))
    other.start()
    time.sleep(0.5)
    release.set()
    holder.join(30)
    other.join(60)
    assert results[0] == 0, "the row being processed was claimed again"
    assert store_app.effect_ids() == ["slow"]
    row = store_app.row("slow")
    assert (row["status"], row["attempts"]) == (DONE, 1)
    assert first.stats["done"] == 1 and second.stats["done"] == 0


def test_renew_starts_again_only_the_leases_of_the_tokens_given(store_app: StoreApp) -> None:
    """What the worker does when an outage ends: the rows still processing under its tokens
    get ``claimed_at = now``; another token's rows and finished rows keep theirs."""
    receive_stream(store_app, [Incoming(f"m-{n}", {"seq": n}) for n in range(4)])
    store, engine = store_app.store, store_app.engine
    leased_at = utc_now()
    mine = store.lease(
        engine, claimed_by="mine", limit=2, visibility_timeout=60, max_attempts=5, now=leased_at
    )
    theirs = store.lease(
        engine, claimed_by="theirs", limit=2, visibility_timeout=60, max_attempts=5, now=leased_at
    )
    assert store.complete(engine, mine[0], store_app.apply, now=leased_at)
    later = leased_at + datetime.timedelta(minutes=1)
    assert store.renew(engine, ["mine", "gone"], now=later) == 1  # mine[1] alone
    claimed = {m.message_id: store_app.row(m.message_id)["claimed_at"] for m in [*mine, *theirs]}
    assert claimed[mine[1].message_id] == later
    assert all(claimed[m.message_id] == leased_at for m in theirs)
    assert store.renew(engine, [], now=later) == 0


def test_replay_by_id_and_time_range_never_touches_rows_in_hand(store_app: StoreApp) -> None:
    store, engine = store_app.store, store_app.engine
    base = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    for hour in range(4):
        with engine.begin() as conn:
            store.receive(
                conn, f"h{hour}", {"seq": hour}, now=base + datetime.timedelta(hours=hour)
            )
    worker = Worker(store.bind(engine), store_app.apply, poll_interval=0.05)
    worker.run(until_empty=True, handle_signals=False)
    claim = {"visibility_timeout": 60, "max_attempts": 5}
    assert store.lease(engine, claimed_by="w#1", limit=5, **claim) == [], "all done"
    assert store.replay(engine, ids=[store_app.row("h0")["id"]]) == 1
    [in_hand] = store.lease(
        engine, claimed_by="w#2", limit=5, visibility_timeout=60, max_attempts=5
    )
    assert in_hand.message_id == "h0"
    window = {"received_from": base, "received_before": base + datetime.timedelta(hours=2)}
    assert store.replay(engine, **window) == 1, "h1 only: h0 is in a worker's hands"
    assert store_app.row("h0")["status"] == PROCESSING
    assert store_app.row("h1")["status"] == PENDING
    assert store.replay(engine, status=DONE, consumer_name="someone-else") == 0
    with pytest.raises(InvalidArgument):
        store.replay(engine, consumer_name="default")
    with pytest.raises(InvalidArgument):
        store.replay(engine, status=PROCESSING)
    with pytest.raises(InvalidArgument, match="dead or done"):
        store.replay(engine, status=PENDING)
    h1 = store_app.row("h1")
    assert store.replayable(engine, ids=[h1["id"]]) == 0, "a pending row is not replayed"
    assert store.replay(engine, ids=[h1["id"]], now=base) == 0
    assert store_app.row("h1")["available_at"] == h1["available_at"], "left untouched"
    assert store.replayable(engine, status=DONE) == 2, "h2 and h3"
    assert store_app.store.counts(engine)[DONE] == 2, "counting changes nothing"


@pytest.mark.parametrize("misuse", ["rollback", "commit"])
def test_handler_that_ends_the_transaction_is_a_failed_attempt(
    store_app: StoreApp, misuse: str
) -> None:
    """A handler that commits (refused: nothing committed) or rolls back never leaves the
    row `done` without its effect, nor an effect without `done`: it is a failed attempt."""
    receive_stream(store_app, [Incoming("m-1", {"seq": 1})])

    def handler(session: Any, message: StoredMessage) -> None:
        store_app.apply(session, message)
        if misuse == "rollback":
            session.rollback()
        else:
            session.commit()

    worker = Worker(
        store_app.store.bind(store_app.engine),
        handler,
        batch_size=1,
        max_attempts=2,
        backoff=Backoff(base=0.05, maximum=0.1),
        poll_interval=0.02,
    )

    def settled() -> bool:
        worker.run_once()
        counts = store_app.store.counts(store_app.engine)
        return counts[PENDING] == counts[PROCESSING] == 0

    wait_until(settled, 30, "the store to settle")
    row = store_app.row("m-1")
    assert (row["status"], row["attempts"]) == (DEAD, 2)
    assert row["last_error"].startswith("HandlerEndedTransaction: the handler")
    assert store_app.effect_ids() == []


# -- the worker's run() on real servers ------------------------------------------------------


def test_a_configuration_error_in_the_handler_releases_the_batch_and_is_raised(
    store_app: StoreApp,
) -> None:
    receive_stream(store_app, [Incoming(f"m-{i}", {"seq": i}) for i in range(4)])

    def handler(session: Any, message: StoredMessage) -> None:
        store_app.apply(session, message)
        if message.message_id == "m-1":
            raise MissingTable("the handler's own table is missing")

    worker = Worker(store_app.store.bind(store_app.engine), handler, batch_size=4)
    with pytest.raises(MissingTable):
        worker.run(until_empty=True, handle_signals=False)
    assert store_app.effect_ids() == ["m-0"], "m-1 rolled back, the rest never started"
    t = store_app.store.table
    with store_app.engine.connect() as conn:
        rows = conn.execute(sa.select(t.c.status, t.c.attempts, t.c.last_error).order_by(t.c.id))
        assert [tuple(r) for r in rows] == [
            (DONE, 1, None),
            (PENDING, 0, None),
            (PENDING, 0, None),
            (PENDING, 0, None),
        ]
    assert worker.summary == WorkerSummary(processed=1, released=3, reason=ERROR)


def do_nothing(session: Any, message: Any) -> None:
    """A handler that changes nothing."""


def test_a_worker_on_a_database_without_the_table_stops_with_missing_table(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(url)
    try:
        store = InboxStore(sa.MetaData(), table_name="store_test_never_created")
        worker = Worker(store.bind(engine), do_nothing, concurrency=2)
        with caplog.at_level("INFO", logger="sa_inbox.store.worker"), pytest.raises(MissingTable):
            worker.run(until_empty=True, max_seconds=5, handle_signals=False)
        assert worker.summary.reason == ERROR and worker.summary.errors == 0
        assert len([r for r in caplog.records if r.levelname == "ERROR"]) == 1
        assert not sa.inspect(engine).has_table("store_test_never_created"), "nothing created"
    finally:
        engine.dispose()
