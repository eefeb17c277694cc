"""Index hotspots: message-id key formats and primary-key column orders under concurrent writers.

For every key format of :data:`~sa_inbox.bench.keys.KEY_FORMATS` and both primary-key column
orders, W worker processes each claim their share of ``messages`` ids, one claim per
transaction, two consumers sharing the table. Figures per cell: claims per second, the
primary key's size, leaf pages and leaf density after the run, and the waits seen meanwhile
(PostgreSQL: ``pgstatindex()``, manual F.33 "pgstattuple", and ``pg_stat_activity``;
MariaDB: ``INNODB_BUFFER_PAGE``, ``INNODB_METRICS`` and ``PROCESSLIST``; SQLite: ``dbstat``).

.. seealso:: ``docs/discussions/benchmarks.md``, "index_hotspots".
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from rich.progress import Progress
from rich.table import Table

from ..claim import Inbox
from ..schema import NOW, TIMESTAMP_TZ, key_type
from .db import make_engine
from .keys import KEY_FORMATS, key_factory
from .runner import BenchConfig
from .workers import BenchError, WorkerPool, levels, summarise

__all__ = ["PK_ORDERS", "hot_table", "insert_keys", "run", "table"]

TABLE = "bench_hot"
PK_NAME = f"pk_{TABLE}"
#: Primary-key column orders compared.
PK_ORDERS: dict[str, tuple[str, str]] = {
    "message_id_first": ("message_id", "consumer_name"),
    "consumer_first": ("consumer_name", "message_id"),
}
CONSUMERS = ("consumer-0", "consumer-1")
#: Seconds between two samples of the waits.
SAMPLE_INTERVAL = 0.02
DEFAULT_MESSAGES = 2000
#: Short names of the PK orders for the printed table.
PK_LABELS = {
    "message_id_first": "(message_id, consumer)",
    "consumer_first": "(consumer, message_id)",
}
MYSQL_COUNTERS = (
    "index_page_splits",
    "lock_row_lock_waits",
    "lock_row_lock_time",
    "buffer_pool_wait_free",
)


def hot_table(pk_order: str) -> sa.Table:
    """The inbox table with the primary-key column order ``pk_order`` (a key of
    :data:`PK_ORDERS`), on a fresh MetaData."""
    metadata = sa.MetaData()
    return sa.Table(
        TABLE,
        metadata,
        sa.Column("message_id", key_type(255), nullable=False),
        sa.Column("consumer_name", key_type(255), nullable=False),
        sa.Column("received_at", TIMESTAMP_TZ, nullable=False, server_default=NOW),
        sa.Column("message_type", sa.String(255)),
        sa.Column("correlation_id", sa.String(255)),
        sa.Column("payload_hash", sa.LargeBinary(64)),
        sa.PrimaryKeyConstraint(*PK_ORDERS[pk_order], name=PK_NAME),
        sa.Index(f"ix_{TABLE}_received_at", "received_at"),
    )


def insert_keys(
    params: Mapping[str, Any], worker: int, workers: int, go: Callable[[], float]
) -> dict[str, Any]:
    """One writer: claim its share of the cell's ids, one claim per transaction."""
    engine = make_engine(params["url"])
    inbox = Inbox.for_table(hot_table(params["pk_order"]))
    make_key = key_factory(params["key_format"])
    sequence = range(worker, params["messages"], workers)
    latencies: list[float] = []
    claimed = 0
    try:
        with engine.connect() as conn:
            with conn.begin():  # first claim: statement cache, backend check
                inbox.claim(conn, f"warmup-{worker}", "warmup")
            started = go()
            for n in sequence:
                t0 = time.perf_counter()
                with conn.begin():
                    claimed += inbox.claim(conn, make_key(n), CONSUMERS[n % 2])
                latencies.append(time.perf_counter() - t0)
            finished = time.perf_counter()
    finally:
        engine.dispose()
    return {"started": started, "finished": finished, "latencies": latencies, "claimed": claimed}


class WaitSampler:
    """Samples the database's waits in a thread while the writers run.

    :param engine: an engine on the database under test (its own connection is excluded).
    """

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.samples = 0
        self.waits: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="wait-sampler", daemon=True)
        self._query = _WAIT_QUERIES.get(engine.dialect.name)

    def __enter__(self) -> WaitSampler:
        if self._query is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        assert self._query is not None
        with self.engine.connect() as conn:
            while not self._stop.is_set():
                for name, count in conn.execute(sa.text(self._query)):
                    self.waits[str(name)] += int(count)
                conn.rollback()
                self.samples += 1
                self._stop.wait(SAMPLE_INTERVAL)

    def to_json(self) -> dict[str, Any]:
        """Samples taken and, per wait, the sessions seen in it (summed over samples)."""
        return {"samples": self.samples, "waits": dict(self.waits.most_common())}


_WAIT_QUERIES = {
    "postgresql": "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU (no wait)') "
    "AS wait, count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND backend_type = 'client backend' AND state = 'active' AND pid <> pg_backend_pid() "
    "GROUP BY 1",
    "mysql": "SELECT coalesce(nullif(state, ''), 'executing') AS wait, count(*) "
    "FROM information_schema.PROCESSLIST WHERE command = 'Query' "
    "AND id <> connection_id() AND db = database() GROUP BY 1",
}
_WAIT_QUERIES["mariadb"] = _WAIT_QUERIES["mysql"]


