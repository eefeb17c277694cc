"""sa-inbox against its closest Python peer, pactix 0.2.0: receive throughput, one message
per transaction, on PostgreSQL (asyncpg) and MariaDB (aiomysql), in one run.

A one-off peer comparison, not part of ``sa-inbox bench`` nor of the test run: pactix is
async only and needs Python >= 3.12, so this runs in its own virtualenv::

    python3.12 -m venv /tmp/peer && /tmp/peer/bin/pip install pactix==0.2.0 \\
        -e '.[asyncpg,aiomysql,postgresql]'
    /tmp/peer/bin/python benchmarks/peer_pactix.py --messages 2000 --repeat 5 \\
        --postgresql-url postgresql://… --mysql-url mysql://…

(the URLs default to ``SA_INBOX_TEST_POSTGRESQL_URL`` / ``SA_INBOX_TEST_MYSQL_URL``; their
driver is swapped for the async one.) Five ways to take in a message, each its own
transaction, as ``async with engine.begin() as conn`` runs it (a pool checkout, the
statement, the commit, the connection's return), on the same engine:

* ``pactix``: ``await pactix.InboxStore(PactixConfig()).save_received(conn, source,
  MessageEnvelope(MessageMetadata(message_id, event_type), payload))``, on the table of
  ``pactix.db.tables`` (created with its ``metadata``, as its migrations define it);
* ``sa-inbox receive``: ``await AsyncInboxStore(store).receive(conn, message_id, payload,
  consumer_name=source, message_type=event_type)``: the same job, the whole message stored
  for a worker to process later;
* ``sa-inbox claim``: ``await AsyncInbox(inbox).claim(conn, message_id, source)``: the
  processed-messages key only (what an idempotent consumer that applies the message in the
  same transaction stores);
* ``driver floor``: sa-inbox's receive row and driver SQL text sent on the DBAPI cursor
  (through ``run_sync``, as the async layer runs), without SQLAlchemy's statement execution
  nor sa-inbox's claim path: the ceiling of any library sending this statement in this
  transaction;
* ``exec_driver_sql floor``: the same text and parameters through SQLAlchemy's
  ``Connection.exec_driver_sql`` (what sa-inbox's receive sends them through): the driver
  floor plus SQLAlchemy's execution of one statement.

Each transaction's parts are timed apart (checkout, statements, commit, return), and on
MariaDB the statements the server counted per message, per way (``SHOW GLOBAL STATUS``).

With ``--compiled-receive``, a sixth way, ``sa-inbox receive (compiled)``, receives on a
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
from sa_inbox.dialects.driver_sql import DriverSQL
from sa_inbox.store.store import receive_insert

SOURCE = "billing"
EVENT_TYPE = "payment.captured"
FLOOR = "driver floor"
SA_FLOOR = "exec_driver_sql floor"
WAYS: tuple[str, ...] = ("pactix", "sa-inbox receive", "sa-inbox claim", SA_FLOOR, FLOOR)
COMPILED = "sa-inbox receive (compiled)"
#: The parts of one transaction, timed apart: the pool checkout and ``BEGIN`` (no round trip
#: on these drivers), the way's own statements, the ``COMMIT``, the connection's return to
#: the pool (its reset: a ``ROLLBACK`` sent by the driver).
PHASES = ("checkout", "statements", "commit", "return")
#: MariaDB's server counters read around each way's statement count (``SHOW GLOBAL STATUS``,
#: MariaDB manual, "Server Status Variables": ``Questions`` counts the statements clients
#: send; ``Com_*`` one kind each).
COUNTERS = ("Questions", "Com_insert", "Com_select", "Com_commit", "Com_rollback")
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
# The floor: sa-inbox's receive row and driver text on the DBAPI cursor, with neither
# SQLAlchemy's statement execution nor sa-inbox's claim path (private members, benchmark
# only).
STORE_FLOOR = InboxStore(METADATA, table_name="peer_driver_floor")
STORE_SA_FLOOR = InboxStore(METADATA, table_name="peer_sa_floor")


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


async def driver_floor(conn: AsyncConnection, message_id: str, body: Any) -> None:
    await conn.run_sync(_send_on_cursor, message_id, body)


async def exec_driver_sql_floor(conn: AsyncConnection, message_id: str, body: Any) -> None:
    await conn.run_sync(_send_driver_sql, message_id, body)


def _driver_sql(
    store: InboxStore, sync_conn: sa.Connection, message_id: str, body: Any
) -> tuple[str, Any]:
    """The receive's driver text and parameters for one message, as sa-inbox builds them."""
    row = store._row(message_id, body, None, EVENT_TYPE, SOURCE, None)
    _, driver = store._insert.single(sync_conn)
    if not isinstance(driver, DriverSQL):
        raise SystemExit(f"no driver SQL for the receive on {sync_conn.dialect.driver}")
    values = driver.values(row)
    if driver.names is None:
        return driver.sql, tuple(values)
    return driver.sql, dict(zip(driver.names, values, strict=True))


def _send_on_cursor(sync_conn: sa.Connection, message_id: str, body: Any) -> None:
    sql, params = _driver_sql(STORE_FLOOR, sync_conn, message_id, body)
    cursor = sync_conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, params)
        assert cursor.rowcount == 1
    finally:
        cursor.close()


