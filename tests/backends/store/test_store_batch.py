"""The worker's batch transaction mode (``Worker(transaction="batch")``) on real servers.

Business state is read back from the database after every run: the ``effects`` rows and the
``accounts`` balances the handlers write, and the store rows by status and attempts. The
process tests (``drain_*``, ``kill_*``, ``stop_*``, ``ordered_*``) are shared with the
asyncio suite (``tests/backends/asyncio/test_async_batch.py``), which runs them with the
asyncio worker process.
"""

from __future__ import annotations

import datetime
import random
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox.exc import MissingTable
from sa_inbox.store import (
    DEAD,
    DEFAULT_CONSUMER,
    DONE,
    PENDING,
    PROCESSING,
    Incoming,
    StoredMessage,
    utc_now,
)
from sa_inbox.store import batch as batch_module
from sa_inbox.store.worker import Backoff, Worker
from tests.backends.store.test_store_backends import (
    CHILD,
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
from tests.support.store_app import StoreApp

pytestmark = pytest.mark.backend

VISIBILITY = 1.0  # seconds: the visibility timeout of the kill test
ACCOUNTS = 5


def receive(app: StoreApp, count: int) -> None:
    receive_stream(app, [Incoming(f"m-{i}", {"seq": i}) for i in range(count)])


def batch_worker(app: StoreApp, handler: Any, **options: Any) -> Worker:
    options.setdefault("backoff", Backoff(base=60, maximum=60))
    return Worker(
        app.store.bind(app.engine),
        handler,
        transaction="batch",
        poll_interval=0.05,
        **options,
    )


def rows(app: StoreApp) -> dict[str, tuple[str, int]]:
    """``message_id: (status, attempts)`` of every store row."""
    t = app.store.table
    with app.engine.connect() as conn:
        found = conn.execute(sa.select(t.c.message_id, t.c.status, t.c.attempts))
        return {m: (s, a) for m, s, a in found}


def credit_handler(app: StoreApp, failing: dict[int, str]) -> Any:
    """Effect row and a credit of account ``seq % ACCOUNTS`` per message; the messages in
    ``failing`` raise after writing (``"raise"``) or fail in the database (``"sql"``: a
    duplicate primary key, which aborts a PostgreSQL transaction until its savepoint is
    rolled back)."""

    def handler(session: Session, message: StoredMessage) -> None:
        seq = message.payload["seq"]
        app.apply(session, message)
        session.execute(app.credit(seq % ACCOUNTS))
        if failing.get(seq) == "raise":
            raise RuntimeError(f"handler of {message.message_id} fails")
        if failing.get(seq) == "sql":
            session.execute(app.accounts.insert().values(id=0, balance=0))

    return handler


# -- one transaction per batch, a failure alone ---------------------------------------------


@pytest.mark.parametrize("attempts", [5, 1], ids=["back-off", "dead"])
def test_one_failing_message_fails_alone_the_others_commit(
    store_app: StoreApp, attempts: int
) -> None:
    receive(store_app, 10)
    worker = batch_worker(
        store_app, credit_handler(store_app, {4: "raise"}), batch_size=10, max_attempts=attempts
    )
    before = utc_now()
    assert worker.run_once() == 10
    others = [f"m-{i}" for i in range(10) if i != 4]
    assert sorted(store_app.effect_ids()) == sorted(others), "m-4's effect rolled back"
    expected = Counter(i % ACCOUNTS for i in range(10) if i != 4)
    assert store_app.balances() == {a: expected[a] for a in range(ACCOUNTS)}
    failed_status = PENDING if attempts > 1 else DEAD
    assert rows(store_app) == {m: (DONE, 1) for m in others} | {"m-4": (failed_status, 1)}
    row = store_app.row("m-4")
    assert row["last_error"] == "RuntimeError: handler of m-4 fails"
    assert row["processed_at"] is None
    if attempts > 1:  # back-off from the failure: 60 s
        assert row["available_at"] >= before + datetime.timedelta(seconds=59)
    summary = worker.summary
    assert (summary.processed, summary.retried, summary.dead) == (
        9,
        int(attempts > 1),
        int(attempts == 1),
    )
    assert summary.batch_reruns == 1, "one re-run, without m-4"
    assert summary.transient_retries == 0


@pytest.mark.parametrize("savepoints_first", [False, True], ids=["re-run", "savepoints-first"])
def test_failures_mid_batch_are_isolated_by_savepoints(
    store_app: StoreApp, monkeypatch: pytest.MonkeyPatch, savepoints_first: bool
) -> None:
    """m-2 raises; m-6 fails in the database. The re-run (savepoints) isolates m-6 without
    a third run; the first run with savepoints isolates both without any re-run."""
    monkeypatch.setattr(batch_module, "SAVEPOINTS_FIRST", savepoints_first)
    receive(store_app, 10)
    failing = {2: "raise", 6: "sql"}
    worker = batch_worker(store_app, credit_handler(store_app, failing), batch_size=10)
    assert worker.run_once() == 10
    others = [f"m-{i}" for i in range(10) if i not in failing]
    assert sorted(store_app.effect_ids()) == sorted(others)
    expected = Counter(i % ACCOUNTS for i in range(10) if i not in failing)
    assert store_app.balances() == {a: expected[a] for a in range(ACCOUNTS)}
    assert rows(store_app) == {m: (DONE, 1) for m in others} | {
        "m-2": (PENDING, 1),
        "m-6": (PENDING, 1),
    }
    assert "IntegrityError" in store_app.row("m-6")["last_error"]
    summary = worker.summary
    assert (summary.processed, summary.retried) == (8, 2)
    assert summary.batch_reruns == (0 if savepoints_first else 1)


def test_a_lost_claim_in_a_batch_runs_nothing_for_it(store_app: StoreApp) -> None:
    """The claim-token guard: a row taken by another claim after this one is not run."""
    receive(store_app, 5)
    t = store_app.store.table

    def steal(token: str, batch: Any) -> None:
        with store_app.engine.begin() as conn:
            conn.execute(t.update().where(t.c.message_id == "m-2").values(claimed_by="another/0#1"))

    worker = batch_worker(store_app, credit_handler(store_app, {}), batch_size=5, on_lease=steal)
    assert worker.run_once() == 5
    assert sorted(store_app.effect_ids()) == ["m-0", "m-1", "m-3", "m-4"]
    assert rows(store_app)["m-2"] == (PROCESSING, 1), "left to its new claim"
    assert (worker.summary.processed, worker.summary.lost) == (4, 1)


def test_a_handler_that_ends_the_transaction_falls_back_to_one_per_message(
    store_app: StoreApp,
) -> None:
    """m-1 commits (refused): the batch's transaction is broken, so the batch is processed
    one transaction per message, where m-1 fails alone."""
    receive(store_app, 4)

    def handler(session: Session, message: StoredMessage) -> None:
        store_app.apply(session, message)
        if message.message_id == "m-1":
            session.commit()

    worker = batch_worker(store_app, handler, batch_size=4)
    assert worker.run_once() == 4
    assert sorted(store_app.effect_ids()) == ["m-0", "m-2", "m-3"]
    assert rows(store_app) == {
        "m-0": (DONE, 1),
        "m-1": (PENDING, 1),
        "m-2": (DONE, 1),
        "m-3": (DONE, 1),
    }
    assert "HandlerEndedTransaction" in store_app.row("m-1")["last_error"]


def test_a_configuration_error_in_a_batch_releases_it_and_is_raised(
    store_app: StoreApp,
) -> None:
    receive(store_app, 3)

    def handler(session: Session, message: StoredMessage) -> None:
        store_app.apply(session, message)
        session.execute(sa.text("SELECT id FROM store_test_no_such_table"))

    worker = batch_worker(store_app, handler, batch_size=3)
    with pytest.raises(MissingTable):
        worker.run(handle_signals=False, max_seconds=30)
    assert store_app.effect_ids() == []
    assert rows(store_app) == {f"m-{i}": (PENDING, 0) for i in range(3)}, "attempt uncounted"


def test_a_deadlock_between_two_batches_is_re_run_not_surfaced(
    url: str, store_app: StoreApp
) -> None:
    """Two batches lock accounts 0 and 1 in opposite orders (a barrier makes them hold
    their first lock together): the database aborts one (PostgreSQL after
    ``deadlock_timeout``, InnoDB at once), its whole batch re-runs and commits."""
    if url.startswith("sqlite"):
        pytest.skip("SQLite locks the whole database: no row-lock deadlock")
    receive(store_app, 4)  # batches [m-0, m-1] and [m-2, m-3], whichever worker claims them
    order = {0: 0, 1: 1, 2: 1, 3: 0}  # m-0 then m-1 lock 0 then 1; m-2 then m-3: 1 then 0
    barrier = threading.Barrier(2, timeout=20)
    waited: set[int] = set()

    def handler(session: Session, message: StoredMessage) -> None:
        seq = message.payload["seq"]
        if seq in (1, 3) and seq not in waited:  # the second lock, on the first run only
            waited.add(seq)
            barrier.wait()
        store_app.apply(session, message)
        session.execute(store_app.credit(order[seq]))

    workers = [batch_worker(store_app, handler, batch_size=2) for _ in range(2)]
    claimed: list[int] = []
    threads = [threading.Thread(target=lambda w=w: claimed.append(w.run_once())) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert claimed == [2, 2]
    assert sorted(store_app.effect_ids()) == ["m-0", "m-1", "m-2", "m-3"]
    assert store_app.balances() == {0: 2, 1: 2, 2: 0, 3: 0, 4: 0}
    assert rows(store_app) == {f"m-{i}": (DONE, 1) for i in range(4)}
    summaries = [w.summary for w in workers]
    assert sum(s.batch_reruns for s in summaries) == 1, "the deadlock victim's batch re-ran"
    assert sum(s.retried + s.dead + s.errors + s.transient_retries for s in summaries) == 0


# -- worker processes (shared with the asyncio suite) ---------------------------------------


def drain_with_duplicates(url: str, app: StoreApp, tmp_path: Path, child: str) -> None:
    """Two processes drain a stream with redeliveries in batch mode, crediting accounts in
    crossing orders: every message once, every balance right, no failure surfaced."""
    count, duplicates = 300, 50
    assert receive_stream(app, stream_with_duplicates(count, duplicates, seed=13)) == count
    log = tmp_path / "batches.jsonl"
    started = [
        start(url, "drain", log, child, batch=25, transaction="batch", accounts=ACCOUNTS)
        for _ in range(2)
    ]
    with reaped(started) as children:
        release_together(children)
        stats = [finish(c) for c in children]
    effects = app.effect_ids()
    assert len(effects) == len(set(effects)) == count, "every message applied exactly once"
    expected = Counter(seq * 7 % ACCOUNTS for seq in range(count))
    assert app.balances() == {a: expected[a] for a in range(ACCOUNTS)}
    assert app.store.counts(app.engine) == {PENDING: 0, PROCESSING: 0, DONE: count, DEAD: 0}
    assert sum(s.get(DONE, 0) for s in stats) == count
    assert all(s.get(key, 0) == 0 for s in stats for key in ("retry", "dead", "errors")), stats
    claimed = [i for b in read_batches(log) for i in b["ids"]]
    assert sorted(claimed) == sorted(set(claimed)), "no row in two batches"


def kill_mid_batch(url: str, app: StoreApp, tmp_path: Path, child: str) -> None:
    """SIGKILL while m-3's handler runs, m-0 … m-2 handled in the same transaction: nothing
    of the batch committed, nothing lost; after the visibility timeout it is processed once."""
    receive(app, 5)
    options = {"batch": 5, "visibility": VISIBILITY, "transaction": "batch", "hang_at": 3}
    log = tmp_path / "batches.jsonl"
    with reaped([start(url, "drain", log, child, accounts=ACCOUNTS, **options)]) as [process]:
        kill_while_handling(process, "m-3")
    assert app.effect_ids() == [], "the handled messages' effects were not committed"
    assert set(app.balances().values()) == {0}
    assert rows(app) == {f"m-{i}": (PROCESSING, 1) for i in range(5)}, "attempt counted"

    def handler(session: Session, message: StoredMessage) -> None:
        app.apply(session, message)
        session.execute(app.credit(message.payload["seq"] * 7 % ACCOUNTS))

    hand_over(app.store, app.engine, handler, DEFAULT_CONSUMER)
    worker = batch_worker(app, handler, batch_size=5, visibility_timeout=VISIBILITY)
    summary = worker.run(until_empty=True, handle_signals=False, max_seconds=30)
    assert summary.processed == 5
    assert sorted(app.effect_ids()) == [f"m-{i}" for i in range(5)], "each once"
    assert sum(app.balances().values()) == 5
    assert rows(app) == {f"m-{i}": (DONE, 2) for i in range(5)}


def stop_mid_batch(url: str, app: StoreApp, tmp_path: Path, child: str) -> None:
    """SIGTERM while m-0's handler runs: m-0 commits, the rest is released in the batch's
    own transaction (pending, attempt uncounted)."""
    receive(app, 4)
    log = tmp_path / "batches.jsonl"
    with reaped([start(url, "slow", log, child, batch=4, transaction="batch")]) as [process]:
        release_together([process])
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "HANDLING m-0"
        process.send_signal(signal.SIGTERM)
        assert finish(process, timeout=30) == {"done": 1, "released": 3}
    assert app.effect_ids() == ["m-0"]
    assert rows(app) == {"m-0": (DONE, 1)} | {f"m-{i}": (PENDING, 0) for i in (1, 2, 3)}


def ordered_in_batches(url: str, app: StoreApp, tmp_path: Path, child: str) -> None:
    """Per-aggregate order in batch mode, with every 5th message failing its first attempt
    and the stream arriving while two worker processes run."""
    aggregates, per_aggregate = 8, 6
    rng = random.Random(11)
    stream = ordered_stream(aggregates, per_aggregate, rng)
    log = tmp_path / "batches.jsonl"
    options = {"batch": 10, "ordered": 1, "fail_first": 5, "transaction": "batch"}
    total = aggregates * per_aggregate
    with reaped([start(url, "serve", log, child, **options) for _ in range(2)]) as children:
        release_together(children)
        receive_while_running(app, stream, rng)
        wait_until(lambda: app.store.counts(app.engine)[DONE] == total, 60, "all processed")
        for process in children:
            process.send_signal(signal.SIGTERM)
        for process in children:
            finish(process)
    applied = app.effects_by_aggregate()
    assert applied == {f"a{a:02d}": list(range(per_aggregate)) for a in range(aggregates)}


def test_worker_processes_drain_with_duplicates_exactly_once(
    url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    drain_with_duplicates(url, store_app, tmp_path, CHILD)


def test_sigkill_mid_batch_commits_nothing_and_loses_nothing(
    url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    kill_mid_batch(url, store_app, tmp_path, CHILD)


def test_sigterm_mid_batch_commits_the_done_and_releases_the_rest(
    url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    stop_mid_batch(url, store_app, tmp_path, CHILD)


def test_ordered_mode_is_kept_in_batch_mode(url: str, store_app: StoreApp, tmp_path: Path) -> None:
    ordered_in_batches(url, store_app, tmp_path, CHILD)


def test_batch_needs_a_known_mode_and_a_store_that_can(store_app: StoreApp) -> None:
    from sa_inbox.exc import InvalidArgument

    with pytest.raises(InvalidArgument, match="transaction must be one of"):
        Worker(store_app.store.bind(store_app.engine), store_app.apply, transaction="bulk")

    class NoBatch:
        """The bound store without ``complete_batch`` (a MessageStore of the user's)."""

        def __init__(self, store: object) -> None:
            self.store = store

        def __getattr__(self, name: str) -> object:
            if name == "complete_batch":
                raise AttributeError(name)
            return getattr(self.store, name)

    bound = store_app.store.bind(store_app.engine)
    with pytest.raises(InvalidArgument, match="complete_batch"):
        Worker(NoBatch(bound), store_app.apply, transaction="batch")  # type: ignore[arg-type]
