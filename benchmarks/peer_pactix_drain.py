"""The drain against pactix 0.2.0: ``sa-inbox bench store_drain`` with pactix as a
contender, on PostgreSQL and MariaDB, at 1 and 4 worker processes, in one run.

pactix needs Python >= 3.12, so this runs from its own virtualenv::

    python3.12 -m venv /tmp/peer && /tmp/peer/bin/pip install pactix==0.2.0 \\
        -e '.[asyncpg,aiomysql,postgresql,mysql]'
    PYTHONPATH=. /tmp/peer/bin/python benchmarks/peer_pactix_drain.py \\
        --postgresql-messages 20000 --mysql-messages 10000 --repeat 3

from the repository root (the URLs are ``SA_INBOX_TEST_POSTGRESQL_URL`` /
``SA_INBOX_TEST_MYSQL_URL``). Each backend runs the scenario
:mod:`sa_inbox.bench.store_drain` (its docstring says what runs and what is checked after
each drain) with ``levels=[1, 4]`` and :mod:`benchmarks.pactix_peer` as its peer
(:class:`benchmarks.drain_peers.WithPeers`) (the
worker processes import it, hence ``PYTHONPATH``); ``/proc/loadavg`` is sampled every 2 s.
Writes ``<out>/store_drain-<backend>.json`` (``--out``, default ``benchmarks/results``: the
scenario's document, with ``loadavg`` added) and prints the scenario's tables; ``--handlers
noop`` runs only the no-op cells (the ones with pactix).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
from pathlib import Path

from rich.console import Console

from benchmarks import pactix_peer
from benchmarks.drain_peers import WithPeers, load_peers
from sa_inbox.bench.runner import BenchConfig, make_progress, run_scenario

OUT = Path(__file__).parent / "results"


def load_samples(samples: list[float], stop: threading.Event) -> None:
    while True:
        samples.append(float(Path("/proc/loadavg").read_text().split()[0]))
        if stop.wait(2.0):
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgresql-messages", type=int, default=20000)
    parser.add_argument("--mysql-messages", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", default="mysql,postgresql")
    parser.add_argument(
        "--handlers", default="", help="a subset of the scenario's handlers (noop,ledger)"
    )
    parser.add_argument(
        "--levels", default="1,4", help="worker-process counts to run (default 1,4)"
    )
    parser.add_argument(
        "--out", type=Path, default=OUT, help="folder of the JSON (benchmarks/results)"
    )
    args = parser.parse_args()
    options: dict[str, object] = {"levels": [int(n) for n in args.levels.split(",")]}
    scenario = WithPeers(load_peers([pactix_peer.__name__]))
    if args.handlers:
        options["handlers"] = args.handlers.split(",")
    console = Console(width=200)
    for backend in args.backends.split(","):
        url = os.environ[f"SA_INBOX_TEST_{backend.upper()}_URL"]
        if not pactix_peer.available(url):
            raise SystemExit("pactix is not importable here: run from its Python 3.12 venv")
        config = BenchConfig(
            url=url,
            messages=getattr(args, f"{backend}_messages"),
            workers=4,
            repeat=args.repeat,
            out=args.out,
            options=options,
        )
        samples: list[float] = []
        stop = threading.Event()
        sampler = threading.Thread(target=load_samples, args=(samples, stop), daemon=True)
        sampler.start()
        try:
            with make_progress(console) as progress:
                path = run_scenario(scenario, config, console=console, progress=progress)
        finally:
            stop.set()
            sampler.join()
        document = json.loads(path.read_text())
        document["loadavg"] = {
            "cpus": os.cpu_count(),
            "samples_1min": samples,
            "median_1min": statistics.median(samples),
            "max_1min": max(samples),
        }
        path.write_text(json.dumps(document, indent=2) + "\n")
        console.print(
            f"{backend}: load median {statistics.median(samples):.2f}, max {max(samples):.2f}"
        )


if __name__ == "__main__":
    main()