# -- index statistics, per backend ------------------------------------------------------


def _postgresql_stats(conn: sa.Connection) -> dict[str, Any]:
    conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    row = conn.execute(
        sa.text(
            "SELECT index_size, leaf_pages, avg_leaf_density, leaf_fragmentation "
            "FROM pgstatindex(:name)"
        ),
        {"name": PK_NAME},
    ).one()
    table_bytes = conn.execute(sa.text("SELECT pg_relation_size(:t)"), {"t": TABLE}).scalar_one()
    return {
        "index_bytes": int(row.index_size),
        "leaf_pages": int(row.leaf_pages),
        "leaf_density_pct": float(row.avg_leaf_density),
        "leaf_fragmentation_pct": float(row.leaf_fragmentation),
        "table_bytes": int(table_bytes),
    }


def _mysql_counters(conn: sa.Connection) -> dict[str, int]:
    query = sa.text(
        "SELECT name, count FROM information_schema.INNODB_METRICS WHERE name IN :names"
    ).bindparams(sa.bindparam("names", expanding=True))
    rows = conn.execute(query, {"names": list(MYSQL_COUNTERS)}).all()
    return {str(name): int(count) for name, count in rows}


def _mysql_enable_counters(conn: sa.Connection) -> None:
    for name in MYSQL_COUNTERS:
        conn.exec_driver_sql(f"SET GLOBAL innodb_monitor_enable = '{name}'")


def _mysql_stats(conn: sa.Connection) -> dict[str, Any]:
    """The clustered primary key's pages as the buffer pool holds them after the run.

    ``mysql.innodb_index_stats`` is read too (after ``ANALYZE TABLE``), but only for the
    allocated ``size``: MariaDB 10.11 reported ``n_leaf_pages = 1`` for primary keys of
    dozens of pages here, so pages and fill come from ``INNODB_BUFFER_PAGE`` (every page of
    a freshly written table is in the pool), over all levels of the tree (at 10,000 rows,
    one root above 40-70 leaves).
    """
    conn.exec_driver_sql(f"ANALYZE TABLE {TABLE}").all()
    allocated = conn.execute(
        sa.text(
            "SELECT stat_value FROM mysql.innodb_index_stats WHERE database_name = database() "
            "AND table_name = :t AND index_name = 'PRIMARY' AND stat_name = 'size'"
        ),
        {"t": TABLE},
    ).scalar()
    page_size = int(conn.exec_driver_sql("SELECT @@innodb_page_size").scalar_one())
    pages, data = conn.execute(
        sa.text(
            "SELECT count(*), coalesce(sum(data_size), 0) "
            "FROM information_schema.INNODB_BUFFER_PAGE "
            "WHERE table_name = concat('`', database(), '`.`', :t, '`') "
            "AND index_name = 'PRIMARY' AND page_type = 'INDEX'"
        ),
        {"t": TABLE},
    ).one()
    return {
        "index_bytes": int(pages) * page_size,
        "leaf_pages": None,
        "pk_pages": int(pages),
        "leaf_density_pct": 100.0 * int(data) / (int(pages) * page_size) if pages else None,
        "allocated_bytes": int(allocated or 0) * page_size,
        "note": "clustered index (the leaves hold the rows); pages and fill over all levels",
    }


def _sqlite_stats(conn: sa.Connection) -> dict[str, Any]:
    name = conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
        "AND name LIKE 'sqlite_autoindex_%'",
        (TABLE,),
    ).scalar_one()
    size, unused, leaves = conn.exec_driver_sql(
        "SELECT sum(pgsize), sum(unused), sum(pagetype = 'leaf') FROM dbstat WHERE name = ?",
        (name,),
    ).one()
    table_bytes = conn.exec_driver_sql(
        "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = ?", (TABLE,)
    ).scalar_one()
    return {
        "index_bytes": int(size),
        "leaf_pages": int(leaves),
        "leaf_density_pct": 100.0 * (int(size) - int(unused)) / int(size) if size else None,
        "table_bytes": int(table_bytes),
    }


_STATS: dict[str, Callable[[sa.Connection], dict[str, Any]]] = {
    "postgresql": _postgresql_stats,
    "mysql": _mysql_stats,
    "mariadb": _mysql_stats,
    "sqlite": _sqlite_stats,
}


def index_stats(engine: sa.Engine) -> dict[str, Any]:
    """Size and fill of the primary key of :data:`TABLE`, by the backend's own statistics."""
    stats = _STATS.get(engine.dialect.name)
    if stats is None:
        return {"note": f"no index statistics for {engine.dialect.name}"}
    with engine.begin() as conn:
        return stats(conn)


# -- the scenario ----------------------------------------------------------------------


def _reset(engine: sa.Engine, table: sa.Table) -> None:
    table.metadata.drop_all(engine, checkfirst=True)
    table.metadata.create_all(engine)


