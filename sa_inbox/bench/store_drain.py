"""Inbox store: receive M messages, then drain them with 1 … W worker processes.

Each run drops and creates the store table (``bench_store``) and an effects table, receives
the ``messages`` in broker polls of :data:`POLL` (:meth:`~sa_inbox.store.InboxStore.
receive_many`, one transaction per poll), then drains them with ``workers`` processes of
:class:`~sa_inbox.bench.workers.WorkerPool`, each running
``Worker(batch_size=…).run(until_empty=True)``, released together by a barrier once
connected. The drain is timed from the release to the last worker's return. The handler
inserts one effect row per message, in the transaction that marks it ``done``; after each
run the state is checked (``messages`` distinct effect rows, as many ``done`` rows, and the
workers' counts add up), and a wrong state stops the benchmark.

Before the drains, ``receive vs claim`` times one message per transaction, alternately
(order rotated each message) through :meth:`~sa_inbox.store.InboxStore.receive` (the
store's insert-or-skip of the whole message), :meth:`~sa_inbox.Inbox.claim` (the
processed-messages key only) and a hand-written SQLAlchemy Core insert of the receive's row,
on one open connection: the median latency of each, over ``min(messages, 2000)`` messages
after :data:`WARMUP` untimed ones (every table must then hold exactly those rows); see
:func:`receive_vs_claim`.

Options: ``config.options["batch_size"]`` (default :data:`DEFAULT_BATCH_SIZE`), the
worker's claim batch. Figures are medians over ``config.repeat`` runs.
"""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from rich.progress import Progress
from rich.table import Table
from sqlalchemy.orm import Session

from ..claim import Inbox
from ..dialects import backend_for
from ..store import DONE, PENDING, InboxStore, Incoming, StoredMessage, Worker
from .db import make_engine
from .runner import BenchConfig
from .workers import BenchError, WorkerPool, levels, summarise

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "SINGLE_WAYS",
    "drain_worker",
    "read_loadavg",
    "receive_vs_claim",
    "run",
    "table",
]

DEFAULT_MESSAGES = 1000
#: Messages a worker claims per transaction (``Worker(batch_size=…)``).
DEFAULT_BATCH_SIZE = 20
#: Messages per ``receive_many`` transaction: one broker poll.
POLL = 100
#: Most messages of the receive-vs-claim timing.
SINGLE_MAX = 2000
#: Untimed messages before the receive-vs-claim timing (checks, statement caches).
WARMUP = 5

METADATA = sa.MetaData()
STORE = InboxStore(METADATA, table_name="bench_store")
CLAIMS = Inbox(METADATA, table_name="bench_store_claims")
#: The table of the hand-written insert of ``receive vs claim`` (a store table).
CORE_STORE = InboxStore(METADATA, table_name="bench_store_core")
EFFECTS = sa.Table(
    "bench_store_effects",
    METADATA,
    sa.Column(
        "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), sa.Identity(), primary_key=True
    ),
    sa.Column("message_id", sa.String(255), nullable=False),
    sa.Column("amount", sa.Integer, nullable=False),
)


def apply(session: Session, message: StoredMessage) -> None:
    """The handler: one effect row per message."""
    session.execute(
        EFFECTS.insert().values(message_id=message.message_id, amount=message.payload["amount"])
    )


def _reset(engine: sa.Engine) -> None:
    METADATA.drop_all(engine, checkfirst=True)
    METADATA.create_all(engine)


def drain_worker(
    params: Mapping[str, Any], worker: int, workers: int, go: Callable[[], float]
) -> dict[str, Any]:
    """A worker process (:data:`~sa_inbox.bench.workers.WorkerFunction`): connect, wait at
    the barrier, drain the store; the messages it processed."""
    engine = make_engine(params["url"])
    try:
        consumer = Worker(STORE.bind(engine), apply, batch_size=params["batch_size"])
        with engine.connect():
            pass
        started = go()
        summary = consumer.run(until_empty=True, handle_signals=False)
        finished = time.perf_counter()
    finally:
        engine.dispose()
    return {"started": started, "finished": finished, "latencies": [], "done": summary.processed}


