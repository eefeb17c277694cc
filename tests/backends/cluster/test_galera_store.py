"""The store's worker on a live 3-node MariaDB Galera cluster: workers on different nodes
drain one store.

``FOR UPDATE SKIP LOCKED`` skips rows locked *on the same node* only: workers on two nodes can
both select, and both mark ``processing``, the same rows. Their claim transactions then
conflict, and the second to commit fails certification with error 1213 (MariaDB KB, "MariaDB
Galera Cluster - Known Limitations"); the worker takes it as a transient error, claims
nothing that time (``transient_retries``) and claims again, now seeing the rows taken. So
every claim that commits is disjoint from the others, and every message is done once. The
same holds for the handler's transaction (credits of shared accounts from three nodes) and
for the reap's locking read, which a write-set from another node can abort (1213) too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox.store import DONE, Incoming, StoredMessage
from sa_inbox.store.worker import TRANSACTION_MODES, Worker, WorkerSummary
from tests.support.galera import causal_engine
from tests.support.store_app import StoreApp

pytestmark = pytest.mark.backend

ACCOUNTS = 5


class StoreCluster:
    """A :class:`StoreApp` per node on plain engines (the workers'), and one per node on
    causal engines (``wsrep_sync_wait = 1``) to read the business state back."""

    def __init__(self, urls: list[str]) -> None:
        self.apps = [StoreApp(sa.create_engine(url, pool_size=5, max_overflow=5)) for url in urls]
        self.checks = [StoreApp(causal_engine(url)) for url in urls]

    def dispose(self) -> None:
        for app in (*self.apps, *self.checks):
            app.engine.dispose()


@pytest.fixture
def stores(galera_urls: list[str]) -> Iterator[StoreCluster]:
    stores = StoreCluster(galera_urls)
    stores.apps[0].reset()  # DDL reaches every node before it returns (TOI)
    stores.apps[0].open_accounts(ACCOUNTS)
    yield stores
    stores.apps[0].drop()
    stores.dispose()


def receive(stores: StoreCluster, count: int) -> None:
    """``count`` messages received through node 1, in one transaction, then read causally on
    every node: a plain read on another node may not see them yet (the write-set is applied
    there asynchronously), and a worker there would claim nothing (harmless: it claims them
    on a later poll, but this test wants both nodes to select the same rows)."""
    app = stores.apps[0]
    with app.engine.begin() as conn:
        app.store.receive_many(conn, [Incoming(f"m-{i}", {"seq": i}) for i in range(count)])
    for check in stores.checks:
        with check.engine.connect() as conn:
            table = check.store.table
            assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() == count


def crediting(app: StoreApp) -> Any:
    """The business change: an effect row and a credit of account ``seq % ACCOUNTS``."""

    def handler(session: Session, message: StoredMessage) -> None:
        app.apply(session, message)
        session.execute(app.credit(message.payload["seq"] % ACCOUNTS))

    return handler


def worker(app: StoreApp, transaction: str, **options: Any) -> Worker:
    return Worker(
        app.store.bind(app.engine),
        crediting(app),
        transaction=transaction,
        poll_interval=0.05,
        name=f"node-{id(app)}",
        **options,
    )


def first_commit_waits(engine: sa.Engine, barrier: threading.Barrier) -> None:
    """The first COMMIT on ``engine`` waits for the other engine's first COMMIT: both
    claims have selected and updated their rows before either is certified."""
    waited: list[bool] = []

    def on_commit(conn: sa.Connection) -> None:
        if not waited:
            waited.append(True)
            barrier.wait(timeout=30)

    sa.event.listen(engine, "commit", on_commit)


def assert_done_once(stores: StoreCluster, count: int, retried: int = 0) -> None:
    """On every node: one effect per message, the balances credited once per message, every
    store row ``done``, after one attempt but for the ``retried`` failed attempts."""
    expected_balances = {a: len(range(a, count, ACCOUNTS)) for a in range(ACCOUNTS)}
    t = stores.checks[0].store.table
    for check in stores.checks:
        ids = check.effect_ids()
        assert len(ids) == count and set(ids) == {f"m-{i}" for i in range(count)}
        assert check.balances() == expected_balances
        with check.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.status, t.c.attempts)).all()
        assert {status for status, _ in rows} == {DONE} and len(rows) == count
        assert sum(attempts - 1 for _, attempts in rows) == retried


def no_failures(summary: WorkerSummary) -> bool:
    return (summary.errors, summary.dead, summary.lost, summary.retried) == (0, 0, 0, 0)


@pytest.mark.parametrize("transaction", TRANSACTION_MODES)
def test_two_nodes_claim_the_same_batch_one_claim_fails_certification(
    stores: StoreCluster, transaction: str
) -> None:
    receive(stores, 20)
    barrier = threading.Barrier(2)
    workers = [worker(app, transaction, batch_size=20) for app in stores.apps[:2]]
    for app in stores.apps[:2]:
        first_commit_waits(app.engine, barrier)

    with ThreadPoolExecutor(2) as pool:
        claimed = list(pool.map(lambda w: w.run_once(), workers))

    # Both selected all 20 rows (SKIP LOCKED is node-local); one claim committed, the other
    # failed certification and claimed nothing, without an error.
    assert sorted(claimed) == [0, 20]
    loser = workers[claimed.index(0)].summary
    assert loser.transient_retries == 1 and no_failures(loser)
    winner = workers[claimed.index(20)].summary
    assert winner.processed == 20 and no_failures(winner)
    assert_done_once(stores, 20)


@pytest.mark.parametrize("transaction", TRANSACTION_MODES)
def test_workers_on_three_nodes_drain_one_store_exactly_once(
    stores: StoreCluster, transaction: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Six handlers on three nodes credit five accounts: certification failures (1213) are
    re-run at once; one that outlasts the re-runs (``TRANSIENT_RETRIES``) is a failed
    attempt, run again after its back-off, and nothing else fails."""
    count = 300
    receive(stores, count)
    workers = [worker(app, transaction, batch_size=5, concurrency=2) for app in stores.apps]

    with ThreadPoolExecutor(len(workers)) as pool:
        summaries = list(
            pool.map(
                lambda w: w.run(until_empty=True, max_seconds=60, handle_signals=False), workers
            )
        )

    assert all(s.reason == "empty" for s in summaries), summaries
    assert sum(s.processed for s in summaries) == count
    assert all((s.errors, s.dead, s.lost) == (0, 0, 0) for s in summaries), summaries
    retried = sum(s.retried for s in summaries)
    failed = [r.getMessage() for r in caplog.records if "failed on attempt" in r.getMessage()]
    assert len(failed) == retried and all("1213" in text for text in failed), failed
    assert_done_once(stores, count, retried)
