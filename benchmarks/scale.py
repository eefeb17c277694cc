"""Scale: the claim and the monitoring at 10^6, 10^7 and 10^8 retained rows.

``python -m benchmarks.scale --url URL --rows 1000000 --rows 10000000 --claims 2000
--out benchmarks/results`` from the repository root (a scenario of
:mod:`sa_inbox.bench.runner`: it writes ``<out>/scale-<backend>.json``). For each size, in
increasing order, from an empty table each time:

1. **Fill** the standard processed-messages table (``bench_scale``, made by
   ``Inbox(metadata).table``: the primary key ``(message_id, consumer_name)`` and the
   ``received_at`` index) with ``rows`` rows made by the server: PostgreSQL ``INSERT …
   SELECT`` over ``generate_series`` in transactions of :data:`FILL_CHUNK` rows, the primary
   key and the index dropped before and built after (``ALTER TABLE … ADD CONSTRAINT``,
   ``CREATE INDEX``: the table's own DDL); MariaDB one ``INSERT … SELECT`` over the
   ``SEQUENCE`` engine into the empty table with ``unique_checks=0, foreign_key_checks=0``
   (InnoDB then builds each index by sorting; MariaDB knowledge base, "Sequence Storage
   Engine"); other backends ``executemany`` from Python. Row ``n`` (1..rows): id
   ``md5(n)`` as a UUID (36 characters, random key order as UUIDv4), consumer one of
   :data:`CONSUMERS` in turn, except :data:`RETIRED` every fifth row of the first fifth of
   the window (a consumer that stopped), ``received_at`` spread evenly over
   :data:`WINDOW` up to the fill's start. Then ``VACUUM ANALYZE`` / ``ANALYZE TABLE``, as
   autovacuum and InnoDB's statistics would leave a table that size, and an exact
   ``COUNT(*)`` checks the rows (timed: the exact count's cost).
2. **Sizes**: the table, its primary key and its ``received_at`` index (PostgreSQL
   ``pg_relation_size``; MariaDB ``mysql.innodb_index_stats`` pages), against the
   server's cache (``shared_buffers``; ``innodb_buffer_pool_size``).
3. **Claims**: ``claims`` transactions of each kind through ``Inbox.claim()``, one claim
   per transaction (commit included), in rounds of :data:`ROUND` claims per kind so that
   the kinds share the machine's load: ``new`` (fresh UUIDv4 ids, each must claim),
   ``dup_random`` (ids of random rows of the fill: a duplicate whose index page is
   anywhere), ``dup_recent`` (the ids the round's ``new`` claims just inserted: a
   redelivery soon after the first delivery). Latency median, p90, p99; the buffer cache
   hit ratio of the claims (PostgreSQL ``pg_statio_user_tables`` for the table and its
   indexes, flushed with ``pg_stat_force_next_flush()``; MariaDB
   ``Innodb_buffer_pool_read_requests`` / ``Innodb_buffer_pool_reads``, server-wide) and,
   for a server on this machine, the bytes its process read from the disk
   (``/proc/<pid>/io`` ``read_bytes``: a read from the OS page cache is a "read" for the
   server but not for the disk). Checked: every new claim claimed, every duplicate
   skipped, every new id in the table afterwards.
4. **Monitoring**: :func:`sa_inbox.stats.collect` as ``sa-inbox stats`` runs it (estimated)
   and with ``exact=True``, a Prometheus scrape of
   :class:`~sa_inbox.hooks.prometheus.InboxCollector` (``generate_latest``, no cache), and
   ``sa-inbox stats --json`` as a subprocess (wall time, interpreter start included; and
   ``sa-inbox --help`` for that start alone); the estimates against the exact figures.

The sizes measured so far are written to ``<out>/scale-<backend>.partial.json`` after each
one (removed when the run ends). A size whose fill would leave the database's disk under
``--min-free-gb`` (predicted from :data:`PEAK_BYTES_PER_ROW`, checked when the server's
data directory is on this machine) is refused before it starts. ``--keep`` leaves the
largest table in place, ``--reuse`` measures a kept table again without filling it (if it
holds the size's rows, plus at most 1 % more: the claims of the run that kept it).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import sqlalchemy as sa
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from sa_inbox.bench.db import make_engine
from sa_inbox.bench.runner import BenchConfig, make_progress, run_scenario
from sa_inbox.bench.workers import BenchError
from sa_inbox.claim import Inbox
from sa_inbox.cli._common import CannotRun
from sa_inbox.stats import InboxStats, collect

__all__ = [
    "CONSUMERS",
    "FILL_CHUNK",
    "KINDS",
    "RETIRED",
    "consumer_of",
    "label_for",
    "message_id",
    "run",
    "table",
]

TABLE = "bench_scale"
CONSUMERS = ("billing", "notifications", "shipping", "analytics")
#: A consumer that stopped a fifth into the window: every fifth row of the first fifth.
RETIRED = "legacy"
WINDOW = datetime.timedelta(days=7)
#: Rows per fill transaction on PostgreSQL.
FILL_CHUNK = 10_000_000
#: Rows per ``executemany`` on the other backends.
PY_CHUNK = 10_000
#: Claims of each kind per round.
ROUND = 200
KINDS = ("new", "dup_random", "dup_recent")
#: Repeats of the cheap monitoring reads (the exact ones run once).
MONITOR_REPEAT = 5
CLI_REPEAT = 3
#: Disk a fill needs at its peak, per row: the table and its indexes (about 200 bytes a
#: row, benchmarks/RESULTS.md "Growth") plus the sort of the largest index being built.
PEAK_BYTES_PER_ROW = 320
ROOT = Path(__file__).resolve().parents[1]


def message_id(n: int) -> str:
    """Row ``n``'s id: ``md5(n)`` as a UUID, as the server makes it."""
    h = hashlib.md5(str(n).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def consumer_of(n: int, rows: int) -> str:
    """Row ``n``'s consumer (``n`` from 1 to ``rows``)."""
    if n <= rows // 5 and n % 5 == 0:
        return RETIRED
    return CONSUMERS[n % len(CONSUMERS)]


_ARRAY = "ARRAY[" + ", ".join(f"'{c}'" for c in CONSUMERS) + "]"
#: Rows :lo..:hi of :rows, ``received_at`` from :start (row 0) to :start + 7 days.
PG_FILL = f"""
    INSERT INTO {TABLE} (message_id, consumer_name, received_at)
    SELECT md5(g::text)::uuid::text,
           CASE WHEN g <= CAST(:rows AS bigint) / 5 AND g % 5 = 0 THEN '{RETIRED}'
                ELSE ({_ARRAY})[g % {len(CONSUMERS)} + 1] END,
           CAST(:start AS timestamptz) + interval '{WINDOW.days} days'
               * (g::float8 / CAST(:rows AS float8))
    FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g"""
_ELT = ", ".join(f"'{c}'" for c in CONSUMERS)
#: Rows 1..{rows} (the SEQUENCE engine's table name carries the bound).
MARIADB_FILL = f"""
    INSERT INTO {TABLE} (message_id, consumer_name, received_at)
    SELECT INSERT(INSERT(INSERT(INSERT(MD5(seq), 21, 0, '-'), 17, 0, '-'), 13, 0, '-'), 9, 0, '-'),
           CASE WHEN seq <= :rows DIV 5 AND MOD(seq, 5) = 0 THEN '{RETIRED}'
                ELSE ELT(MOD(seq, {len(CONSUMERS)}) + 1, {_ELT}) END,
           CAST(:start AS DATETIME) + INTERVAL FLOOR(seq * {int(WINDOW.total_seconds())} / :rows)
               SECOND
    FROM seq_1_to_{{rows}}"""


def inbox_table() -> Inbox:
    return Inbox(sa.MetaData(), table_name=TABLE, consumers=False)


# -- fill -------------------------------------------------------------------------------


def _fill_start(engine: sa.Engine) -> Any:
    with engine.connect() as conn:
        now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
    return now - WINDOW


def _fill_postgresql(
    engine: sa.Engine, inbox: Inbox, rows: int, progress: Progress, task: Any
) -> None:
    t = inbox.table
    (index,) = t.indexes
    start = _fill_start(engine)
    with engine.begin() as conn:
        conn.execute(sa.schema.DropIndex(index))
        conn.execute(sa.schema.DropConstraint(t.primary_key))
    done = 0
    while done < rows:
        hi = min(rows, done + FILL_CHUNK)
        with engine.begin() as conn:
            params = {"rows": rows, "start": start, "lo": done + 1, "hi": hi}
            conn.execute(sa.text(PG_FILL), params)
        progress.advance(task, hi - done)
        done = hi
    built: list[sa.schema.ExecutableDDLElement] = [
        sa.schema.AddConstraint(t.primary_key),
        sa.schema.CreateIndex(index),
    ]
    for ddl in built:
        with engine.begin() as conn:
            conn.exec_driver_sql("SET maintenance_work_mem = '1GB'")
            conn.execute(ddl)


def _fill_mariadb(
    engine: sa.Engine, inbox: Inbox, rows: int, progress: Progress, task: Any
) -> None:
    start = _fill_start(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("SET unique_checks = 0, foreign_key_checks = 0")
        conn.execute(sa.text(MARIADB_FILL.format(rows=rows)), {"rows": rows, "start": start})
        conn.exec_driver_sql("SET unique_checks = 1, foreign_key_checks = 1")
    progress.advance(task, rows)


def _fill_python(engine: sa.Engine, inbox: Inbox, rows: int, progress: Progress, task: Any) -> None:
    start = _fill_start(engine)
    done = 0
    while done < rows:
        hi = min(rows, done + PY_CHUNK)
        batch = [
            {
                "message_id": message_id(n),
                "consumer_name": consumer_of(n, rows),
                "received_at": start + WINDOW * (n / rows),
            }
            for n in range(done + 1, hi + 1)
        ]
        with engine.begin() as conn:
            conn.execute(inbox.table.insert(), batch)
        progress.advance(task, hi - done)
        done = hi


def _fill_method(engine: sa.Engine, backend: str) -> tuple[str, Callable[..., None]]:
    if engine.dialect.name == "postgresql":
        return "INSERT ... SELECT generate_series, indexes built after", _fill_postgresql
    if backend == "mariadb":
        return "INSERT ... SELECT seq_1_to_N into the empty table (bulk)", _fill_mariadb
    return "executemany from Python", _fill_python


def _analyze(engine: sa.Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"VACUUM ANALYZE {TABLE}")
        elif engine.dialect.name in ("mysql", "mariadb"):
            conn.exec_driver_sql(f"ANALYZE TABLE {TABLE}").all()
        else:
            conn.exec_driver_sql("ANALYZE")


def _count(engine: sa.Engine) -> tuple[int, float]:
    started = time.perf_counter()
    with engine.connect() as conn:
        rows = conn.execute(sa.select(sa.func.count()).select_from(sa.table(TABLE))).scalar_one()
    return int(rows), time.perf_counter() - started


def _fill(
    engine: sa.Engine, backend: str, rows: int, progress: Progress, options: Mapping[str, Any]
) -> dict[str, Any]:
    """Fill ``bench_scale`` with ``rows`` rows from empty (or keep it, with ``reuse``, if
    it holds them: the fill's and the claims a former run measured), analyze, count."""
    inbox = inbox_table()
    method, fill = _fill_method(engine, backend)
    if options.get("reuse") and sa.inspect(engine).has_table(TABLE):
        counted, count_seconds = _count(engine)
        if rows <= counted <= rows * 1.01:
            return {
                "method": "reused",
                "seconds": 0.0,
                "count_seconds": count_seconds,
                "disk": {"free_bytes": None},
            }
    inbox.table.metadata.drop_all(engine, checkfirst=True)
    disk = _check_disk(engine, rows, float(options.get("min_free_gb", 25)))
    inbox.table.metadata.create_all(engine)
    task = progress.add_task(f"scale: fill {rows:,} rows", total=rows)
    started = time.perf_counter()
    fill(engine, inbox, rows, progress, task)
    filled = time.perf_counter() - started
    _analyze(engine)
    analyzed = time.perf_counter() - started - filled
    counted, count_seconds = _count(engine)
    if counted != rows:
        raise BenchError(f"{TABLE} holds {counted:,} rows, not {rows:,}")
    return {
        "method": method,
        "disk": disk,
        "seconds": filled,
        "rows_per_second": rows / filled,
        "analyze_seconds": analyzed,
        "count_seconds": count_seconds,
    }


# -- disk, sizes, caches --------------------------------------------------------------------


def _data_directory(engine: sa.Engine) -> Path | None:
    """The server's data directory if it is on this machine (a local URL), else None."""
    host = engine.url.host
    if host not in (None, "", "localhost", "127.0.0.1", "::1"):
        return None
    query = {"postgresql": "SHOW data_directory", "mysql": "SELECT @@datadir"}
    sql = query.get(engine.dialect.name)
    if sql is None:
        return Path(engine.url.database or ".").resolve().parent
    try:
        with engine.connect() as conn:
            path = Path(str(conn.exec_driver_sql(sql).scalar_one()))
    except sa.exc.DBAPIError:
        return None
    return path if path.exists() else None


def _check_disk(engine: sa.Engine, rows: int, min_free_gb: float) -> dict[str, Any]:
    """Refuse a fill that would leave the data directory's disk under ``min_free_gb``."""
    directory = _data_directory(engine)
    if directory is None:
        return {"free_bytes": None}
    free = shutil.disk_usage(directory).free
    need = rows * PEAK_BYTES_PER_ROW
    if free - need < min_free_gb * 2**30:
        raise BenchError(
            f"{rows:,} rows need about {need / 2**30:.0f} GiB at the fill's peak; "
            f"{directory} has {free / 2**30:.0f} GiB free and {min_free_gb:g} GiB must stay free"
        )
    return {"free_bytes": free, "predicted_peak_bytes": need}


def _sizes(engine: sa.Engine) -> dict[str, Any]:
    """Bytes of the table, its primary key and its ``received_at`` index, and of the
    server's buffer cache (PostgreSQL manual 9.27.7; MariaDB ``mysql.innodb_index_stats``:
    the clustered primary key holds the rows)."""
    name = engine.dialect.name
    with engine.connect() as conn:
        if name == "postgresql":
            table, pk, index, cache = conn.execute(
                sa.text(
                    "SELECT pg_table_size(CAST(:t AS regclass)), "
                    "(SELECT pg_relation_size(indexrelid) FROM pg_index "
                    " WHERE indrelid = CAST(:t AS regclass) AND indisprimary), "
                    "(SELECT pg_relation_size(indexrelid) FROM pg_index "
                    " WHERE indrelid = CAST(:t AS regclass) AND NOT indisprimary), "
                    "pg_size_bytes(current_setting('shared_buffers'))"
                ),
                {"t": TABLE},
            ).one()
            return _sized(table, pk, index, cache, "shared_buffers")
        if name in ("mysql", "mariadb"):
            pages: dict[str, int] = dict(
                conn.execute(
                    sa.text(
                        "SELECT index_name, stat_value * @@innodb_page_size "
                        "FROM mysql.innodb_index_stats WHERE database_name = DATABASE() "
                        "AND table_name = :t AND stat_name = 'size'"
                    ),
                    {"t": TABLE},
                ).all()
            )
            cache = conn.exec_driver_sql("SELECT @@innodb_buffer_pool_size").scalar_one()
            pk = pages.pop("PRIMARY", 0)
            return _sized(pk, pk, sum(pages.values()), cache, "innodb_buffer_pool_size")
        page, cache_pages = (
            conn.exec_driver_sql("PRAGMA page_size").scalar_one(),
            conn.exec_driver_sql("PRAGMA cache_size").scalar_one(),
        )
    cache = -int(cache_pages) * 1024 if int(cache_pages) < 0 else int(cache_pages) * int(page)
    return {"cache_bytes": cache, "cache_setting": "cache_size"}


def _sized(table: Any, pk: Any, index: Any, cache: Any, setting: str) -> dict[str, Any]:
    table, pk, index, cache = int(table), int(pk or 0), int(index or 0), int(cache)
    return {
        "table_bytes": table,
        "pk_bytes": pk,
        "received_at_index_bytes": index,
        "cache_bytes": cache,
        "cache_setting": setting,
        "pk_to_cache": pk / cache,
    }


class _Counters:
    """The buffer cache's and the disk's reads around a block of claims (see the module
    docstring); None where the backend or the machine does not tell."""

    def __init__(self, claims: sa.Engine, monitor: sa.Engine) -> None:
        self.claims, self.monitor = claims, monitor
        self.backend = claims.dialect.name
        self.pid = self._server_pid()

    def _server_pid(self) -> int | None:
        if _data_directory(self.claims) is None or not Path("/proc/self/io").exists():
            return None
        with self.claims.connect() as conn:
            if self.backend == "postgresql":
                return int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
            if self.backend in ("mysql", "mariadb"):
                pid_file = Path(str(conn.exec_driver_sql("SELECT @@pid_file").scalar_one()))
                try:
                    return int(pid_file.read_text().strip())
                except (OSError, ValueError):
                    return None
        return None

    def _disk(self) -> int | None:
        if self.pid is None:
            return None
        try:
            text = Path(f"/proc/{self.pid}/io").read_text()
        except OSError:
            return None
        fields = dict(line.split(": ") for line in text.splitlines())
        return int(fields["read_bytes"])

    def read(self) -> dict[str, int | None]:
        """Cache hits, cache misses (reads from the OS) and the server's disk reads."""
        hits: int | None = None
        misses: int | None = None
        if self.backend == "postgresql":
            with self.claims.connect() as conn:  # the claims' backend: the pool holds one
                conn.exec_driver_sql("SELECT pg_stat_force_next_flush()")
            with self.monitor.connect() as conn:
                heap_read, heap_hit, idx_read, idx_hit = conn.execute(
                    sa.text(
                        "SELECT heap_blks_read, heap_blks_hit, idx_blks_read, idx_blks_hit "
                        "FROM pg_statio_user_tables WHERE relname = :t"
                    ),
                    {"t": TABLE},
                ).one()
            hits, misses = int(heap_hit) + int(idx_hit), int(heap_read) + int(idx_read)
        elif self.backend in ("mysql", "mariadb"):
            with self.monitor.connect() as conn:
                status: dict[str, str] = dict(
                    conn.exec_driver_sql(
                        "SHOW GLOBAL STATUS WHERE Variable_name IN "
                        "('Innodb_buffer_pool_read_requests', 'Innodb_buffer_pool_reads')"
                    ).all()
                )
            misses = int(status["Innodb_buffer_pool_reads"])
            hits = int(status["Innodb_buffer_pool_read_requests"]) - misses
        return {"hits": hits, "misses": misses, "disk_bytes": self._disk()}


def _delta(
    after: Mapping[str, int | None], before: Mapping[str, int | None]
) -> dict[str, int | None]:
    found: dict[str, int | None] = {}
    for key, value in after.items():
        start = before[key]
        found[key] = None if value is None or start is None else value - start
    return found


# -- claims ---------------------------------------------------------------------------------


def _latencies(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "n": len(samples),
        "median_s": statistics.median(samples),
        "p90_s": pick(0.9),
        "p99_s": pick(0.99),
        "max_s": ordered[-1],
        "mean_s": statistics.fmean(samples),
    }


def _claim_round(
    engine: sa.Engine, inbox: Inbox, work: list[tuple[str, str]], new: bool
) -> list[float]:
    """Claim each (id, consumer) in its own transaction; each must be new (or each a
    duplicate)."""
    seconds = []
    for mid, consumer in work:
        started = time.perf_counter()
        with engine.begin() as conn:
            claimed = inbox.claim(conn, mid, consumer)
        seconds.append(time.perf_counter() - started)
        if claimed != new:
            what = "a fresh id was taken for a duplicate" if new else "a duplicate was claimed"
            raise BenchError(f"{what}: {mid} {consumer}")
    return seconds


def _claims(
    engine: sa.Engine, monitor: sa.Engine, rows: int, claims: int, progress: Progress
) -> dict[str, Any]:
    """``claims`` claims of each kind in rounds (see the module docstring), after one
    unmeasured round; the new ids checked in the table afterwards."""
    inbox = inbox_table()
    pick = random.Random(rows)
    counters = _Counters(engine, monitor)
    seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
    reads: dict[str, list[dict[str, int | None]]] = {kind: [] for kind in KINDS}
    fresh: list[str] = []
    task = progress.add_task(f"scale: claims at {rows:,} rows", total=claims * len(KINDS))
    # a warm-up round first (connections, statement caches, the indexes' upper pages)
    rounds = [min(ROUND, claims)] + [ROUND] * (claims // ROUND) + [claims % ROUND]
    for index, size in enumerate(n for n in rounds if n):
        new = [(str(uuid.uuid4()), CONSUMERS[0]) for _ in range(size)]
        numbers = [pick.randint(1, rows) for _ in range(size)]
        work = {
            "new": new,
            "dup_random": [(message_id(n), consumer_of(n, rows)) for n in numbers],
            "dup_recent": new,
        }
        for kind in KINDS:
            before = counters.read()
            spent = _claim_round(engine, inbox, work[kind], kind == "new")
            if index:
                seconds[kind] += spent
                reads[kind].append(_delta(counters.read(), before))
                progress.advance(task, size)
        if index:
            fresh += [mid for mid, _ in new]
    _check_claimed(engine, inbox, fresh)
    return {
        kind: {**_latencies(seconds[kind]), **_ratios(reads[kind], len(seconds[kind]))}
        for kind in KINDS
    }


def _summed(deltas: list[dict[str, int | None]], key: str) -> int | None:
    values = [d[key] for d in deltas]
    return None if any(v is None for v in values) else sum(v or 0 for v in values)


def _ratios(deltas: list[dict[str, int | None]], claims: int) -> dict[str, Any]:
    hits, misses = _summed(deltas, "hits"), _summed(deltas, "misses")
    disk = _summed(deltas, "disk_bytes")
    total = None if hits is None or misses is None else hits + misses
    return {
        "cache_hits": hits,
        "cache_misses": misses,
        "hit_ratio": None if hits is None or not total else hits / total,
        "misses_per_claim": None if misses is None else misses / claims,
        "disk_bytes_per_claim": None if disk is None else disk / claims,
    }


def _check_claimed(engine: sa.Engine, inbox: Inbox, ids: list[str]) -> None:
    """Every new id measured is in the table (primary-key reads, in batches)."""
    t = inbox.table
    found = 0
    with engine.connect() as conn:
        for lo in range(0, len(ids), 500):
            chunk = ids[lo : lo + 500]
            query = sa.select(sa.func.count()).where(
                t.c.message_id.in_(chunk), t.c.consumer_name == CONSUMERS[0]
            )
            found += int(conn.execute(query).scalar_one())
    if found != len(ids):
        raise BenchError(f"{found} of the {len(ids)} new claims are in {TABLE}")


# -- monitoring -----------------------------------------------------------------------------


def _timed(call: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    seconds, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
    return seconds, result


def _summary(seconds: list[float]) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "median_s": statistics.median(seconds),
        "max_s": max(seconds),
        "first_s": seconds[0],
    }


def _scrape(engine: sa.Engine) -> Callable[[], Any] | None:
    try:
        from prometheus_client import CollectorRegistry, generate_latest

        from sa_inbox.hooks.prometheus import InboxCollector
    except ImportError:  # pragma: no cover - the extra is not installed
        return None
    registry = CollectorRegistry()
    InboxCollector(engine, inbox_table=TABLE, min_interval=0, registry=registry)
    return lambda: generate_latest(registry)


def _cli(url: str, *args: str) -> Callable[[], None]:
    command = [sys.executable, "-m", "sa_inbox.cli", *args]
    if args and args[0] == "stats":
        command += ["--url", url, "--table", TABLE, "--store-table", "", "--outbox-table", ""]

    def run() -> None:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BenchError(f"{' '.join(command[3:5])} exited {done.returncode}: {done.stderr}")

    return run


def _monitoring(engine: sa.Engine, url: str) -> dict[str, Any]:
    """The monitoring's reads, timed, and the estimates against the exact figures."""

    def sample(exact: bool) -> InboxStats:
        return collect(engine, inbox_table=TABLE, store_table=None, outbox_table=None, exact=exact)

    estimated_s, estimated = _timed(lambda: sample(False), MONITOR_REPEAT)
    exact_s, exact = _timed(lambda: sample(True), 1)
    found: dict[str, Any] = {
        "stats": _summary(estimated_s),
        "stats_exact": _summary(exact_s),
        "sampled_rows": estimated.sampled_rows,
        "accuracy": _accuracy(estimated, exact),
    }
    scrape = _scrape(engine)
    if scrape is not None:
        found["scrape"] = _summary(_timed(scrape, MONITOR_REPEAT)[0])
    found["cli_stats"] = _summary(_timed(_cli(url, "stats", "--json"), CLI_REPEAT)[0])
    found["cli_help"] = _summary(_timed(_cli(url, "--help"), CLI_REPEAT)[0])
    found["cli_stats_exact"] = _summary(_timed(_cli(url, "stats", "--json", "--exact"), 1)[0])
    return found


def _accuracy(estimated: InboxStats, exact: InboxStats) -> dict[str, Any]:
    """The sample's estimates against the exact figures: rows of the table and of each
    consumer (relative error), oldest and newest claims (seconds off), the flags."""
    truth = {c.consumer_name: c for c in exact.consumers}
    consumers: dict[str, dict[str, Any]] = {}
    for c in estimated.consumers:
        real = truth.get(c.consumer_name)
        if real is None:
            consumers[c.consumer_name] = {"missing_from_exact": True}
            continue
        consumers[c.consumer_name] = {
            "rows": c.rows,
            "exact_rows": real.rows,
            "rows_error": c.rows / real.rows - 1,
            "oldest_off_s": _off(c.oldest, real.oldest),
            "newest_off_s": _off(c.newest, real.newest),
            "estimated": list(c.estimated),
        }
    return {
        "table_rows": estimated.tables[0].rows,
        "table_rows_estimated": estimated.tables[0].estimated,
        "exact_rows": exact.tables[0].rows,
        "table_rows_error": estimated.tables[0].rows / exact.tables[0].rows - 1,
        "consumers": consumers,
        "missed": sorted(set(truth) - {c.consumer_name for c in estimated.consumers}),
        "growth_error": _growth_error(estimated, exact),
    }


def _off(a: Any, b: Any) -> float | None:
    return None if a is None or b is None else abs((a - b).total_seconds())


def _growth_error(estimated: InboxStats, exact: InboxStats) -> float | None:
    """The largest error of a day's rows, relative to the exact day's rows per consumer
    (days with rows only)."""
    truth = {g.group: g.rows for g in exact.growth}
    errors = [
        abs(got / want - 1)
        for g in estimated.growth
        for got, want in zip(g.rows, truth.get(g.group, []), strict=False)
        if want
    ]
    return max(errors) if errors else None


# -- the scenario ---------------------------------------------------------------------------


@contextmanager
def _engines(url: str) -> Iterator[tuple[sa.Engine, sa.Engine]]:
    """The claims' engine (one connection: the PostgreSQL counters are its backend's) and
    the monitoring's."""
    if sa.make_url(url).get_backend_name() == "sqlite":
        claims = make_engine(url)
    else:
        claims = sa.create_engine(url, pool_size=1, max_overflow=0)
    monitor = make_engine(url)
    try:
        yield claims, monitor
    finally:
        claims.dispose()
        monitor.dispose()


def _size(
    config: BenchConfig, rows: int, backend: str, progress: Progress, *, last: bool
) -> dict[str, Any]:
    options = config.options
    claims = int(options.get("claims", 2000))
    load_before = os.getloadavg()
    with _engines(config.url) as (engine, monitor):
        filled = _fill(monitor, backend, rows, progress, options)
        sizes = _sizes(monitor)
        claimed = _claims(engine, monitor, rows, claims, progress)
        watched = _monitoring(monitor, config.url)
        if not (last and options.get("keep")):
            inbox_table().table.metadata.drop_all(monitor, checkfirst=True)
    return {
        "rows": rows,
        "fill": filled,
        "disk": filled.pop("disk", {"free_bytes": None}),
        **sizes,
        "claims": claimed,
        "monitoring": watched,
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
    }


def run(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Every size of ``config.options["sizes"]`` (default ``[config.rows]``), in increasing
    order (see the module docstring).

    :raises BenchError: if a size would fill the disk (before it starts), or a claim, the
        fill or the table's rows are wrong.
    """
    sizes = sorted(set(config.options.get("sizes") or [config.rows]))
    backend = _backend(config.url)
    partial = config.out / f"scale-{backend}.partial.json"
    results = []
    for rows in sizes:
        results.append(_size(config, rows, backend, progress, last=rows == sizes[-1]))
        config.out.mkdir(parents=True, exist_ok=True)  # a long run keeps what it measured
        partial.write_text(json.dumps(results, indent=2) + "\n")
    partial.unlink()
    return {
        "sizes": results,
        "claims_per_kind": int(config.options.get("claims", 2000)),
        "round": ROUND,
        "consumers": [*CONSUMERS, RETIRED],
        "window_seconds": WINDOW.total_seconds(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    }


def _backend(url: str) -> str:
    from sa_inbox.bench.db import backend_name

    return backend_name(url)


def label_for(results: Mapping[str, Any]) -> str:
    sizes = " / ".join(f"{s['rows']:,}" for s in results["sizes"])
    return f"Scale: the claim and the monitoring at {sizes} retained rows"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def table(results: Mapping[str, Any]) -> Table:
    """Two tables stacked: the claims (median / p99 ms and the cache hit ratio per kind,
    the primary key against the cache), the monitoring (seconds, estimated and exact)."""
    out = Table.grid(padding=(1, 0))
    claims = Table("rows", "PK / cache", *(f"{k} ms p50/p99 hit" for k in KINDS), title="claims")
    for s in results["sizes"]:
        cells = []
        for kind in KINDS:
            c = s["claims"][kind]
            cells.append(f"{_ms(c['median_s'])}/{_ms(c['p99_s'])} {_ratio(c['hit_ratio'])}")
        pk = "-" if "pk_to_cache" not in s else f"{s['pk_to_cache']:.2f}"
        claims.add_row(f"{s['rows']:,}", pk, *cells)
    out.add_row(claims)
    watch = Table(
        "rows",
        "stats s",
        "scrape s",
        "CLI s",
        "exact s",
        "CLI --exact s",
        "rows error",
        title="monitoring (median)",
    )
    for s in results["sizes"]:
        m = s["monitoring"]
        scrape = m.get("scrape")
        watch.add_row(
            f"{s['rows']:,}",
            f"{m['stats']['median_s']:.3f}",
            "-" if scrape is None else f"{scrape['median_s']:.3f}",
            f"{m['cli_stats']['median_s']:.2f}",
            f"{m['stats_exact']['median_s']:.2f}",
            f"{m['cli_stats_exact']['median_s']:.2f}",
            f"{m['accuracy']['table_rows_error']:+.3f}",
        )
    out.add_row(watch)
    return out


@click.command(help=__doc__.split("\n\n")[0] if __doc__ else None)
@click.option("--url", required=True, help="The database (PostgreSQL, MariaDB; others slowly).")
@click.option(
    "--rows",
    "sizes",
    type=click.IntRange(min=10),
    multiple=True,
    default=[1_000_000],
    show_default=True,
    help="A size to measure at; repeatable.",
)
@click.option("--claims", type=click.IntRange(min=1), default=2000, show_default=True)
@click.option("--min-free-gb", type=float, default=25.0, show_default=True)
@click.option("--keep", is_flag=True, help="Leave the largest table in place.")
@click.option("--reuse", is_flag=True, help="Measure a kept table of that size unfilled.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-results"),
    show_default=True,
)
def main(
    url: str,
    sizes: tuple[int, ...],
    claims: int,
    min_free_gb: float,
    keep: bool,
    reuse: bool,
    out: Path,
) -> None:
    """Run the scenario, print its tables, write its JSON.

    :raises CannotRun: (exit 3) if the scenario refused the database or its rows.
    """
    from benchmarks import scale

    console = Console()
    options = {
        "sizes": list(sizes),
        "claims": claims,
        "min_free_gb": min_free_gb,
        "keep": keep,
        "reuse": reuse,
    }
    config = BenchConfig(url=url, rows=max(sizes), repeat=1, out=out, options=options)
    try:
        with make_progress(console) as progress:
            run_scenario(scale, config, console=console, progress=progress)
    except (BenchError, sa.exc.SQLAlchemyError) as exc:
        raise CannotRun(str(exc)) from exc


if __name__ == "__main__":
    main()
