"""Inbox store: receive M messages, then drain them with 1 … W worker processes, per
handler and transaction mode.

Each drain makes the store table anew, receives ``messages`` in polls of :data:`POLL`
(:meth:`~sa_inbox.store.InboxStore.receive_many`), then drains them with ``workers``
processes of :class:`~sa_inbox.bench.workers.WorkerPool` (``Worker(...).run(until_empty=
True)``, released together by a barrier). Cells: each handler of :data:`HANDLERS` by worker
level by contender (``transaction="message"``, ``"batch"``, and the ``others`` :func:`run`
is given); the contenders of a cell alternate within each repeat. After each drain the
database is checked (every message done exactly once; for ``ledger``, the ledger and the
balances) and a wrong state stops the benchmark. ``receive vs claim`` times one message per
transaction through :meth:`~sa_inbox.store.InboxStore.receive`, :meth:`~sa_inbox.Inbox.claim`
and a hand-written Core insert (:func:`receive_vs_claim`).

Options (``config.options``): ``batch_size`` (default :data:`DEFAULT_BATCH_SIZE`),
``levels`` (default 1, 2, 4 … ``config.workers``), ``handlers`` (a subset of
:data:`HANDLERS`). Figures are medians over ``config.repeat`` runs.

.. seealso:: ``docs/discussions/benchmarks.md``, "store_drain".
"""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from rich.progress import Progress
from rich.table import Table
from sqlalchemy.orm import Session

from ..claim import Inbox
from ..dialects import backend_for
from ..store import DONE, PENDING, InboxStore, Incoming, StoredMessage, Worker
from ..store.worker import BATCH, MESSAGE
from .db import make_engine
from .runner import BenchConfig
from .workers import BenchError, WorkerPool, levels, summarise

__all__ = [
    "ACCOUNTS",
    "DEFAULT_BATCH_SIZE",
    "HANDLERS",
    "POLL_INTERVAL",
    "SINGLE_WAYS",
    "OtherDrain",
    "drain_worker",
    "read_loadavg",
    "receive_vs_claim",
    "run",
    "table",
]

DEFAULT_MESSAGES = 1000
#: Messages a worker claims per transaction (``Worker(batch_size=…)``).
DEFAULT_BATCH_SIZE = 100
#: Messages per ``receive_many`` transaction: one broker poll.
POLL = 100
#: Most messages of the receive-vs-claim timing.
SINGLE_MAX = 2000
#: Untimed messages before the receive-vs-claim timing (checks, statement caches).
WARMUP = 5
#: Seconds a drain worker waits when nothing is claimable but rows are still in other
#: workers' hands: well under the worker's default (1 s), whose idle end of a drain would be
#: counted in it.
POLL_INTERVAL = 0.05
#: Accounts the ``ledger`` handler credits.
ACCOUNTS = 1000
#: The contenders of sa-inbox itself, in the order of the tables: its two transaction modes.
OWN = (MESSAGE, BATCH)


#: Another contender's drain of one no-op cell, given to :func:`run` by name: called with
#: the worker pool, the URL, the messages and the worker processes, it stores the messages
#: in its own table, drains them in that many processes of the pool and checks the result;
#: it returns the seconds its receive took and the workers' summaries (``done``,
#: ``errors``, as :func:`drain_worker`'s). :raises BenchError: on a wrong result.
OtherDrain = Callable[[WorkerPool, str, int, int], tuple[float, list[dict[str, Any]]]]


METADATA = sa.MetaData()
STORE = InboxStore(METADATA, table_name="bench_store")
CLAIMS = Inbox(METADATA, table_name="bench_store_claims")
#: The table of the hand-written insert of ``receive vs claim`` (a store table).
CORE_STORE = InboxStore(METADATA, table_name="bench_store_core")
LEDGER = sa.Table(
    "bench_store_ledger",
    METADATA,
    sa.Column(
        "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), sa.Identity(), primary_key=True
    ),
    sa.Column("message_id", sa.String(255), nullable=False),
    sa.Column("account", sa.Integer, nullable=False),
    sa.Column("amount", sa.Integer, nullable=False),
)
BALANCES = sa.Table(
    "bench_store_accounts",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("balance", sa.Integer, nullable=False),
)