def _receive(engine: sa.Engine, messages: int) -> float:
    """Receive ``messages`` in polls of :data:`POLL`; the seconds taken."""
    stream = [Incoming(f"bench-{i:07d}", {"amount": i % 100}) for i in range(messages)]
    started = time.perf_counter()
    for start in range(0, messages, POLL):
        with engine.begin() as conn:
            STORE.receive_many(conn, stream[start : start + POLL])
    return time.perf_counter() - started


def _check(engine: sa.Engine, messages: int, done: list[int]) -> None:
    """:raises BenchError: unless every message was processed exactly once."""
    with engine.connect() as conn:
        rows, distinct = conn.execute(
            sa.select(sa.func.count(), sa.func.count(sa.distinct(EFFECTS.c.message_id)))
        ).one()
    counts = STORE.counts(engine)
    if not rows == distinct == messages == counts[DONE] == sum(done):
        raise BenchError(
            f"wrong state after the drain: {rows} effect rows ({distinct} distinct) for "
            f"{messages} messages, store {counts}, workers processed {done}"
        )


def drain(
    engine: sa.Engine, pool: WorkerPool, url: str, messages: int, workers: int, batch_size: int
) -> dict[str, Any]:
    """Receive ``messages``, drain them with ``workers`` processes, check; one run's figures."""
    _reset(engine)
    receive_seconds = _receive(engine, messages)
    results = pool.run(f"{__name__}:drain_worker", {"url": url, "batch_size": batch_size}, workers)
    done = [r["done"] for r in results]
    _check(engine, messages, done)
    drain_seconds = summarise(results, messages)["seconds"]
    return {
        "workers": workers,
        "messages": messages,
        "receive_seconds": receive_seconds,
        "drain_seconds": drain_seconds,
        "receive_per_second": messages / receive_seconds,
        "drain_per_second": messages / drain_seconds,
        "done_per_worker": done,
    }


#: The three ways of taking in one message that ``receive vs claim`` alternates.
SINGLE_WAYS = ("receive", "claim", "core")


def _single_way(way: str, conn: sa.Connection, core: Any, i: int, message_id: str) -> None:
    """Take in message ``i`` one way, in the caller's transaction."""
    payload = {"order": f"o-{i:07d}", "amount": i % 100, "currency": "EUR"}
    if way == "receive":
        STORE.receive(conn, message_id, payload, consumer_name="bench", message_type="bench.t")
    elif way == "claim":
        CLAIMS.claim(conn, message_id, "bench")
    else:
        now = datetime.datetime.now(datetime.UTC)
        row = {
            "message_id": message_id,
            "consumer_name": "bench",
            "aggregate_id": None,
            "message_type": "bench.t",
            "payload": payload,
            "status": PENDING,
            "received_at": now,
            "available_at": now,
            "attempts": 0,
        }
        conn.execute(core, row, execution_options={"preserve_rowcount": True})


def receive_vs_claim(engine: sa.Engine, messages: int) -> dict[str, Any]:
    """One message per transaction, alternately received, claimed and inserted by hand;
    the median µs of each and the ratios.

    Three ways, their order rotated message by message: ``receive``
    (:meth:`~sa_inbox.store.InboxStore.receive` of a small JSON payload with a message
    type), ``claim`` (:meth:`~sa_inbox.Inbox.claim` of the same id) and ``core`` (the same
    row as the receive, into a second store table, through a hand-written SQLAlchemy Core
    insert-or-skip built once: the backend's ``INSERT … ON CONFLICT DO NOTHING`` /
    ``INSERT IGNORE`` with the column types serialising). ``ratio`` is receive over claim,
    ``receive_over_core`` receive over the hand-written insert.

    :raises BenchError: unless every table holds exactly the messages sent.
    """
    _reset(engine)
    core_table = CORE_STORE.table
    core = backend_for(engine.dialect.name).claim.insert_or_skip(core_table)
    timings: dict[str, list[float]] = {way: [] for way in SINGLE_WAYS}
    with engine.connect() as conn:
        for i in range(-WARMUP, messages):
            message_id = f"single-{i:07d}"
            shift = i % len(SINGLE_WAYS)
            for way in SINGLE_WAYS[shift:] + SINGLE_WAYS[:shift]:
                t0 = time.perf_counter()
                with conn.begin():
                    _single_way(way, conn, core, i, message_id)
                if i >= 0:
                    timings[way].append(time.perf_counter() - t0)
        count = sa.select(sa.func.count())
        claimed = conn.execute(count.select_from(CLAIMS.table)).scalar_one()
        by_hand = conn.execute(count.select_from(core_table)).scalar_one()
    stored = sum(STORE.counts(engine).values())
    if not stored == claimed == by_hand == messages + WARMUP:
        raise BenchError(
            f"wrong state: {stored} stored, {claimed} claimed, {by_hand} by hand, "
            f"{messages + WARMUP} sent"
        )
    median = {way: statistics.median(timings[way]) * 1e6 for way in SINGLE_WAYS}
    return {
        "messages": messages,
        "receive_median_us": median["receive"],
        "claim_median_us": median["claim"],
        "core_median_us": median["core"],
        "ratio": median["receive"] / median["claim"],
        "receive_over_core": median["receive"] / median["core"],
        "loadavg_1min": read_loadavg(),
    }


