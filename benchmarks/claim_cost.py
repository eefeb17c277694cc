"""The claim's own cost over the raw driver's, and the guard's, per transaction, on loopback.

The business transaction of ``sa-inbox bench claim_overhead`` (a ledger row, a balance,
commit) on one open connection, written seven ways, run in turn message by message (in a
new random order each round) in one process, so each sees the same moments of a shared
machine:

* ``raw``, ``raw+claim``: hand-written SQL on the driver's own connection, without and with
  the hand-written insert-or-skip (``sa_inbox.bench.claim_overhead``'s raw layer);
* ``core``, ``core+claim``, ``core+claim (no BEGIN)``: a Core ``Connection``, without the
  claim, with ``inbox.claim()`` (sent with ``BEGIN`` where the driver allows it: psycopg
  3), and with an Inbox made with ``send_with_begin=False`` (one statement after the
  driver's own ``BEGIN``: the Python cost alone); ``core+SELECT 1``: the claim's place
  taken by ``conn.exec_driver_sql("SELECT 1")``, what any one statement costs through
  SQLAlchemy's ``Connection``;
* ``session``, ``session+guard``: a Session on that connection, ``with session.begin():``
  against sa-inbox's guarded transaction (:func:`sa_inbox.guard.owned_transaction`, what
  ``handle()`` runs a handler in), both with the Core statements.

Per way: the median wall time and the median client CPU (``time.process_time``) of a
transaction. The figures, per repeat and then their median over ``--repeat`` repeats:
what the claim adds to Core's transaction minus what it adds to the raw driver's (the
claim's own cost over the raw driver's round trip), with and without ``BEGIN``, wall and
CPU; the claim over ``SELECT 1`` in its place; and the guarded transaction over the plain
one. ``/proc/loadavg`` is sampled. Prints a table; writes
``benchmarks/results/claim_cost-<backend>.json``::

    python -m benchmarks.claim_cost --url "$SA_INBOX_TEST_POSTGRESQL_URL" --messages 2000 --repeat 5
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session

from benchmarks.claim_rtt import versions
from benchmarks.loadavg import LoadSampler
from sa_inbox import Inbox
from sa_inbox.bench.claim_overhead import (
    CONSUMER,
    Context,
    core_claim,
    core_plain,
    raw_claim,
    raw_plain,
)
from sa_inbox.bench.db import ACCOUNT, AMOUNT, LEDGER, BenchSchema
from sa_inbox.guard import owned_transaction

RESULTS = Path(__file__).parent / "results"
Way = Callable[[Context, str], None]


def _business(session: Session, ctx: Context, message_id: str) -> None:
    session.execute(
        LEDGER.insert(), {"message_id": message_id, "account_id": ctx.account, "amount": AMOUNT}
    )
    session.execute(
        ACCOUNT.update()
        .where(ACCOUNT.c.id == ctx.account)
        .values(balance=ACCOUNT.c.balance + AMOUNT)
    )


def ways(without_begin: Inbox) -> dict[str, Way]:
    def core_claim_without_begin(ctx: Context, message_id: str) -> None:
        with ctx.conn.begin():
            if without_begin.claim(ctx.conn, message_id, CONSUMER):
                _business_core(ctx, message_id)

    def core_select_one(ctx: Context, message_id: str) -> None:
        with ctx.conn.begin():
            ctx.conn.exec_driver_sql("SELECT 1")
            _business_core(ctx, message_id)

    def session_plain(ctx: Context, message_id: str) -> None:
        with Session(bind=ctx.conn) as session, session.begin():
            _business(session, ctx, message_id)

    def session_guarded(ctx: Context, message_id: str) -> None:
        with Session(bind=ctx.conn) as session, owned_transaction(session):
            _business(session, ctx, message_id)

    return {
        "raw": raw_plain,
        "raw+claim": raw_claim,
        "core": core_plain,
        "core+claim": core_claim,
        "core+claim (no BEGIN)": core_claim_without_begin,
        "core+SELECT 1": core_select_one,
        "session": session_plain,
        "session+guard": session_guarded,
    }


def _business_core(ctx: Context, message_id: str) -> None:
    ctx.conn.execute(
        LEDGER.insert(), {"message_id": message_id, "account_id": ctx.account, "amount": AMOUNT}
    )
    ctx.conn.execute(
        ACCOUNT.update()
        .where(ACCOUNT.c.id == ctx.account)
        .values(balance=ACCOUNT.c.balance + AMOUNT)
    )


def one_repeat(engine: sa.Engine, messages: int, warmup: int) -> dict[str, Any]:
    schema = BenchSchema(engine, accounts=1)
    schema.reset()
    ctx = Context(engine, account=0)
    without_begin = inbox_without_begin(ctx.inbox.table)
    run = ways(without_begin)
    names = list(run)
    shuffler = random.Random(messages)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    try:
        for i in range(-warmup, messages):
            for name in shuffler.sample(names, len(names)):
                message_id = str(uuid.uuid4())
                c0, t0 = time.process_time(), time.perf_counter()
                run[name](ctx, message_id)
                t1, c1 = time.perf_counter(), time.process_time()
                if i >= 0:
                    wall[name].append(t1 - t0)
                    cpu[name].append(c1 - c0)
    finally:
        ctx.close()
    state = schema.state()
    transactions = (messages + warmup) * len(names)
    if state["ledger_rows"] != transactions:
        raise SystemExit(f"ledger rows {state['ledger_rows']}, expected {transactions}")
    if state["inbox_rows"] != (messages + warmup) * 3:
        raise SystemExit(f"inbox rows {state['inbox_rows']}, expected {(messages + warmup) * 3}")
    schema.drop()
    medians = {
        name: {
            "wall_us": statistics.median(wall[name]) * 1e6,
            "cpu_us": statistics.median(cpu[name]) * 1e6,
        }
        for name in names
    }
    return {"ways": medians, "figures": figures(medians)}


def inbox_without_begin(table: sa.Table) -> Inbox:
    """An Inbox on ``table`` whose claims never go with ``BEGIN``; on a checkout of sa-inbox
    from before ``send_with_begin`` (a baseline run), its plain Inbox."""
    try:
        return Inbox(table=table, consumers=False, send_with_begin=False)
    except TypeError:
        return Inbox(table=table, consumers=False)


def figures(m: dict[str, dict[str, float]]) -> dict[str, float]:
    """The claim's added cost per layer, Core's over raw's, and the guard's ratio."""
    out: dict[str, float] = {}
    for kind in ("wall_us", "cpu_us"):
        raw_added = m["raw+claim"][kind] - m["raw"][kind]
        core_added = m["core+claim"][kind] - m["core"][kind]
        plain_added = m["core+claim (no BEGIN)"][kind] - m["core"][kind]
        out[f"raw_added_{kind}"] = raw_added
        out[f"core_added_{kind}"] = core_added
        out[f"core_without_begin_added_{kind}"] = plain_added
        out[f"core_over_raw_{kind}"] = core_added - raw_added
        out[f"core_without_begin_over_raw_{kind}"] = plain_added - raw_added
        out[f"core_over_select_one_{kind}"] = m["core+claim"][kind] - m["core+SELECT 1"][kind]
        out[f"guard_ratio_{kind}"] = m["session+guard"][kind] / m["session"][kind]
    return out


def main(args: argparse.Namespace) -> dict[str, Any]:
    engine = sa.create_engine(args.url, pool_size=2)
    started = datetime.datetime.now(datetime.UTC)
    repeats = []
    with LoadSampler() as load:
        for n in range(args.repeat):
            repeats.append(one_repeat(engine, args.messages, args.warmup))
            print(f"repeat {n + 1}/{args.repeat} done", flush=True)
    backend = engine.dialect.name
    engine.dispose()
    keys = repeats[0]["figures"].keys()
    summary = {
        key: {
            "median": statistics.median(r["figures"][key] for r in repeats),
            "min": min(r["figures"][key] for r in repeats),
            "max": max(r["figures"][key] for r in repeats),
        }
        for key in keys
    }
    way_medians = {
        name: {
            kind: statistics.median(r["ways"][name][kind] for r in repeats)
            for kind in ("wall_us", "cpu_us")
        }
        for name in repeats[0]["ways"]
    }
    return {
        "scenario": "claim_cost",
        "label": "the claim's own cost over the raw driver's, and the guard's",
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "backend": backend,
        "driver": engine.dialect.driver,
        "messages": args.messages,
        "warmup": args.warmup,
        "repeat": args.repeat,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "versions": versions(),
        },
        "loadavg": load.summary(),
        "repeats": repeats,
        "ways": way_medians,
        "summary": summary,
    }


def table(results: dict[str, Any]) -> Table:
    out = Table(
        "figure",
        "wall µs (min-max)",
        "client CPU µs (min-max)",
        title=(
            f"{results['backend']} ({results['driver']}), loopback: median of "
            f"{results['repeat']} repeats of {results['messages']} transactions per way"
        ),
    )
    s = results["summary"]

    def cell(key: str, ratio: bool = False) -> str:
        f = s[key]
        fmt = "{:.3f}" if ratio else "{:+.0f}"
        return f"{fmt.format(f['median'])} ({fmt.format(f['min'])} … {fmt.format(f['max'])})"

    rows = [
        ("raw driver: the claim adds", "raw_added"),
        ("Core: the claim adds (with BEGIN)", "core_added"),
        ("Core: the claim adds (send_with_begin=False)", "core_without_begin_added"),
        ("**Core's claim over raw's** (with BEGIN)", "core_over_raw"),
        ("Core's claim over raw's (send_with_begin=False)", "core_without_begin_over_raw"),
        ("Core's claim over a SELECT 1 in its place", "core_over_select_one"),
    ]
    for label, key in rows:
        out.add_row(label, cell(f"{key}_wall_us"), cell(f"{key}_cpu_us"))
    out.add_row(
        "guarded / plain session transaction",
        cell("guard_ratio_wall_us", ratio=True),
        cell("guard_ratio_cpu_us", ratio=True),
    )
    load = results["loadavg"]
    out.caption = (
        f"load average during the run: median {load['median_1min']:.2f}, max "
        f"{load['max_1min']:.2f} (1-min, sampled every 2 s; {results['machine']['cpus']} CPUs)"
    )
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("SA_INBOX_TEST_POSTGRESQL_URL"))
    parser.add_argument("--messages", type=int, default=2000, help="timed, per way")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not args.url:
        parser.error("--url (or SA_INBOX_TEST_POSTGRESQL_URL) is required")
    if args.repeat < 5:
        parser.error("--repeat must be at least 5 (the figures are medians)")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    results = main(arguments)
    out = arguments.out or RESULTS / f"claim_cost-{results['backend']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    Console(width=160).print(table(results))
    print(f"wrote {out}")