def noop(session: Session, message: StoredMessage) -> None:
    """The no-op handler: the drain's own cost."""


def ledger(session: Session, message: StoredMessage) -> None:
    """The realistic handler: one ledger row and one balance update."""
    account, amount = message.payload["account"], message.payload["amount"]
    session.execute(
        LEDGER.insert().values(message_id=message.message_id, account=account, amount=amount)
    )
    session.execute(
        BALANCES.update()
        .where(BALANCES.c.id == account)
        .values(balance=BALANCES.c.balance + amount)
    )


#: The handlers of the drain cells, by name.
HANDLERS: dict[str, Callable[[Session, StoredMessage], None]] = {"noop": noop, "ledger": ledger}


def _payload(i: int) -> dict[str, int]:
    return {"amount": i % 100, "account": i * 7919 % ACCOUNTS}


def _reset(engine: sa.Engine) -> None:
    METADATA.drop_all(engine, checkfirst=True)
    METADATA.create_all(engine)
    with engine.begin() as conn:
        conn.execute(BALANCES.insert(), [{"id": i, "balance": 0} for i in range(ACCOUNTS)])


def drain_worker(
    params: Mapping[str, Any], worker: int, workers: int, go: Callable[[], float]
) -> dict[str, Any]:
    """A worker process (:data:`~sa_inbox.bench.workers.WorkerFunction`): connect, wait at
    the barrier, drain the store; its summary."""
    engine = make_engine(params["url"])
    try:
        consumer = Worker(
            STORE.bind(engine),
            HANDLERS[params["handler"]],
            batch_size=params["batch_size"],
            transaction=params["transaction"],
            poll_interval=POLL_INTERVAL,
        )
        with engine.connect():
            pass
        started = go()
        summary = consumer.run(until_empty=True, handle_signals=False)
        finished = time.perf_counter()
    finally:
        engine.dispose()
    return {
        "started": started,
        "finished": finished,
        "latencies": [],
        "done": summary.processed,
        "errors": summary.errors + summary.retried + summary.dead + summary.lost,
        "batch_reruns": summary.batch_reruns,
        "transient_retries": summary.transient_retries,
    }


def _receive(engine: sa.Engine, messages: int) -> float:
    """Receive ``messages`` in polls of :data:`POLL`; the seconds taken."""
    stream = [Incoming(f"bench-{i:07d}", _payload(i)) for i in range(messages)]
    started = time.perf_counter()
    for start in range(0, messages, POLL):
        with engine.begin() as conn:
            STORE.receive_many(conn, stream[start : start + POLL])
    return time.perf_counter() - started


def _check(engine: sa.Engine, messages: int, handler: str, results: Sequence[Any]) -> None:
    """:raises BenchError: unless every message was processed exactly once, no failure
    reached the user, and (``ledger``) the business state is exact."""
    done = [r["done"] for r in results]
    counts = STORE.counts(engine)
    errors = sum(r["errors"] for r in results)
    if not counts[DONE] == messages == sum(done) or errors:
        raise BenchError(
            f"wrong state after the drain: store {counts}, workers processed {done} of "
            f"{messages}, {errors} failed attempts or worker errors"
        )
    if handler != "ledger":
        return
    with engine.connect() as conn:
        rows, distinct = conn.execute(
            sa.select(sa.func.count(), sa.func.count(sa.distinct(LEDGER.c.message_id)))
        ).one()
        balance = conn.execute(sa.select(sa.func.sum(BALANCES.c.balance))).scalar_one()
    amounts = sum(_payload(i)["amount"] for i in range(messages))
    if not rows == distinct == messages or balance != amounts:
        raise BenchError(
            f"wrong ledger: {rows} rows ({distinct} distinct) for {messages} messages, "
            f"balances {balance} for {amounts}"
        )


