"""What a savepoint per message costs in a batch transaction, against a batch without them.

Run from the repository root (SA_INBOX_TEST_POSTGRESQL_URL / SA_INBOX_TEST_MYSQL_URL set)::

    python benchmarks/batch_savepoints.py --messages 3000 --repeat 5

Per database and round: ``--messages`` messages received, then drained by one
``Worker(transaction="batch", batch_size=100)`` with a no-op handler and with a one-insert
handler, first run of each batch with savepoints and without
(:data:`sa_inbox.store.batch.SAVEPOINTS_FIRST`), the variants alternating in each round.
Prints µs per message (median over rounds) and the savepoint cost per message; writes
``benchmarks/results/batch_savepoints.json``. Every drain is checked: all ``done``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import sqlalchemy as sa

from sa_inbox.store import DONE, Incoming, Worker
from sa_inbox.store import batch as batch_module
from tests.support.store_app import StoreApp, make_engine

OUT = Path(__file__).parent / "results" / "batch_savepoints.json"


def drain_us(app: StoreApp, messages: int, savepoints: bool, insert: bool) -> float:
    app.reset()
    with app.engine.begin() as conn:
        for start in range(0, messages, 500):
            app.store.receive_many(
                conn, [Incoming(f"m{i}", {"seq": i}) for i in range(start, start + 500)]
            )

    def handler(session: sa.orm.Session, message: object) -> None:
        if insert:
            app.apply(session, message)  # type: ignore[arg-type]

    batch_module.SAVEPOINTS_FIRST = savepoints
    worker = Worker(app.store.bind(app.engine), handler, transaction="batch", batch_size=100)
    started = time.perf_counter()
    worker.run(until_empty=True, handle_signals=False)
    seconds = time.perf_counter() - started
    assert app.store.counts(app.engine)[DONE] == messages
    return seconds / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    urls = {
        "postgresql": os.environ["SA_INBOX_TEST_POSTGRESQL_URL"],
        "mariadb": os.environ["SA_INBOX_TEST_MYSQL_URL"],
    }
    results: dict[str, dict[str, float]] = {}
    for backend, url in urls.items():
        app = StoreApp(make_engine(url))
        figures: dict[str, list[float]] = {}
        for round_ in range(args.repeat):
            for insert in (False, True):
                variants = [False, True] if round_ % 2 == 0 else [True, False]
                for savepoints in variants:
                    kind = "insert" if insert else "noop"
                    key = f"{kind}/{'savepoints' if savepoints else 'plain'}"
                    figures.setdefault(key, []).append(
                        drain_us(app, args.messages, savepoints, insert)
                    )
        app.drop()
        app.engine.dispose()
        results[backend] = {key: statistics.median(v) for key, v in figures.items()}
        for kind in ("noop", "insert"):
            plain, saved = results[backend][f"{kind}/plain"], results[backend][f"{kind}/savepoints"]
            results[backend][f"{kind}/savepoint_cost_us"] = saved - plain
            print(
                f"{backend:10} {kind:6}: plain {plain:6.0f} µs/msg, savepoints {saved:6.0f} µs/msg"
                f" (+{saved - plain:.0f} µs, x{saved / plain:.2f})"
            )
    load = Path("/proc/loadavg").read_text().split()[:3]
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(
        json.dumps(
            {"messages": args.messages, "repeat": args.repeat, "load": load, **results}, indent=2
        )
    )
    print("load", load)


if __name__ == "__main__":
    main()
