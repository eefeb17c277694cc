"""Database outages under every broker adapter: PostgreSQL and MariaDB SIGKILLed and
restarted while every adapter consumes at a steady rate.

Run from the repository root with the servers of ``scripts/servers.sh start DIR postgresql
mysql rabbitmq redis nats sqs`` (``source DIR/env.sh``)::

    PYTHONPATH=. python benchmarks/db_outage.py --server-dir DIR --rate 100 --outage 15 --outage 60

Each cell (:func:`tests.support.db_outage.run_outage`) runs every lane at once (pika,
aio-pika, Redis sync and asyncio, NATS, FastStream on RabbitMQ, Celery, SQS sync and
asyncio on moto; ``--lanes`` picks some), each on its own
queue or stream at ``--rate`` messages per second, kills the database after 1 s, restarts
it ``--outage`` seconds later, publishes 2 s more and waits for the drain; then counts per
lane: published, applied, lost, doubled, dead letters, retries, the largest delivery count,
the outage gate's WARNING / INFO lines, tracebacks, and the seconds from the restart to the
last message applied. Prints one line per lane and writes ``--out`` (JSON). Exits 1 if any
lane lost, doubled or dead-lettered a message.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

from tests.support.db_outage import LANES, LaneFigures, Outage, run_outage

OUT = Path(__file__).parent / "results" / "db_outage.json"
COLUMNS = (
    "database",
    "outage_seconds",
    "lane",
    "published",
    "applied",
    "lost",
    "doubled",
    "dead_letters",
    "retries",
    "max_delivery_count",
    "outage_warnings",
    "outage_infos",
    "tracebacks",
    "drain_seconds",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-dir", type=Path, required=True)
    parser.add_argument("--database", action="append", choices=("postgresql", "mysql"))
    parser.add_argument("--outage", action="append", type=float, help="seconds down")
    parser.add_argument("--rate", type=float, default=100.0, help="messages/s per lane")
    parser.add_argument("--lanes", default=",".join(LANES))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    logging.getLogger().handlers[0].setLevel(logging.ERROR)  # the lanes record at DEBUG
    figures: list[LaneFigures] = []
    started = time.monotonic()
    for outage in args.outage or [15.0, 60.0]:
        for database in args.database or ["postgresql", "mysql"]:
            settings = Outage(
                database,
                args.server_dir,
                lanes=tuple(args.lanes.split(",")),
                rate=args.rate,
                outage=outage,
            )
            cell = run_outage(settings)
            figures += cell
            for lane in cell:
                print(" ".join(f"{name}={getattr(lane, name)}" for name in COLUMNS), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "rate_per_lane": args.rate,
                "seconds": round(time.monotonic() - started, 1),
                "lanes": [asdict(f) for f in figures],
            },
            indent=2,
        )
        + "\n"
    )
    bad = [f for f in figures if f.lost or f.doubled or f.dead_letters]
    print(f"{len(figures)} lanes, {len(bad)} lost, doubled or dead-lettered a message")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
