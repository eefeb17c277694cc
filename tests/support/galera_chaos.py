"""A chaos run on the live Galera cluster: store workers on all three nodes drain a store
while nodes are SIGKILLed and restarted (IST rejoin), then every node is checked.

One run: ``messages`` messages are received (in three parts, one through each node); a
:class:`~sa_inbox.store.Worker` per node (``concurrency`` threads, its own engine to its
node) drains them with a handler that writes an effect row and credits an account; meanwhile
``kills`` times, once a share of the messages has been handled, a node is killed with SIGKILL
(``servers.sh galera-kill``), left dead for ``down_s`` seconds, and restarted
(``servers.sh galera-restart``: ``--wsrep-recover`` then ``--wsrep-start-position``, so it
rejoins by IST). The workers of the dead node see their connections fail and retry after
their error back-off; what they had claimed comes back after the visibility timeout.

At the end, on every node, read causally (``wsrep_sync_wait = 1``): each message's effect
rows (``lost``: messages with none, ``twice``: extra rows), the balances, and the store rows
(all ``done``). Used by ``tests/backends/cluster/test_galera_chaos.py`` (small) and
``benchmarks/galera_chaos.py`` (bigger, figures in ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox.store import DONE, Incoming, StoredMessage
from sa_inbox.store.worker import Backoff, Worker, WorkerSummary
from tests.support.galera import GaleraCluster, causal_engine
from tests.support.store_app import StoreApp

__all__ = ["ACCOUNTS", "ChaosFigures", "run_galera_chaos"]

ACCOUNTS = 7
NODES = 3


@dataclass
class ChaosFigures:
    """What one run did and found."""

    messages: int
    kills: int = 0
    seconds: float = 0.0
    #: Per node (1-3): messages without an effect row, and effect rows beyond the first.
    lost: list[int] = field(default_factory=list)
    twice: list[int] = field(default_factory=list)
    #: Per node: whether the balances and the store rows (all ``done``) were as expected.
    balances_ok: list[bool] = field(default_factory=list)
    store_done: list[int] = field(default_factory=list)
    #: Seconds each restart took until the node was Synced again.
    rejoin_s: list[float] = field(default_factory=list)
    #: How each restarted node rejoined: "IST" or "SST".
    rejoined_by: list[str] = field(default_factory=list)
    killed_nodes: list[int] = field(default_factory=list)
    #: The workers' summaries, summed: errors (connections to a dead node), transient
    #: retries (certification failures), lost claims (expired and taken over).
    worker: dict[str, int] = field(default_factory=dict)
    reasons: list[str | None] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def exactly_once(self) -> bool:
        """Every message applied once on every node, balances right, every row done."""
        return (
            self.lost == [0] * NODES
            and self.twice == [0] * NODES
            and all(self.balances_ok)
            and self.store_done == [self.messages] * NODES
        )


class _Nodes:
    """The store on each node: plain engines for the workers, causal ones for the checks."""

    def __init__(self, urls: list[str]) -> None:
        self.apps = [StoreApp(sa.create_engine(url, pool_pre_ping=True)) for url in urls]
        self.checks = [StoreApp(causal_engine(url)) for url in urls]

    def dispose(self) -> None:
        for app in (*self.apps, *self.checks):
            app.engine.dispose()


def run_galera_chaos(
    urls: list[str],
    directory: str,
    *,
    messages: int,
    kills: int,
    down_s: float = 2.0,
    handler_ms: float = 5.0,
    concurrency: int = 2,
    visibility_timeout: float = 5.0,
    max_seconds: float = 180.0,
    seed: int = 0,
) -> ChaosFigures:
    """One chaos run (see the module's docstring); the tables are dropped afterwards.

    :param urls: the three nodes' URLs.
    :param directory: the directory ``servers.sh`` started the cluster in.
    :param messages: messages to drain.
    :param kills: node kills (each followed by a restart), spread over the run.
    :param down_s: seconds a killed node stays dead before its restart.
    :param handler_ms: milliseconds each handler sleeps (so that the run lasts).
    :param concurrency: worker threads per node.
    :param visibility_timeout: seconds after which a claim of a dead worker comes back.
    :param max_seconds: the workers stop claiming after this many seconds.
    :param seed: chooses the nodes killed.
    """
    nodes = _Nodes(urls)
    cluster = GaleraCluster.__new__(GaleraCluster)  # only kill / restart: no engines
    cluster.directory = directory
    figures = ChaosFigures(messages)
    handled = _Counter()
    try:
        _prepare(nodes, messages)
        workers = [
            Worker(
                app.store.bind(app.engine),
                _handler(app, handled, handler_ms / 1000),
                concurrency=concurrency,
                batch_size=10,
                visibility_timeout=visibility_timeout,
                poll_interval=0.05,
                error_backoff=Backoff(base=0.2, maximum=1.0),
                name=f"node{n}",
            )
            for n, app in enumerate(nodes.apps, start=1)
        ]
        killer = threading.Thread(
            target=_kill_and_restart,
            args=(cluster, figures, handled, messages, kills, down_s, random.Random(seed)),
        )
        start = time.monotonic()
        killer.start()
        summaries = _run_workers(workers, max_seconds)
        killer.join()
        figures.seconds = round(time.monotonic() - start, 1)
        figures.worker = dict(sum((Counter(_counts(s)) for s in summaries), Counter()))
        figures.reasons = [s.reason for s in summaries]
        _verify(nodes, figures)
    finally:
        try:
            nodes.apps[0].drop()
        finally:
            nodes.dispose()
    return figures


class _Counter:
    """Handler calls so far (the killer's clock), thread-safe."""

    def __init__(self) -> None:
        self.value = 0
        self.lock = threading.Lock()

    def add(self) -> None:
        with self.lock:
            self.value += 1


def _prepare(nodes: _Nodes, messages: int) -> None:
    nodes.apps[0].reset()
    nodes.apps[0].open_accounts(ACCOUNTS)
    incoming = [Incoming(f"m-{i}", {"seq": i}) for i in range(messages)]
    for n, app in enumerate(nodes.apps):
        with app.engine.begin() as conn:
            app.store.receive_many(conn, incoming[n::NODES])


def _handler(app: StoreApp, handled: _Counter, sleep_s: float) -> Any:
    def handler(session: Session, message: StoredMessage) -> None:
        handled.add()
        app.apply(session, message)
        session.execute(app.credit(message.payload["seq"] % ACCOUNTS))
        time.sleep(sleep_s)

    return handler


def _kill_and_restart(
    cluster: GaleraCluster,
    figures: ChaosFigures,
    handled: _Counter,
    messages: int,
    kills: int,
    down_s: float,
    rng: random.Random,
) -> None:
    """Kill ``kills`` nodes one after the other, each once ``k / (kills + 1)`` of the
    messages were handled (a little less: the last stretch must have workers running)."""
    for k in range(1, kills + 1):
        threshold = messages * 0.8 * k / (kills + 1)
        while handled.value < threshold:
            time.sleep(0.02)
        node = rng.randint(1, NODES)
        cluster.kill(node)
        figures.kills += 1
        figures.killed_nodes.append(node)
        time.sleep(down_s)
        start = time.monotonic()
        figures.rejoined_by.append(cluster.restart(node))
        figures.rejoin_s.append(round(time.monotonic() - start, 1))


def _run_workers(workers: list[Worker], max_seconds: float) -> list[WorkerSummary]:
    summaries: list[WorkerSummary | None] = [None] * len(workers)

    def run(i: int) -> None:
        summaries[i] = workers[i].run(
            until_empty=True, max_seconds=max_seconds, handle_signals=False
        )

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(s is not None for s in summaries), "a worker raised"
    return [s for s in summaries if s is not None]


def _counts(summary: WorkerSummary) -> dict[str, int]:
    return {k: v for k, v in summary.as_dict().items() if isinstance(v, int)}


def _verify(nodes: _Nodes, figures: ChaosFigures) -> None:
    ids = {f"m-{i}" for i in range(figures.messages)}
    expected = Counter(i % ACCOUNTS for i in range(figures.messages))
    for check in nodes.checks:
        effects = Counter(check.effect_ids())
        figures.lost.append(len(ids - set(effects)))
        figures.twice.append(sum(c - 1 for c in effects.values() if c > 1))
        balances = check.balances()
        figures.balances_ok.append(balances == {a: expected[a] for a in range(ACCOUNTS)})
        t = check.store.table
        with check.engine.connect() as conn:
            done = conn.execute(
                sa.select(sa.func.count()).select_from(t).where(t.c.status == DONE)
            ).scalar_one()
        figures.store_done.append(int(done))