def _send_driver_sql(sync_conn: sa.Connection, message_id: str, body: Any) -> None:
    sql, params = _driver_sql(STORE_SA_FLOOR, sync_conn, message_id, body)
    result = sync_conn.exec_driver_sql(sql, params, execution_options={"preserve_rowcount": True})
    assert result.rowcount == 1


RECEIVERS: dict[str, Callable[[AsyncConnection, str, Any], Awaitable[None]]] = {
    "pactix": pactix_receive,
    "sa-inbox receive": sa_inbox_receive,
    "sa-inbox claim": sa_inbox_claim,
    COMPILED: sa_inbox_receive_compiled,
    SA_FLOOR: exec_driver_sql_floor,
    FLOOR: driver_floor,
}
TABLES = {
    "pactix": PACTIX_TABLE,
    "sa-inbox receive": STORE.table,
    "sa-inbox claim": CLAIMS.table,
    COMPILED: STORE_COMPILED.table,
    SA_FLOOR: STORE_SA_FLOOR.table,
    FLOOR: STORE_FLOOR.table,
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


async def timed(
    engine: AsyncEngine,
    receive: Callable[[AsyncConnection, str, Any], Awaitable[None]],
    message_id: str,
    body: Any,
) -> dict[str, float]:
    """One message in its own transaction, as ``engine.begin()`` runs it, each phase timed
    (seconds): checkout, statements, commit, return."""
    t0 = time.perf_counter()
    conn = await engine.connect().start()
    try:
        trans = await conn.begin()
        t1 = time.perf_counter()
        await receive(conn, message_id, body)
        t2 = time.perf_counter()
        await trans.commit()
        t3 = time.perf_counter()
    finally:
        await conn.close()
    t4 = time.perf_counter()
    return dict(zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True))


async def one_run(engine: AsyncEngine, messages: int, warmup: int) -> dict[str, Any]:
    """``warmup`` + ``messages`` messages per way, alternating; each way's figures."""
    await reset(engine)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    phases: dict[str, dict[str, list[float]]] = {w: {p: [] for p in PHASES} for w in WAYS}
    prefix = uuid.uuid4().hex[:8]
    for i in range(-warmup, messages):
        shift = i % len(WAYS)
        for way in WAYS[shift:] + WAYS[:shift]:  # rotate who goes first
            message_id = f"{prefix}-{i + warmup:07d}"
            parts = await timed(engine, RECEIVERS[way], message_id, payload(i))
            if i >= 0:
                times[way].append(sum(parts.values()))
                for phase, seconds in parts.items():
                    phases[way][phase].append(seconds)
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
            "phases_median_us": {
                phase: statistics.median(values) * 1e6 for phase, values in phases[way].items()
            },
        }
        for way in WAYS
    }


async def statement_counts(engine: AsyncEngine, messages: int) -> dict[str, dict[str, float]]:
    """Per way, the statements the server counted per message (MariaDB's global status
    counters, read before and after ``messages`` messages of that way alone; the reads' own
    share, measured with no message between them, taken off)."""

    async def counters() -> dict[str, int]:
        async with engine.connect() as conn:
            result = await conn.exec_driver_sql("SHOW GLOBAL STATUS")
            return {name: int(value) for name, value in result if name in COUNTERS}

    async def between(way: str | None) -> dict[str, int]:
        before = await counters()
        for i in range(messages if way else 0):
            async with engine.begin() as conn:
                await RECEIVERS[way](conn, f"count-{uuid.uuid4().hex}", payload(i))  # type: ignore[index]
        after = await counters()
        return {name: after[name] - before[name] for name in COUNTERS}

    await reset(engine)
    idle = await between(None)
    out: dict[str, dict[str, float]] = {}
    for way in WAYS:
        sent = await between(way)
        out[way] = {name: (sent[name] - idle[name]) / messages for name in COUNTERS}
    return out


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
        out[way]["phases_median_us"] = {
            phase: statistics.median(r[way]["phases_median_us"][phase] for r in runs)
            for phase in PHASES
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


def phase_table(results: dict[str, Any]) -> Table:
    """Each way's transaction in parts (median µs), and on MariaDB the statements the server
    counted per message."""
    out = Table(
        "backend",
        "way",
        *(f"{phase} µs" for phase in PHASES),
        "statements / message (MariaDB: Questions, insert, select, commit, rollback)",
        title="one transaction in parts: median µs (median over runs)",
    )
    for backend, figures in results["summary"].items():
        counted = results["statements_per_message"].get(backend, {})
        for way in WAYS:
            parts = figures[way]["phases_median_us"]
            count = counted.get(way)
            out.add_row(
                backend,
                way,
                *(f"{parts[phase]:.0f}" for phase in PHASES),
                "-" if count is None else " / ".join(f"{count[c]:.2f}" for c in COUNTERS),
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
            counts = {
                backend: await statement_counts(engine, args.count_messages)
                for backend, engine in engines.items()
                if engine.dialect.name == "mysql"
            }
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
        "statements_per_message": counts,
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
        "--count-messages",
        type=int,
        default=200,
        help="messages per way for MariaDB's statement counts",
    )
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
    Console(width=160).print(phase_table(results))
    print(f"wrote {arguments.out}")