def drain(
    engine: sa.Engine,
    pool: WorkerPool,
    url: str,
    messages: int,
    workers: int,
    batch_size: int,
    handler: str = "noop",
    contender: str = MESSAGE,
    others: Mapping[str, OtherDrain] | None = None,
) -> dict[str, Any]:
    """One drain: receive ``messages``, drain them with ``workers`` processes of
    ``contender`` (``"message"``, ``"batch"`` or the name of one of ``others``), check; its
    figures."""
    other = (others or {}).get(contender)
    if other is not None:
        receive_seconds, results = other(pool, url, messages, workers)
    else:
        _reset(engine)
        receive_seconds = _receive(engine, messages)
        params = {"url": url, "batch_size": batch_size, "handler": handler}
        results = pool.run(
            f"{__name__}:drain_worker", {**params, "transaction": contender}, workers
        )
        _check(engine, messages, handler, results)
    drain_seconds = summarise(results, messages)["seconds"]
    return {
        "workers": workers,
        "handler": handler,
        "contender": contender,
        "messages": messages,
        "receive_seconds": receive_seconds,
        "drain_seconds": drain_seconds,
        "receive_per_second": messages / receive_seconds,
        "drain_per_second": messages / drain_seconds,
        "done_per_worker": [r["done"] for r in results],
        "errors": sum(r.get("errors", 0) for r in results),
        "batch_reruns": sum(r.get("batch_reruns", 0) for r in results),
        "transient_retries": sum(r.get("transient_retries", 0) for r in results),
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


def contenders(handler: str, others: Mapping[str, OtherDrain] | None = None) -> list[str]:
    """The contenders of a drain cell: both transaction modes, and for ``noop`` each of
    ``others``."""
    return [*OWN, *(others or {})] if handler == "noop" else list(OWN)


def run(
    config: BenchConfig, progress: Progress, others: Mapping[str, OtherDrain] | None = None
) -> dict[str, Any]:
    """``config.repeat`` receive-vs-claim timings, then ``config.repeat`` drains of every
    contender, per handler and worker level; every run's figures and the medians.

    :param others: other contenders of the no-op cells by name (:data:`OtherDrain`).
    :raises BenchError: if a run leaves the wrong state or a worker fails, or a name of
        ``others`` is one of sa-inbox's own contenders.
    """
    messages = config.messages or DEFAULT_MESSAGES
    batch_size = int(config.options.get("batch_size", DEFAULT_BATCH_SIZE))
    worker_levels = list(config.options.get("levels") or levels(config.workers))
    handlers = list(config.options.get("handlers") or HANDLERS)
    taken = set(OWN) & set(others or {})
    if taken:
        raise BenchError(f"contender name {', '.join(sorted(taken))!r} is already taken")
    cells = [(h, w, contenders(h, others)) for h in handlers for w in worker_levels]
    single_task = progress.add_task("store: receive vs claim", total=config.repeat)
    drain_task = progress.add_task(
        "store: drain", total=config.repeat * sum(len(c) for _, _, c in cells)
    )
    engine = make_engine(config.url)
    try:
        single = []
        for _ in range(config.repeat):
            single.append(receive_vs_claim(engine, min(messages, SINGLE_MAX)))
            progress.advance(single_task)
        runs = []
        with WorkerPool(max(worker_levels)) as pool:
            for handler, workers, names in cells:
                for repeat in range(config.repeat):
                    turn = repeat % len(names)
                    for contender in names[turn:] + names[:turn]:
                        runs.append(
                            drain(
                                engine,
                                pool,
                                config.url,
                                messages,
                                workers,
                                batch_size,
                                handler,
                                contender,
                                others,
                            )
                            | {"repeat": repeat}
                        )
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


def _ratio(runs: list[dict[str, Any]], cell: tuple[str, int], over: str) -> float | None:
    """Median over repeats of batch over ``over``'s drain rate."""
    handler, workers = cell
    ratios = []
    for repeat in sorted({r["repeat"] for r in runs}):
        same = {
            r["contender"]: r["drain_per_second"]
            for r in runs
            if (r["handler"], r["workers"], r["repeat"]) == (handler, workers, repeat)
        }
        if BATCH in same and over in same:
            ratios.append(same[BATCH] / same[over])
    return statistics.median(ratios) if ratios else None


def peers_of(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The other contenders among ``rows`` (runs or summary rows), sorted."""
    return sorted({r.get("contender", MESSAGE) for r in rows} - set(OWN))


def _order(contender: str) -> tuple[int, str]:
    """sa-inbox's own contenders first, in :data:`OWN` order, then the peers by name."""
    return (OWN.index(contender), "") if contender in OWN else (len(OWN), contender)


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per handler, worker level and contender: median receive and drain messages/s, the
    drain of every run, the re-runs, and the batch mode's ratios over per-message and over
    each peer (``x_<peer>``)."""
    rows = []
    peers = peers_of(runs)
    keys = sorted(
        {(r["handler"], r["workers"], r["contender"]) for r in runs},
        key=lambda k: (list(HANDLERS).index(k[0]), k[1], _order(k[2])),
    )
    for handler, workers, contender in keys:
        mine = [
            r
            for r in runs
            if (r["handler"], r["workers"], r["contender"]) == (handler, workers, contender)
        ]
        row: dict[str, Any] = {
            "handler": handler,
            "workers": workers,
            "contender": contender,
            "repeats": len(mine),
            "receive_per_second": statistics.median(r["receive_per_second"] for r in mine),
            "drain_per_second": statistics.median(r["drain_per_second"] for r in mine),
            "drain_runs_per_second": [r["drain_per_second"] for r in mine],
            "batch_reruns": [r["batch_reruns"] for r in mine],
            "transient_retries": [r["transient_retries"] for r in mine],
            "errors": [r["errors"] for r in mine],
        }
        if contender == BATCH:
            row["x_message"] = _ratio(runs, (handler, workers), MESSAGE)
            for peer in peers:
                row[f"x_{peer}"] = _ratio(runs, (handler, workers), peer)
        rows.append(row)
    return rows


def table(results: Mapping[str, Any]) -> Table:
    """Per cell and contender: drain messages/s and ratios; receive vs claim in the caption."""
    peers = peers_of(results["summary"])
    out = Table(
        "handler",
        "workers",
        "contender",
        "drain msg/s",
        "drain runs (msg/s)",
        "batch / message",
        *(f"batch / {peer}" for peer in peers),
        "re-runs (batch, transient)",
        "receive msg/s",
    )
    for row in results["summary"]:
        out.add_row(
            row["handler"],
            str(row["workers"]),
            row["contender"],
            f"{row['drain_per_second']:,.0f}",
            " / ".join(f"{x:,.0f}" for x in row["drain_runs_per_second"]),
            _times(row.get("x_message")),
            *(_times(row.get(f"x_{peer}")) for peer in peers),
            f"{sum(row['batch_reruns'])}, {sum(row['transient_retries'])}",
            f"{row['receive_per_second']:,.0f}",
        )
    single = results["receive_vs_claim_summary"]
    out.caption = (
        f"{results['messages']:,} messages per drain, claim batch {results['batch_size']}; "
        f"receive vs claim, one message per transaction ({single['messages']:,.0f} messages, "
        f"median of {len(results['receive_vs_claim'])} runs): receive "
        f"{single['receive_median_us']:.0f} µs, claim {single['claim_median_us']:.0f} µs, "
        f"hand-written Core insert {single['core_median_us']:.0f} µs; receive / claim "
        f"{single['ratio']:.2f}, receive / Core {single['receive_over_core']:.2f} "
        f"(load {single['loadavg_1min']:.2f})"
    )
    return out


def _times(ratio: float | None) -> str:
    return "" if ratio is None else f"x{ratio:.1f}"