def read_loadavg() -> float:
    """The 1-minute load average (``/proc/loadavg``); NaN where there is none."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


def run(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """``config.repeat`` receive-vs-claim timings, then ``config.repeat`` drains at each
    worker level; every run's figures and the medians.

    :raises BenchError: if a run leaves the wrong state or a worker fails.
    """
    messages = config.messages or DEFAULT_MESSAGES
    batch_size = int(config.options.get("batch_size", DEFAULT_BATCH_SIZE))
    worker_levels = levels(config.workers)
    single_task = progress.add_task("store: receive vs claim", total=config.repeat)
    drain_task = progress.add_task("store: drain", total=config.repeat * len(worker_levels))
    engine = make_engine(config.url)
    try:
        single = []
        for _ in range(config.repeat):
            single.append(receive_vs_claim(engine, min(messages, SINGLE_MAX)))
            progress.advance(single_task)
        runs = []
        with WorkerPool(config.workers) as pool:
            for workers in worker_levels:
                for _ in range(config.repeat):
                    runs.append(drain(engine, pool, config.url, messages, workers, batch_size))
                    progress.advance(drain_task)
        METADATA.drop_all(engine, checkfirst=True)
    finally:
        engine.dispose()
    return {
        "messages": messages,
        "batch_size": batch_size,
        "poll": POLL,
        "receive_vs_claim": single,
        "receive_vs_claim_summary": {
            key: statistics.median(r[key] for r in single)
            for key in (
                "messages",
                "receive_median_us",
                "claim_median_us",
                "core_median_us",
                "ratio",
                "receive_over_core",
                "loadavg_1min",
            )
        },
        "runs": runs,
        "summary": summary(runs),
    }


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per worker level: median receive and drain messages/s, and the drain of every run."""
    rows = []
    for workers in sorted({r["workers"] for r in runs}):
        mine = [r for r in runs if r["workers"] == workers]
        rows.append(
            {
                "workers": workers,
                "repeats": len(mine),
                "receive_per_second": statistics.median(r["receive_per_second"] for r in mine),
                "drain_per_second": statistics.median(r["drain_per_second"] for r in mine),
                "drain_runs_per_second": [r["drain_per_second"] for r in mine],
            }
        )
    return rows


def table(results: Mapping[str, Any]) -> Table:
    """Per worker level: receive and drain messages/s; receive vs claim in the caption."""
    out = Table("workers", "messages", "receive msg/s", "drain msg/s", "drain runs (msg/s)")
    for row in results["summary"]:
        out.add_row(
            str(row["workers"]),
            f"{results['messages']:,}",
            f"{row['receive_per_second']:,.0f}",
            f"{row['drain_per_second']:,.0f}",
            " / ".join(f"{x:,.0f}" for x in row["drain_runs_per_second"]),
        )
    single = results["receive_vs_claim_summary"]
    out.caption = (
        f"receive vs claim, one message per transaction ({single['messages']:,.0f} messages, "
        f"median of {len(results['receive_vs_claim'])} runs): receive "
        f"{single['receive_median_us']:.0f} µs, claim {single['claim_median_us']:.0f} µs, "
        f"hand-written Core insert {single['core_median_us']:.0f} µs; receive / claim "
        f"{single['ratio']:.2f}, receive / Core {single['receive_over_core']:.2f} "
        f"(load {single['loadavg_1min']:.2f})"
    )
    return out
