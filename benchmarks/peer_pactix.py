"""sa-inbox against its closest Python peer, pactix 0.2.0: receive throughput, one message
per transaction, on PostgreSQL (asyncpg) and MariaDB (aiomysql), in one run.

A one-off peer comparison, not part of ``sa-inbox bench`` nor of the test run: pactix is
async only and needs Python >= 3.12, so this runs in its own virtualenv::

    python3.12 -m venv /tmp/peer && /tmp/peer/bin/pip install pactix==0.2.0 \\
        -e '.[asyncpg,aiomysql,postgresql]'
    /tmp/peer/bin/python benchmarks/peer_pactix.py --messages 2000 --repeat 5 \\
        --postgresql-url postgresql://… --mysql-url mysql://…

(the URLs default to ``SA_INBOX_TEST_POSTGRESQL_URL`` / ``SA_INBOX_TEST_MYSQL_URL``; their
driver is swapped for the async one.) Three ways to take in a message, each its own
transaction, ``async with engine.begin() as conn`` (a pool checkout, the statement, the
commit), on the same engine:

* ``pactix``: ``await pactix.InboxStore(PactixConfig()).save_received(conn, source,
  MessageEnvelope(MessageMetadata(message_id, event_type), payload))``, on the table of
  ``pactix.db.tables`` (created with its ``metadata``, as its migrations define it);
* ``sa-inbox receive``: ``await AsyncInboxStore(store).receive(conn, message_id, payload,
  consumer_name=source, message_type=event_type)``: the same job, the whole message stored
  for a worker to process later;
* ``sa-inbox claim``: ``await AsyncInbox(inbox).claim(conn, message_id, source)``: the
  processed-messages key only (what an idempotent consumer that applies the message in the
  same transaction stores).

With ``--compiled-receive``, a fourth way, ``sa-inbox receive (compiled)``, receives on a
store of its own table whose receive statement runs through ``Connection.execute()`` (the
compiled-statement path every receive took before the driver-SQL receive, see
``sa_inbox/dialects/driver_sql.py``): the before/after of that change, in the same run.

The ways alternate message by message (the order rotating each round) on both backends in
turn, so each sees the same moments of a shared machine. A run is ``--messages`` messages
per way after ``--warmup`` untimed ones; per run and way: messages per second (messages /
the sum of their transaction times: a serial consumer's receive rate) and the median
latency. The figures are medians over ``--repeat`` runs (runs of the two backends
interleaved); the ratios (sa-inbox / pactix throughput) are computed per run, then their
median. Every run checks each table holds exactly the messages sent. ``/proc/loadavg`` is
sampled every 2 s during the run. Prints a table; writes
``benchmarks/results/peer_pactix.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pactix import InboxStore as PactixInboxStore
from pactix import MessageEnvelope, MessageMetadata, PactixConfig
from pactix.db.tables import inbox_message as PACTIX_TABLE
from rich.console import Console
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from benchmarks.loadavg import LoadSampler, read_loadavg
from sa_inbox import Inbox, InboxStore
from sa_inbox.asyncio import AsyncInbox, AsyncInboxStore
from sa_inbox.claim import PreparedInsert
from sa_inbox.store.store import receive_insert

SOURCE = "billing"
EVENT_TYPE = "payment.captured"
WAYS: tuple[str, ...] = ("pactix", "sa-inbox receive", "sa-inbox claim")
COMPILED = "sa-inbox receive (compiled)"
DRIVERS = {"postgresql": "postgresql+asyncpg", "mariadb": "mysql+aiomysql"}
DEFAULT_OUT = Path(__file__).parent / "results" / "peer_pactix.json"

METADATA = sa.MetaData()
STORE = AsyncInboxStore(InboxStore(METADATA, table_name="peer_sa_inbox_store"))
CLAIMS = AsyncInbox(Inbox(METADATA, table_name="peer_sa_inbox_claims"))
PACTIX = PactixInboxStore(PactixConfig())
# The same store on its own table, its receive statement kept on Connection.execute(): a
# PreparedInsert without row_keys gives single() the statement itself (private attribute,
# benchmark only).
STORE_COMPILED = AsyncInboxStore(InboxStore(METADATA, table_name="peer_sa_inbox_compiled"))
STORE_COMPILED.sync_store._insert = PreparedInsert(STORE_COMPILED.table, build=receive_insert)


def payload(i: int) -> dict[str, Any]:
    """The same small JSON body for every way."""
    return {"order": f"o-{i:07d}", "amount": i % 100, "currency": "EUR"}


async def pactix_receive(conn: AsyncConnection, message_id: str, body: Any) -> None:
    envelope = MessageEnvelope(MessageMetadata(message_id=message_id, event_type=EVENT_TYPE), body)
    outcome = await PACTIX.save_received(conn, SOURCE, envelope)
    assert outcome.inserted


async def sa_inbox_receive(conn: AsyncConnection, message_id: str, body: Any) -> None:
    new = await STORE.receive(conn, message_id, body, consumer_name=SOURCE, message_type=EVENT_TYPE)
    assert new


async def sa_inbox_receive_compiled(conn: AsyncConnection, message_id: str, body: Any) -> None:
    new = await STORE_COMPILED.receive(
        conn, message_id, body, consumer_name=SOURCE, message_type=EVENT_TYPE
    )
    assert new


async def sa_inbox_claim(conn: AsyncConnection, message_id: str, body: Any) -> None:
    assert await CLAIMS.claim(conn, message_id, SOURCE)


RECEIVERS: dict[str, Callable[[AsyncConnection, str, Any], Awaitable[None]]] = {
    "pactix": pactix_receive,
    "sa-inbox receive": sa_inbox_receive,
    "sa-inbox claim": sa_inbox_claim,
    COMPILED: sa_inbox_receive_compiled,
}
TABLES = {
    "pactix": PACTIX_TABLE,
    "sa-inbox receive": STORE.table,
    "sa-inbox claim": CLAIMS.table,
    COMPILED: STORE_COMPILED.table,
}


def async_url(url: str, backend: str) -> str:
    return sa.make_url(url).set(drivername=DRIVERS[backend]).render_as_string(hide_password=False)


async def reset(engine: AsyncEngine) -> None:
    """Drop and create the three tables (pactix's from its own metadata)."""
    async with engine.begin() as conn:
        for table in TABLES.values():
            await conn.run_sync(table.drop, checkfirst=True)
            await conn.run_sync(table.create)


async def drop(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        for table in TABLES.values():
            await conn.run_sync(table.drop, checkfirst=True)


async def one_run(engine: AsyncEngine, messages: int, warmup: int) -> dict[str, Any]:
    """``warmup`` + ``messages`` messages per way, alternating; each way's figures."""
    await reset(engine)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    prefix = uuid.uuid4().hex[:8]
    for i in range(-warmup, messages):
        shift = i % len(WAYS)
        for way in WAYS[shift:] + WAYS[:shift]:  # rotate who goes first
            message_id = f"{prefix}-{i + warmup:07d}"
            t0 = time.perf_counter()
            async with engine.begin() as conn:
                await RECEIVERS[way](conn, message_id, payload(i))
            elapsed = time.perf_counter() - t0
            if i >= 0:
                times[way].append(elapsed)
    async with engine.connect() as conn:
        rows = {
            way: (await conn.execute(sa.select(sa.func.count()).select_from(t))).scalar_one()
            for way, t in TABLES.items()
            if way in WAYS
        }
    if set(rows.values()) != {messages + warmup}:
        raise SystemExit(f"wrong state: rows {rows}, expected {messages + warmup} each")
    return {
        way: {
            "per_second": messages / sum(times[way]),
            "median_us": statistics.median(times[way]) * 1e6,
            "p95_us": sorted(times[way])[int(0.95 * (len(times[way]) - 1))] * 1e6,
        }
        for way in WAYS
    }


async def server_version(engine: AsyncEngine) -> str:
    async with engine.connect() as conn:
        return str((await conn.exec_driver_sql("SELECT version()")).scalar_one()).split(" on ")[0]


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over runs per way, and the per-run ratios over pactix, with their median."""
    out: dict[str, Any] = {}
    for way in WAYS:
        out[way] = {
            key: statistics.median(r[way][key] for r in runs)
            for key in ("per_second", "median_us", "p95_us")
        }
        ratios = [r[way]["per_second"] / r["pactix"]["per_second"] for r in runs]
        out[way]["x_pactix"] = statistics.median(ratios)
        out[way]["x_pactix_min"] = min(ratios)
        out[way]["x_pactix_max"] = max(ratios)
    return out


def table(results: dict[str, Any]) -> Table:
    out = Table(
        "backend",
        "way",
        "msg/s (median)",
        "median µs",
        "p95 µs",
        "x pactix throughput (min-max)",
        title=f"receive, one message per transaction: median of {results['repeat']} runs",
    )
    for backend, figures in results["summary"].items():
        for way in WAYS:
            f = figures[way]
            out.add_row(
                backend,
                way,
                f"{f['per_second']:,.0f}",
                f"{f['median_us']:.0f}",
                f"{f['p95_us']:.0f}",
                f"{f['x_pactix']:.2f} ({f['x_pactix_min']:.2f}-{f['x_pactix_max']:.2f})",
            )
    load = results["loadavg"]
    out.caption = (
        f"load average during the run: median {load['median_1min']:.2f}, "
        f"max {load['max_1min']:.2f} (1-min, sampled every 2 s; {load['cpus']} CPUs)"
    )
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    urls = {"postgresql": args.postgresql_url, "mariadb": args.mysql_url}
    missing = [name for name, url in urls.items() if not url]
    if missing:
        raise SystemExit(f"no URL for {', '.join(missing)} (--postgresql-url / --mysql-url)")
    engines = {
        backend: create_async_engine(async_url(url, backend), pool_size=2, max_overflow=2)
        for backend, url in urls.items()
    }
    started = datetime.datetime.now(datetime.UTC)
    runs: dict[str, list[dict[str, Any]]] = {backend: [] for backend in engines}
    try:
        servers = {b: await server_version(e) for b, e in engines.items()}
        with LoadSampler() as load:
            for repeat in range(args.repeat):
                for backend, engine in engines.items():  # the backends interleaved
                    runs[backend].append(await one_run(engine, args.messages, args.warmup))
                    print(f"run {repeat + 1}/{args.repeat} {backend} done", flush=True)
        for engine in engines.values():
            await drop(engine)
    finally:
        for engine in engines.values():
            await engine.dispose()
    return {
        "scenario": "peer_pactix",
        "label": "sa-inbox vs pactix 0.2.0: receive, one message per transaction",
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "messages": args.messages,
        "warmup": args.warmup,
        "repeat": args.repeat,
        "drivers": {b: DRIVERS[b] for b in engines},
        "servers": servers,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "versions": {
                name: importlib.metadata.version(name)
                for name in ("pactix", "sa-inbox", "sqlalchemy", "asyncpg", "aiomysql")
            },
        },
        "loadavg": {
            "cpus": os.cpu_count(),
            "samples_1min": load.samples,
            "median_1min": statistics.median(load.samples),
            "max_1min": max(load.samples),
            "at_end": read_loadavg(),
        },
        "runs": runs,
        "summary": {backend: summarise(r) for backend, r in runs.items()},
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="timed messages per way")
    parser.add_argument("--warmup", type=int, default=20, help="untimed messages per way")
    parser.add_argument("--repeat", type=int, default=5, help="runs per backend (>= 3)")
    parser.add_argument("--postgresql-url", default=os.environ.get("SA_INBOX_TEST_POSTGRESQL_URL"))
    parser.add_argument("--mysql-url", default=os.environ.get("SA_INBOX_TEST_MYSQL_URL"))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--compiled-receive",
        action="store_true",
        help="also the receive on Connection.execute() (the compiled path), as a fourth way",
    )
    args = parser.parse_args()
    if args.repeat < 3:
        parser.error("--repeat must be at least 3 (the figures are medians)")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.compiled_receive:
        WAYS = (*WAYS, COMPILED)
    results = asyncio.run(main(arguments))
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(results, indent=2) + "\n")
    Console(width=160).print(table(results))
    print(f"wrote {arguments.out}")
