"""PostgreSQL failovers under load: what a synchronous standby keeps and what an
asynchronous one loses, measured.

Each run is :func:`benchmarks.failover.run_failover` on a fresh primary + standby pair
(``scripts/servers.sh start DIR pg-sync`` or ``pg-async``): RabbitMQ consumer processes
apply payments (claim + ledger row + balance per transaction, ack after the commit) while
ballast threads write large rows on the primary; at 40% of the stream the primary is
frozen (SIGSTOP), SIGKILLed 0.2 s later and the standby promoted; the consumers reconnect
to it and RabbitMQ redelivers what was not acked. Reported per run: messages acked before
the promotion, and of those the ones missing from the promoted server (``lost``: the
primary acknowledged the COMMIT, the WAL never reached the standby, the claim went with
it and the broker will never redeliver an acked message), applied twice, failover time.

Run from the repository root (RabbitMQ's URL in ``SA_INBOX_TEST_AMQP_URL``)::

    PYTHONPATH=. .venv/bin/python benchmarks/pg_failover.py --runs 5

Writes ``benchmarks/results/pg_failover.json`` (every run, the machine's load sampled
every 2 s) and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import threading
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.failover import FailoverConfig, run_failover
from tests.support.pgha import delete_queue, replicated_servers

OUT = Path(__file__).parent / "results" / "pg_failover.json"


def load_samples(samples: list[float], stop: threading.Event) -> None:
    while True:
        samples.append(float(Path("/proc/loadavg").read_text().split()[0]))
        if stop.wait(2.0):
            return


def one_run(mode: str, args: argparse.Namespace, amqp_url: str, seed: int) -> dict[str, Any]:
    queue = f"sa-inbox-failover-bench-{uuid.uuid4().hex[:12]}"
    with replicated_servers(mode) as servers:
        try:
            result = run_failover(
                FailoverConfig(
                    broker=amqp_url,
                    url=servers.failover_url,
                    promoted_url=servers.standby_url,
                    replication=mode,
                    messages=args.messages,
                    consumers=args.consumers,
                    ballast_writers=args.ballast_writers,
                    ballast_row_bytes=args.ballast_row_bytes,
                    seed=seed,
                    name=queue,
                ),
                servers,
            )
        finally:
            delete_queue(amqp_url, queue)
    return result.to_json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="failovers per replication mode")
    parser.add_argument("--modes", default="sync,async")
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--ballast-writers", type=int, default=4)
    parser.add_argument("--ballast-row-bytes", type=int, default=256 * 1024)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    amqp_url = os.environ["SA_INBOX_TEST_AMQP_URL"]
    console = Console(width=160)
    samples: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=load_samples, args=(samples, stop), daemon=True)
    sampler.start()
    runs: dict[str, list[dict[str, Any]]] = {}
    started = datetime.datetime.now(datetime.UTC)
    try:
        for mode in args.modes.split(","):
            for i in range(args.runs):
                run = one_run(mode, args, amqp_url, seed=100 + i)
                runs.setdefault(mode, []).append(run)
                console.print(
                    f"{mode} run {i + 1}: {run['lost_count']} acked lost of "
                    f"{run['acked_before_failover']} acked before the promotion, "
                    f"{len(run['applied_twice'])} applied twice, failover {run['failover_s']:.2f} s"
                )
    finally:
        stop.set()
        sampler.join()
    document = {
        "machine": f"{platform.node()}: shared {os.cpu_count()}-core, noisy",
        "started": started.isoformat(),
        "options": {k: str(v) for k, v in vars(args).items()},
        "loadavg": {
            "samples_1min": samples,
            "median_1min": statistics.median(samples),
            "max_1min": max(samples),
        },
        "summary": {mode: summary(mode_runs) for mode, mode_runs in runs.items()},
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    table = Table(
        "replication",
        "runs",
        "acked lost per run",
        "applied twice",
        "acked before promotion (median)",
        "failover s (median)",
        title="PostgreSQL failover",
    )
    for mode, s in document["summary"].items():
        table.add_row(
            mode,
            str(s["runs"]),
            ", ".join(map(str, s["lost_per_run"])),
            str(s["applied_twice"]),
            f"{s['acked_before_failover_median']:.0f}",
            f"{s['failover_s_median']:.2f}",
        )
    console.print(table)
    console.print(
        f"load (1 min) median {statistics.median(samples):.2f}, max {max(samples):.2f}; "
        f"written to {args.out}"
    )


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runs": len(runs),
        "lost_per_run": [r["lost_count"] for r in runs],
        "lost_total": sum(r["lost_count"] for r in runs),
        "applied_twice": sum(len(r["applied_twice"]) for r in runs),
        "acked_before_failover_median": statistics.median(r["acked_before_failover"] for r in runs),
        "failover_s_median": statistics.median(r["failover_s"] for r in runs),
        "unsettled": sum(r["unsettled"] for r in runs),
    }


if __name__ == "__main__":
    main()
