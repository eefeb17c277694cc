"""Claim overhead: one business transaction with and without the claim, per layer.

The business transaction inserts a ledger row and updates an account's balance. Each layer
runs it without the claim, with the claim, and *paired* (both alternately, message by
message, in the same cell), so the claim's cost shows as a ratio:

* ORM: a :class:`~sqlalchemy.orm.Session`; the claim through the session extension
  (:func:`sa_inbox.install` + :func:`sa_inbox.register_claim`);
* Core: a :class:`~sqlalchemy.engine.Connection`; the claim through :meth:`Inbox.claim`;
* raw: hand-written SQL on the DBAPI driver's own connection; the claim as the backend's
  insert-or-skip statement, written by hand;
* async (one layer per async driver of the backend, :mod:`.async_layer`): an
  :class:`~sqlalchemy.ext.asyncio.AsyncConnection`; the claim through
  :meth:`sa_inbox.asyncio.AsyncInbox.claim`, and its paired cells also run a hand-written
  async Core insert-or-skip, so the claim is compared with that too.

Every layer keeps one connection open for the whole run (no pool checkout per
transaction). Worker ``i`` updates account ``i`` only, so workers contend for the database,
not for one row. Each cell runs ``messages`` transactions split over ``workers`` processes,
after :data:`WARMUP` untimed transactions per worker.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from rich.progress import Progress
from rich.table import Table
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, sessionmaker

from ..session import install, register_claim
from .async_layer import ASYNC_SEQUENCES, async_layers, missing_async_drivers
from .db import ACCOUNT, AMOUNT, LEDGER, Account, BenchSchema, LedgerEntry, make_engine
from .runner import BenchConfig, label_of
from .workers import BenchError, WorkerPool, levels, share, summarise, worker_result

__all__ = [
    "LAYERS",
    "VARIANTS",
    "Context",
    "core_claim",
    "core_plain",
    "layers",
    "measure",
    "orm_claim",
    "orm_plain",
    "raw_claim",
    "raw_plain",
    "run",
    "run_in_turn",
    "table",
]

CONSUMER = "billing"
DEFAULT_MESSAGES = 1000
#: Untimed transactions per worker before the measurement (statement caches, ORM set-up).
WARMUP = 5


@dataclass(frozen=True)
class RawSQL:
    """Hand-written statements for one driver, in its paramstyle."""

    claim: str
    ledger: str
    balance: str


_RAW_PG_MYSQL = RawSQL(
    claim="INSERT INTO bench_inbox (message_id, consumer_name) VALUES (%s, %s) "
    "ON CONFLICT (message_id, consumer_name) DO NOTHING",
    ledger="INSERT INTO bench_ledger (message_id, account_id, amount) VALUES (%s, %s, %s)",
    balance="UPDATE bench_accounts SET balance = balance + %s WHERE id = %s",
)
_RAW_MYSQL = RawSQL(
    claim="INSERT IGNORE INTO bench_inbox (message_id, consumer_name) VALUES (%s, %s)",
    ledger=_RAW_PG_MYSQL.ledger,
    balance=_RAW_PG_MYSQL.balance,
)
_RAW_ORACLE = RawSQL(
    claim="MERGE INTO bench_inbox t USING (SELECT :1 AS message_id, :2 AS consumer_name "
    "FROM dual) s ON (t.message_id = s.message_id AND t.consumer_name = s.consumer_name) "
    "WHEN NOT MATCHED THEN INSERT (message_id, consumer_name) "
    "VALUES (s.message_id, s.consumer_name)",
    ledger="INSERT INTO bench_ledger (message_id, account_id, amount) VALUES (:1, :2, :3)",
    balance="UPDATE bench_accounts SET balance = balance + :1 WHERE id = :2",
)
RAW_SQL: dict[str, RawSQL] = {
    "oracle": _RAW_ORACLE,
    "postgresql": _RAW_PG_MYSQL,
    "mysql": _RAW_MYSQL,
    "mariadb": _RAW_MYSQL,
    "sqlite": RawSQL(
        claim="INSERT INTO bench_inbox (message_id, consumer_name) VALUES (?, ?) "
        "ON CONFLICT (message_id, consumer_name) DO NOTHING",
        ledger="INSERT INTO bench_ledger (message_id, account_id, amount) VALUES (?, ?, ?)",
        balance="UPDATE bench_accounts SET balance = balance + ? WHERE id = ?",
    ),
}


#: Sessionmakers made and installed once per process, as an application does; each session
#: is bound to the worker's open connection. (A sessionmaker per Context would also be
#: correct if :func:`sa_inbox.install` were reliable on short-lived sessionmakers; it is not
#: yet: a new sessionmaker at the address of a freed, installed one is taken as installed.)
PLAIN_SESSIONS: sessionmaker[Session] = sessionmaker()
CLAIM_SESSIONS: sessionmaker[Session] = sessionmaker()
install(CLAIM_SESSIONS)


class Context:
    """What one worker's transactions run on: its connections and account.

    :param engine: the worker's engine.
    :param account: the account this worker updates.
    """

    def __init__(self, engine: sa.Engine, account: int) -> None:
        self.engine = engine
        self.account = account
        self.inbox = BenchSchema(engine).inbox
        self.conn: Connection = engine.connect()
        self._raw = engine.raw_connection()
        raw: Any = self._raw.driver_connection
        self.raw = raw
        self.cursor: Any = raw.cursor()
        dialect = engine.dialect.name
        if dialect not in RAW_SQL:
            raise BenchError(f"no hand-written SQL for {dialect}; the raw layer needs it")
        self.sql = RAW_SQL[dialect]
        self.raw_amount: Any = float(AMOUNT) if dialect == "sqlite" else AMOUNT

    def close(self) -> None:
        self.cursor.close()
        self._raw.close()
        self.conn.close()


def _orm_business(session: Session, ctx: Context, message_id: str) -> None:
    session.add(LedgerEntry(message_id=message_id, account_id=ctx.account, amount=AMOUNT))
    session.execute(
        sa.update(Account)
        .where(Account.id == ctx.account)
        .values(balance=Account.balance + AMOUNT)
        .execution_options(synchronize_session=False)
    )


def _core_business(conn: Connection, ctx: Context, message_id: str) -> None:
    conn.execute(
        LEDGER.insert(), {"message_id": message_id, "account_id": ctx.account, "amount": AMOUNT}
    )
    conn.execute(
        ACCOUNT.update()
        .where(ACCOUNT.c.id == ctx.account)
        .values(balance=ACCOUNT.c.balance + AMOUNT)
    )


def _raw_business(ctx: Context, message_id: str) -> None:
    ctx.cursor.execute(ctx.sql.ledger, (message_id, ctx.account, ctx.raw_amount))
    ctx.cursor.execute(ctx.sql.balance, (ctx.raw_amount, ctx.account))


def orm_plain(ctx: Context, message_id: str) -> None:
    """ORM: business transaction only"""
    with PLAIN_SESSIONS(bind=ctx.conn) as session, session.begin():
        _orm_business(session, ctx, message_id)


def orm_claim(ctx: Context, message_id: str) -> None:
    """ORM: register_claim() + business transaction"""
    with CLAIM_SESSIONS(bind=ctx.conn) as session, session.begin():
        register_claim(session, ctx.inbox, message_id, CONSUMER)
        _orm_business(session, ctx, message_id)


def core_plain(ctx: Context, message_id: str) -> None:
    """Core: business transaction only"""
    with ctx.conn.begin():
        _core_business(ctx.conn, ctx, message_id)


def core_claim(ctx: Context, message_id: str) -> None:
    """Core: inbox.claim() + business transaction"""
    with ctx.conn.begin():
        if ctx.inbox.claim(ctx.conn, message_id, CONSUMER):
            _core_business(ctx.conn, ctx, message_id)


def raw_plain(ctx: Context, message_id: str) -> None:
    """Raw DBAPI: hand-written business transaction only"""
    _raw_business(ctx, message_id)
    ctx.raw.commit()


def raw_claim(ctx: Context, message_id: str) -> None:
    """Raw DBAPI: hand-written insert-or-skip claim + business transaction"""
    ctx.cursor.execute(ctx.sql.claim, (message_id, CONSUMER))
    if ctx.cursor.rowcount == 1:
        _raw_business(ctx, message_id)
    ctx.raw.commit()


Transaction = Callable[[Context, str], None]

#: layer -> (without the claim, with the claim)
LAYERS: dict[str, tuple[Transaction, Transaction]] = {
    "orm": (orm_plain, orm_claim),
    "core": (core_plain, core_claim),
    "raw": (raw_plain, raw_claim),
}
VARIANTS: dict[str, Transaction] = {fn.__name__: fn for pair in LAYERS.values() for fn in pair}


#: Cell modes: the business transaction alone, with the claim, or both alternately.
MODES = ("plain", "claim", "paired")


def _sequence(mode: str, layer: str) -> tuple[Callable[..., Any], ...]:
    """The transactions a worker cycles through in ``mode`` (the claim's last in a pair)."""
    if layer not in LAYERS:
        return ASYNC_SEQUENCES[mode]
    plain, claim = LAYERS[layer]
    return {"plain": (plain,), "claim": (claim,), "paired": (plain, claim)}[mode]


def _target(layer: str) -> str:
    """The worker function of ``layer``'s cells."""
    if layer in LAYERS:
        return f"{__name__}:measure"
    return "sa_inbox.bench.async_layer:measure_async"


def layer_order(layers: list[str]) -> list[str]:
    """The sync layers (:data:`LAYERS` order), then the async ones, in the order given."""
    return sorted(layers, key=lambda x: list(LAYERS).index(x) if x in LAYERS else len(LAYERS))


def run_in_turn(
    ctx: Context,
    sequence: Sequence[Callable[[Context, str], object]],
    ids: Sequence[str],
    go: Callable[[], float],
) -> tuple[float, float, list[list[float]]]:
    """Run :data:`WARMUP` rounds of ``sequence`` untimed, wait at the barrier (``go``),
    then one transaction per id, the kinds of ``sequence`` in turn.

    :returns: the start and finish (``time.perf_counter()``), and the latencies in seconds
        of each kind.
    """
    by_kind: list[list[float]] = [[] for _ in sequence]
    for _ in range(WARMUP):
        for transaction in sequence:
            transaction(ctx, str(uuid.uuid4()))
    started = go()
    for n, message_id in enumerate(ids):
        kind = n % len(sequence)
        t0 = time.perf_counter()
        sequence[kind](ctx, message_id)
        by_kind[kind].append(time.perf_counter() - t0)
    return started, time.perf_counter(), by_kind


def measure(
    params: Mapping[str, Any], worker: int, workers: int, go: Callable[[], float]
) -> dict[str, Any]:
    """One worker's part of a cell (runs in a worker process; see :mod:`.workers`).

    In ``paired`` mode the worker alternates the transaction without and with the claim,
    message by message, and keeps their latencies apart: both see the same moment of a
    shared machine, so their ratio is not skewed by load that comes and goes.
    """
    engine = make_engine(params["url"])
    ctx = Context(engine, account=worker)
    sequence = _sequence(params["mode"], params["layer"])
    ids = [str(uuid.uuid4()) for _ in range(share(params["messages"], worker, workers))]
    try:
        timing = run_in_turn(ctx, sequence, ids, go)
    finally:
        ctx.close()
        engine.dispose()
    claims = len(timing[2][-1]) + WARMUP if params["mode"] != "plain" else 0
    return worker_result(timing, params["mode"], len(ids) + WARMUP * len(sequence), claims)


def _check_state(
    schema: BenchSchema, results: list[dict[str, Any]], messages: int, warmups: int
) -> dict[str, Any]:
    """Ledger rows == transactions run == messages + warm-ups; one inbox row per claim."""
    transactions = sum(r["transactions"] for r in results)
    expected = {
        "ledger_rows": messages + warmups,
        "inbox_rows": sum(r["claims"] for r in results),
        "balance_total": str((AMOUNT * transactions).quantize(Decimal("0.01"))),
    }
    state = schema.state()
    if transactions != messages + warmups or state != expected:
        raise BenchError(f"business state {state} differs from the expected {expected}")
    return state


def layers(url: str) -> list[str]:
    """Every layer measured on ``url``: :data:`LAYERS`, then the async layers whose
    driver is installed (:func:`.async_layer.async_layers`)."""
    return [*LAYERS, *async_layers(url)]


def _cells(config: BenchConfig) -> list[tuple[int, int, str, str]]:
    return [
        (repeat, workers, layer, mode)
        for repeat in range(config.repeat)
        for workers in levels(config.workers)
        for layer in layers(config.url)
        for mode in MODES
    ]


def _paired_medians(results: list[dict[str, Any]]) -> dict[str, float]:
    """Median latency of each kind of a paired cell: without the claim (first), with it
    (last), and, for the async layers, with the hand-written insert-or-skip (between).
    Empty if a kind has no timed transaction (fewer messages than kinds per worker)."""
    kinds = len(results[0]["paired_latencies"])
    if not all(any(r["paired_latencies"][kind] for r in results) for kind in range(kinds)):
        return {}

    def median_us(kind: int) -> float:
        latencies: list[float] = [x for r in results for x in r["paired_latencies"][kind]]
        return statistics.median(latencies) * 1e6

    medians = {
        "paired_plain_median_us": median_us(0),
        "paired_claim_median_us": median_us(kinds - 1),
    }
    if kinds == 3:
        medians["paired_hand_median_us"] = median_us(1)
    return medians


def run(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Measure every layer without the claim, with it, and both alternately (``paired``)
    at each concurrency level.

    Cells are interleaved (repeat → workers → layer → mode), so drift on a shared machine
    spreads over all of them; ratios are computed per repeat and the median over repeats is
    reported.
    """
    messages = config.messages or DEFAULT_MESSAGES
    engine = make_engine(config.url)
    schema = BenchSchema(engine)
    cells = _cells(config)
    task = progress.add_task("claim overhead", total=len(cells))
    measured: list[dict[str, Any]] = []
    try:
        with WorkerPool(config.workers) as pool:
            for repeat, workers, layer, mode in cells:
                schema.reset()
                params = {"url": config.url, "layer": layer, "mode": mode, "messages": messages}
                results = pool.run(_target(layer), params, workers)
                warmups = WARMUP * workers * len(_sequence(mode, layer))
                cell = {
                    "repeat": repeat,
                    "workers": workers,
                    "layer": layer,
                    "mode": mode,
                    "claim": mode == "claim",
                    "label": " / ".join(label_of(t) for t in _sequence(mode, layer)),
                    "messages": messages,
                    "state": _check_state(schema, results, messages, warmups),
                    **summarise(results, messages),
                }
                if mode == "paired":
                    cell.update(_paired_medians(results))
                measured.append(cell)
                progress.advance(task)
        schema.drop()
    finally:
        engine.dispose()
    return {
        "workers_kind": "processes",
        "skipped_layers": missing_async_drivers(config.url),
        "cells": measured,
        "summary": summary(measured),
    }


def _mode(cell: Mapping[str, Any]) -> str:
    return str(cell.get("mode") or ("claim" if cell["claim"] else "plain"))


def summary(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over repeats per (layer, workers).

    * ``plain_us_per_message`` / ``claim_us_per_message``: wall time per message without /
      with the claim; ``ratio``: median of the per-repeat ratios (with / without), with
      ``ratio_min`` and ``ratio_max``; ``added_us_per_message``: median of the per-repeat
      differences (with - without).
    * ``plain_latency_median_us`` / ``claim_latency_median_us``: median transaction
      latency; ``latency_ratio``: their ratio. Medians of latencies ignore the long
      stalls a shared machine adds (preempted processes), so this ratio is the steadier one.
    """
    rows: list[dict[str, Any]] = []
    order = layer_order(list(dict.fromkeys(c["layer"] for c in cells)))
    keys = sorted(
        {(c["workers"], c["layer"]) for c in cells}, key=lambda k: (k[0], order.index(k[1]))
    )
    for workers, layer in keys:
        plain, claim, paired = (
            {
                c["repeat"]: c
                for c in cells
                if (c["workers"], c["layer"], _mode(c)) == (workers, layer, mode)
            }
            for mode in MODES
        )
        repeats = sorted(set(plain) & set(claim))
        ratios = [claim[r]["us_per_message"] / plain[r]["us_per_message"] for r in repeats]
        added = [claim[r]["us_per_message"] - plain[r]["us_per_message"] for r in repeats]
        plain_latency = statistics.median(plain[r]["latency_median_us"] for r in repeats)
        claim_latency = statistics.median(claim[r]["latency_median_us"] for r in repeats)
        rows.append(
            {
                "workers": workers,
                "layer": layer,
                "repeats": len(repeats),
                "plain_us_per_message": statistics.median(
                    plain[r]["us_per_message"] for r in repeats
                ),
                "claim_us_per_message": statistics.median(
                    claim[r]["us_per_message"] for r in repeats
                ),
                "plain_per_second": statistics.median(plain[r]["per_second"] for r in repeats),
                "claim_per_second": statistics.median(claim[r]["per_second"] for r in repeats),
                "plain_latency_median_us": plain_latency,
                "claim_latency_median_us": claim_latency,
                "latency_ratio": claim_latency / plain_latency,
                "added_us_per_message": statistics.median(added),
                **_paired_summary(list(paired.values())),
                "ratio": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
            }
        )
    return rows


def _paired_summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repeats of the paired cells: latency without / with, and the
    median of their per-repeat ratios; empty if there are no paired cells."""
    cells = [c for c in cells if "paired_claim_median_us" in c]
    if not cells:
        return {}
    ratios = [c["paired_claim_median_us"] / c["paired_plain_median_us"] for c in cells]
    out = {
        "paired_plain_median_us": statistics.median(c["paired_plain_median_us"] for c in cells),
        "paired_claim_median_us": statistics.median(c["paired_claim_median_us"] for c in cells),
        "paired_ratio": statistics.median(ratios),
        "paired_ratio_min": min(ratios),
        "paired_ratio_max": max(ratios),
    }
    if all("paired_hand_median_us" in c for c in cells):
        # The async layers: the claim against the hand-written insert-or-skip, and that
        # against no claim, per repeat.
        vs_hand = [c["paired_claim_median_us"] / c["paired_hand_median_us"] for c in cells]
        hand = [c["paired_hand_median_us"] / c["paired_plain_median_us"] for c in cells]
        out.update(
            {
                "paired_hand_median_us": statistics.median(
                    c["paired_hand_median_us"] for c in cells
                ),
                "paired_hand_ratio": statistics.median(hand),
                "paired_claim_vs_hand": statistics.median(vs_hand),
                "paired_claim_vs_hand_min": min(vs_hand),
                "paired_claim_vs_hand_max": max(vs_hand),
            }
        )
    return out


def vs_hand(row: Mapping[str, Any]) -> str:
    """An async row's paired claim / hand-written ratio, ``"1.02 (1.01-1.04)"``; else ``-``."""
    if "paired_claim_vs_hand" not in row:
        return "-"
    spread = f"{row['paired_claim_vs_hand_min']:.2f}-{row['paired_claim_vs_hand_max']:.2f}"
    return f"{row['paired_claim_vs_hand']:.2f} ({spread})"


def table(results: Mapping[str, Any]) -> Table:
    """Per (workers, layer): µs per message without / with the claim, the paired latency
    ratio, the wall-time ratio (median, min-max over repeats) and, for the async layers,
    the paired ratio of the claim over the hand-written insert-or-skip."""
    out = Table(
        "workers",
        "layer",
        "µs/msg without",
        "µs/msg with",
        "msg/s with",
        "paired latency ratio (min-max)",
        "wall ratio (min-max)",
        "claim / hand-written (paired)",
    )
    for row in results["summary"]:
        paired = "-"
        if "paired_ratio" in row:
            spread = f"{row['paired_ratio_min']:.2f}-{row['paired_ratio_max']:.2f}"
            paired = f"{row['paired_ratio']:.2f} ({spread})"
        out.add_row(
            str(row["workers"]),
            row["layer"],
            f"{row['plain_us_per_message']:.0f}",
            f"{row['claim_us_per_message']:.0f}",
            f"{row['claim_per_second']:.0f}",
            paired,
            f"{row['ratio']:.2f} ({row['ratio_min']:.2f}-{row['ratio_max']:.2f})",
            vs_hand(row),
        )
    skipped = results.get("skipped_layers")
    if skipped:
        out.caption = f"skipped (driver or greenlet not installed): {', '.join(skipped)}"
    return out
