"""Inbox store throughput: receive M messages, then drain them with W worker processes.

    python benchmarks/store_drain.py --dburl URL [--messages 5000] [--workers 1,2,4]
        [--batch-size 20] [--repeats 3] [--json out.json]

Each run drops and creates the store table and an ``effects`` table, receives the messages
in broker polls of 100 (``InboxStore.receive_many``, one transaction per poll), then starts
W worker processes (``Worker(...).run(until_empty=True)``), holds them at a barrier until
all are connected, and times the drain from the release to the last exit. The handler
inserts one effect row per message, in the transaction that marks it done. After each run
the state is checked (M distinct effect rows, M rows ``done``); a wrong state aborts.

Before the drains, ``receive vs claim`` times one message per transaction, alternately
through ``InboxStore.receive`` (the store's insert-or-skip of the whole message) and
``Inbox.claim`` (the processed-messages key only), on one open connection, and reports the
median latency of each (at most 2000 messages of each; both tables must then hold exactly
those rows).

Figures are printed as a table (median of the repeats) and written as JSON with every run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sa_inbox.claim import Inbox  # noqa: E402
from sa_inbox.store import DONE, InboxStore, Incoming, StoredMessage  # noqa: E402
from sa_inbox.store.worker import Worker  # noqa: E402

TABLE = "bench_store"
POLL = 100


class BenchApp:
    """The store and the effects table on one engine."""

    def __init__(self, url: str) -> None:
        connect_args = {"timeout": 60} if url.startswith("sqlite") else {}
        self.engine = sa.create_engine(url, connect_args=connect_args)
        if url.startswith("sqlite"):
            sa.event.listen(self.engine, "connect", _sqlite_wal)
        self.metadata = sa.MetaData()
        self.store = InboxStore(self.metadata, table_name=TABLE)
        self.effects = sa.Table(
            "bench_store_effects",
            self.metadata,
            sa.Column(
                "id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                sa.Identity(),
                primary_key=True,
            ),
            sa.Column("message_id", sa.String(255), nullable=False),
            sa.Column("amount", sa.Integer, nullable=False),
        )

    def handle(self, session: Session, message: StoredMessage) -> None:
        session.execute(
            self.effects.insert().values(
                message_id=message.message_id, amount=message.payload["amount"]
            )
        )


def _sqlite_wal(dbapi_connection: Any, record: object) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def worker_main(url: str, batch_size: int) -> None:
    """A worker process: connect, say READY, wait for GO, drain, print the count done."""
    app = BenchApp(url)
    worker = Worker(app.store.bind(app.engine), app.handle, batch_size=batch_size)
    with app.engine.connect():
        pass
    print("READY", flush=True)
    sys.stdin.readline()
    worker.run(until_empty=True, handle_signals=False)
    print(worker.stats["done"], flush=True)


def one_run(url: str, messages: int, workers: int, batch_size: int) -> dict[str, Any]:
    """Receive and drain once; return the timings, after checking the state."""
    app = BenchApp(url)
    app.metadata.drop_all(app.engine)
    app.metadata.create_all(app.engine)
    stream = [Incoming(f"bench-{i:07d}", {"amount": i % 100}) for i in range(messages)]
    started = time.perf_counter()
    for start in range(0, messages, POLL):
        with app.engine.begin() as conn:
            app.store.receive_many(conn, stream[start : start + POLL])
    receive_seconds = time.perf_counter() - started
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", url, str(batch_size)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    for child in children:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "READY":
            raise SystemExit("a worker failed to start")
    started = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("GO\n")
        child.stdin.flush()
    done = [int(child.communicate(timeout=3600)[0].split()[-1]) for child in children]
    drain_seconds = time.perf_counter() - started
    check(app, messages, done)
    app.metadata.drop_all(app.engine)
    app.engine.dispose()
    return {
        "workers": workers,
        "messages": messages,
        "receive_seconds": receive_seconds,
        "drain_seconds": drain_seconds,
        "receive_per_second": messages / receive_seconds,
        "drain_per_second": messages / drain_seconds,
        "done_per_worker": done,
    }


def receive_vs_claim(url: str, messages: int) -> dict[str, Any]:
    """One message per transaction, alternately receive and claim; median µs of each."""
    app = BenchApp(url)
    inbox = Inbox(app.metadata, table_name="bench_store_claims")
    app.metadata.drop_all(app.engine)
    app.metadata.create_all(app.engine)
    timings: dict[str, list[float]] = {"receive": [], "claim": []}
    with app.engine.connect() as conn:
        for i in range(-5, messages):  # 5 untimed warm-ups (checks, statement caches)
            message_id = f"single-{i:07d}"
            t0 = time.perf_counter()
            with conn.begin():
                app.store.receive(conn, message_id, {"amount": i % 100})
            t1 = time.perf_counter()
            with conn.begin():
                inbox.claim(conn, message_id, "bench")
            t2 = time.perf_counter()
            if i >= 0:
                timings["receive"].append(t1 - t0)
                timings["claim"].append(t2 - t1)
        stored = sum(app.store.counts(app.engine).values())
        claimed = conn.execute(sa.select(sa.func.count()).select_from(inbox.table)).scalar_one()
    if not stored == claimed == messages + 5:
        raise SystemExit(f"wrong state: {stored} stored, {claimed} claimed, {messages + 5} sent")
    app.metadata.drop_all(app.engine)
    app.engine.dispose()
    receive_us = statistics.median(timings["receive"]) * 1e6
    claim_us = statistics.median(timings["claim"]) * 1e6
    return {
        "messages": messages,
        "receive_median_us": receive_us,
        "claim_median_us": claim_us,
        "ratio": receive_us / claim_us,
    }


def check(app: BenchApp, messages: int, done: list[int]) -> None:
    """Abort unless every message was processed exactly once."""
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(sa.func.count()).select_from(app.effects)).scalar_one()
        distinct = conn.execute(
            sa.select(sa.func.count(sa.distinct(app.effects.c.message_id)))
        ).scalar_one()
    counts = app.store.counts(app.engine)
    if not (rows == distinct == messages == counts[DONE] == sum(done)):
        raise SystemExit(f"wrong state: effects {rows}/{distinct}, {counts}, done {done}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dburl", required=True)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    levels = [int(w) for w in args.workers.split(",")]
    backend = sa.make_url(args.dburl).get_backend_name()
    single = [receive_vs_claim(args.dburl, min(args.messages, 2000)) for _ in range(args.repeats)]
    runs = [
        one_run(args.dburl, args.messages, workers, args.batch_size)
        for workers in levels
        for _ in range(args.repeats)
    ]
    document = {
        "benchmark": "store_drain",
        "backend": backend,
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "receive_vs_claim": single,
        "runs": runs,
    }
    table = Table(title=f"inbox store on {backend}: median of {args.repeats} runs")
    for column in ("workers", "messages", "receive msg/s", "drain msg/s"):
        table.add_column(column, justify="right")
    for workers in levels:
        mine = [r for r in runs if r["workers"] == workers]
        table.add_row(
            str(workers),
            str(args.messages),
            f"{statistics.median(r['receive_per_second'] for r in mine):,.0f}",
            f"{statistics.median(r['drain_per_second'] for r in mine):,.0f}",
        )
    Console().print(table)
    Console().print(
        f"receive vs claim, one message per transaction (median of {args.repeats} runs of "
        f"{single[0]['messages']}): receive "
        f"{statistics.median(r['receive_median_us'] for r in single):.0f} µs, claim "
        f"{statistics.median(r['claim_median_us'] for r in single):.0f} µs, ratio "
        f"{statistics.median(r['ratio'] for r in single):.2f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return document


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2], int(sys.argv[3]))
    else:
        main()