def _rows(engine: sa.Engine, table: sa.Table) -> int:
    with engine.connect() as conn:
        query = (
            sa.select(sa.func.count()).select_from(table).where(table.c.consumer_name != "warmup")
        )
        return int(conn.execute(query).scalar_one())


def _cell(
    pool: WorkerPool,
    engine: sa.Engine,
    config: BenchConfig,
    messages: int,
    cell: tuple[int, int, str, str],
) -> dict[str, Any]:
    repeat, workers, key_format, pk_order = cell
    table = hot_table(pk_order)
    _reset(engine, table)
    mysql = engine.dialect.name in ("mysql", "mariadb")
    before: dict[str, int] = {}
    if mysql:
        with engine.begin() as conn:
            _mysql_enable_counters(conn)
            before = _mysql_counters(conn)
    params = {
        "url": config.url,
        "key_format": key_format,
        "pk_order": pk_order,
        "messages": messages,
    }
    with WaitSampler(engine) as sampler:
        results = pool.run(f"{__name__}:insert_keys", params, workers)
    rows = _rows(engine, table)
    claimed = sum(r["claimed"] for r in results)
    if rows != messages or claimed != messages:
        raise BenchError(f"{messages} fresh ids: {claimed} claimed, {rows} rows in {TABLE}")
    cell_result: dict[str, Any] = {
        "repeat": repeat,
        "workers": workers,
        "key_format": key_format,
        "pk_order": pk_order,
        "messages": messages,
        "rows": rows,
        **summarise(results, messages),
        "index": index_stats(engine),
        "waits": sampler.to_json(),
    }
    if mysql:
        with engine.begin() as conn:
            after = _mysql_counters(conn)
        cell_result["innodb_metrics"] = {k: after[k] - before.get(k, 0) for k in after}
    return cell_result


def run(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Every key format x primary-key order x concurrency level, ``repeat`` times."""
    messages = config.messages or DEFAULT_MESSAGES
    engine = make_engine(config.url)
    cells = [
        (repeat, workers, key_format, pk_order)
        for repeat in range(config.repeat)
        for workers in levels(config.workers)
        for pk_order in PK_ORDERS
        for key_format in KEY_FORMATS
    ]
    task = progress.add_task("index hotspots", total=len(cells))
    measured: list[dict[str, Any]] = []
    try:
        with WorkerPool(config.workers) as pool:
            for cell in cells:
                measured.append(_cell(pool, engine, config, messages, cell))
                progress.advance(task)
        hot_table("message_id_first").metadata.drop_all(engine, checkfirst=True)
    finally:
        engine.dispose()
    return {
        "workers_kind": "processes",
        "key_formats": {name: description for name, (_, description) in KEY_FORMATS.items()},
        "cells": measured,
        "summary": summary(measured),
    }


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summary(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over repeats per (workers, pk_order, key_format)."""
    keys: list[tuple[int, str, str]] = []
    for c in cells:
        key = (c["workers"], c["pk_order"], c["key_format"])
        if key not in keys:
            keys.append(key)
    rows = []
    for workers, pk_order, key_format in keys:
        group = [
            c
            for c in cells
            if (c["workers"], c["pk_order"], c["key_format"]) == (workers, pk_order, key_format)
        ]
        waits: Counter[str] = Counter()
        for c in group:
            waits.update(c["waits"]["waits"])
        row: dict[str, Any] = {
            "workers": workers,
            "pk_order": pk_order,
            "key_format": key_format,
            "repeats": len(group),
            "per_second": _median([c["per_second"] for c in group]),
            "latency_median_us": _median([c["latency_median_us"] for c in group]),
            "latency_p95_us": _median([c["latency_p95_us"] for c in group]),
            "index_bytes": _median([c["index"].get("index_bytes") for c in group]),
            "leaf_pages": _median([c["index"].get("leaf_pages") for c in group]),
            "leaf_density_pct": _median([c["index"].get("leaf_density_pct") for c in group]),
            "top_waits": dict(waits.most_common(4)),
        }
        if "innodb_metrics" in group[0]:
            for name in MYSQL_COUNTERS:
                row[name] = _median([c["innodb_metrics"].get(name) for c in group])
        rows.append(row)
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(results: Mapping[str, Any]) -> Table:
    """Per (workers, PK order, key format): claims/s, p95 latency, index size and fill."""
    out = Table(
        "workers", "PK order", "key", "claims/s", "p95 µs", "PK KiB", "leaf fill %", "top waits"
    )
    for row in results["summary"]:
        waits = ", ".join(f"{k} {v}" for k, v in list(row["top_waits"].items())[:2])
        index_kib = None if row["index_bytes"] is None else row["index_bytes"] / 1024
        out.add_row(
            str(row["workers"]),
            PK_LABELS.get(row["pk_order"], row["pk_order"]),
            row["key_format"],
            _fmt(row["per_second"], ".0f"),
            _fmt(row["latency_p95_us"], ".0f"),
            _fmt(index_kib, ".0f"),
            _fmt(row["leaf_density_pct"], ".1f"),
            waits or "-",
        )
    return out
