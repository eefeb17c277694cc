"""Chaos runs on a 3-node MariaDB Galera cluster: nodes SIGKILLed and restarted mid-drain.

Run from the repository root, as root or a user who may run MariaDB::

    python benchmarks/galera_chaos.py --runs 5 --messages 3000 --kills 2

Each run (:func:`tests.support.galera_chaos.run_galera_chaos`): store workers on the three
nodes (2 threads each) drain ``--messages`` messages while ``--kills`` times a node is
SIGKILLed, left dead ``--down`` seconds and restarted (IST rejoin); then, on every node, read
causally, each message's effect rows, the balances and the store rows are checked. Uses the
cluster of ``SA_INBOX_TEST_GALERA_URLS`` / ``SA_INBOX_TEST_GALERA_DIR`` if set, else starts
one (``scripts/servers.sh start DIR galera``) in a temporary directory and stops it at the
end. Prints one line per run and the totals; writes ``--out`` (JSON). Exits 1 if any run
lost or doubled a message.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.galera import SERVERS_SH
from tests.support.galera_chaos import ChaosFigures, run_galera_chaos

OUT = Path(__file__).parent / "results" / "galera_chaos.json"


@contextmanager
def cluster() -> Iterator[tuple[list[str], str]]:
    """The URLs and directory of the cluster from the environment, or of a new one."""
    urls, directory = (
        os.environ.get("SA_INBOX_TEST_GALERA_URLS"),
        os.environ.get("SA_INBOX_TEST_GALERA_DIR"),
    )
    if urls and directory:
        yield urls.split(","), directory
        return
    with tempfile.TemporaryDirectory(prefix="galera-chaos.") as directory:
        subprocess.run([str(SERVERS_SH), "start", directory, "galera"], check=True)
        try:
            env = (Path(directory) / "env.sh").read_text()
            line = next(x for x in env.splitlines() if "SA_INBOX_TEST_GALERA_URLS" in x)
            yield line.split("'")[1].split(","), directory
        finally:
            subprocess.run([str(SERVERS_SH), "stop", directory], check=False)


#: The loggers of the expected errors: the workers', and the pool's (a connection reset on
#: a dead node, "Exception during reset or similar").
LOGGERS = ("sa_inbox", "sqlalchemy.pool")


@contextmanager
def worker_logs(path: Path | None) -> Iterator[None]:
    """The log records of :data:`LOGGERS` into ``path``, or nowhere: the expected errors
    (connections to a dead node) would flood the terminal."""
    handler = logging.FileHandler(path) if path else logging.NullHandler()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    saved = [(logger.level, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, (level, propagate) in zip(loggers, saved, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
        handler.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=2, help="node kills per run")
    parser.add_argument("--down", type=float, default=2.0, help="seconds a node stays dead")
    parser.add_argument("--handler-ms", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--log", type=Path, help="the workers' log (connection errors while a node is dead)"
    )
    args = parser.parse_args(argv)

    runs: list[ChaosFigures] = []
    with worker_logs(args.log), cluster() as (urls, directory):
        for run in range(args.runs):
            figures = run_galera_chaos(
                urls,
                directory,
                messages=args.messages,
                kills=args.kills,
                down_s=args.down,
                handler_ms=args.handler_ms,
                seed=args.seed + run,
            )
            runs.append(figures)
            print(
                f"run {run + 1}: {figures.messages} messages, {figures.kills} kills "
                f"(nodes {figures.killed_nodes}, rejoined by {figures.rejoined_by} in "
                f"{figures.rejoin_s} s), {figures.seconds} s; lost {figures.lost}, twice "
                f"{figures.twice} (per node); worker {figures.worker}",
                flush=True,
            )
    totals = {
        "runs": len(runs),
        "messages": sum(r.messages for r in runs),
        "kills": sum(r.kills for r in runs),
        "lost": sum(sum(r.lost) for r in runs),
        "twice": sum(sum(r.twice) for r in runs),
        "exactly_once_runs": sum(r.exactly_once for r in runs),
        "rejoined_by_ist": sum(r.rejoined_by.count("IST") for r in runs),
        "rejoin_s_median": statistics.median(s for r in runs for s in r.rejoin_s)
        if any(r.rejoin_s for r in runs)
        else None,
        "run_s_median": statistics.median(r.seconds for r in runs) if runs else None,
        "load_average": os.getloadavg(),
        "machine": "shared 2-core VM (noisy), 3 Galera nodes on loopback",
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print("totals:", json.dumps(totals))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"totals": totals, "runs": [r.as_dict() for r in runs]}, indent=2) + "\n"
    )
    return 0 if totals["exactly_once_runs"] == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
