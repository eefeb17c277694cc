"""Purge: rows deleted per second and the longest batch, on a million-row table.

The table (``bench_purge``, the shape of :func:`sa_inbox.schema.processed_messages_table`)
is filled with ``rows`` claims by one ``INSERT … SELECT`` from the server's own row
generator (:func:`load_rows`): half of them older than the retention window, interleaved
with the other half in key and time order. :func:`sa_inbox.retention.purge` then deletes the
expired half in batches of at most ``batch_size`` rows (``config.options["batch_size"]``,
default 5000), timed as a whole and batch by batch. "Longest batch" is the longest single
batch transaction, from its first statement to its commit: the longest time a row lock of
the purge was held. The business state is checked after every run (exactly the expired
half gone, every row inside the window still there, no batch over ``batch_size``); the
figures are medians over ``config.repeat`` runs, each with a fresh load.
"""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from rich.progress import Progress
from rich.table import Table

from ..retention import DEFAULT_BATCH_SIZE, Batch, RetentionPolicy, purge
from ..schema import processed_messages_table
from .db import make_engine
from .runner import BenchConfig

__all__ = ["LOADERS", "POLICY", "load_rows", "measure", "run", "table"]

TABLE = "bench_purge"
#: Window 9 days 1 hour: every loaded row is either at most 8 or at least 10 days old.
POLICY = RetentionPolicy(
    max_redelivery=datetime.timedelta(days=2),
    max_replay=datetime.timedelta(days=7),
    margin=datetime.timedelta(hours=1),
)

#: Row g (1..n): 'old-g' 10 days + (g mod 1 day) old, or 'keep-g' up to 8 days old.
LOADERS = {
    "postgresql": """
        INSERT INTO {table} (message_id, consumer_name, received_at)
        SELECT CASE WHEN g % 2 = 0 THEN 'old-' || g ELSE 'keep-' || g END, 'billing',
               CASE WHEN g % 2 = 0
                    THEN now() - interval '10 days' - (g % 86400) * interval '1 second'
                    ELSE now() - (g % 691200) * interval '1 second' END
        FROM generate_series(1, :n) AS g""",
    "mysql": """
        INSERT INTO {table} (message_id, consumer_name, received_at)
        SELECT IF(MOD(seq, 2) = 0, CONCAT('old-', seq), CONCAT('keep-', seq)), 'billing',
               IF(MOD(seq, 2) = 0,
                  NOW() - INTERVAL 10 DAY - INTERVAL MOD(seq, 86400) SECOND,
                  NOW() - INTERVAL MOD(seq, 691200) SECOND)
        FROM {sequence}""",
    "sqlite": """
        WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < :n)
        INSERT INTO {table} (message_id, consumer_name, received_at)
        SELECT CASE WHEN g % 2 = 0 THEN 'old-' || g ELSE 'keep-' || g END, 'billing',
               CASE WHEN g % 2 = 0
                    THEN datetime('now', '-10 days', '-' || (g % 86400) || ' seconds')
                    ELSE datetime('now', '-' || (g % 691200) || ' seconds') END
        FROM seq""",
    "oracle": """
        INSERT INTO {table} (message_id, consumer_name, received_at)
        SELECT CASE WHEN MOD(LEVEL, 2) = 0 THEN 'old-' || LEVEL ELSE 'keep-' || LEVEL END,
               'billing',
               CASE WHEN MOD(LEVEL, 2) = 0
                    THEN SYSTIMESTAMP - NUMTODSINTERVAL(10, 'DAY')
                         - NUMTODSINTERVAL(MOD(LEVEL, 86400), 'SECOND')
                    ELSE SYSTIMESTAMP - NUMTODSINTERVAL(MOD(LEVEL, 691200), 'SECOND') END
        FROM dual CONNECT BY LEVEL <= :n""",
}


def load_rows(backend: str, engine: sa.Engine, table: str, rows: int) -> None:
    """Insert ``rows`` rows into ``table`` (which must exist), then ANALYZE on PostgreSQL."""
    sql = LOADERS[backend]
    with engine.begin() as conn:
        if backend == "mysql":
            if engine.dialect.is_mariadb:  # type: ignore[attr-defined]
                sequence = f"seq_1_to_{rows}"  # MariaDB's Sequence engine
            else:
                conn.exec_driver_sql(f"SET SESSION cte_max_recursion_depth = {rows}")
                sequence = "(WITH RECURSIVE s (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 "
                sequence += f"FROM s WHERE seq < {rows}) SELECT seq FROM s) AS s"
            conn.execute(sa.text(sql.format(table=table, sequence=sequence)))
        else:
            conn.execute(sa.text(sql.format(table=table)), {"n": rows})
    if backend == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"ANALYZE {table}")


def purge_table() -> sa.Table:
    """The standard inbox table, named :data:`TABLE`, on a fresh MetaData."""
    return processed_messages_table(sa.MetaData(), table_name=TABLE)


def _loader_name(engine: sa.Engine) -> str:
    name = engine.dialect.name
    return "mysql" if name in ("mysql", "mariadb") else name


def _check(
    engine: sa.Engine, table: sa.Table, rows: int, deleted: int, batches: list[Batch], size: int
) -> None:
    from .workers import BenchError

    with engine.connect() as conn:
        old, kept = (
            int(
                conn.execute(
                    sa.select(sa.func.count()).where(table.c.message_id.startswith(prefix))
                ).scalar_one()
            )
            for prefix in ("old-", "keep-")
        )
    expired = rows // 2
    if (deleted, old, kept) != (expired, 0, rows - expired):
        raise BenchError(
            f"wrong state after the purge: deleted {deleted} (expected {expired}), {old} "
            f"expired rows left, {kept} of {rows - expired} rows inside the window"
        )
    if any(batch.rows > size for batch in batches):
        raise BenchError(f"a purge batch deleted more than {size} rows")


def measure(engine: sa.Engine, rows: int, batch_size: int, progress: Progress) -> dict[str, Any]:
    """Load ``rows`` rows, purge the expired half, check the state; one run's figures."""
    table = purge_table()
    table.metadata.drop_all(engine, checkfirst=True)
    table.metadata.create_all(engine)
    try:
        load_rows(_loader_name(engine), engine, TABLE, rows)
        task = progress.add_task(f"purge: {rows // 2:,} of {rows:,} rows", total=rows // 2)
        batches: list[Batch] = []

        def on_batch(batch: Batch) -> None:
            batches.append(batch)
            progress.advance(task, batch.rows)

        started = time.perf_counter()
        deleted = purge(
            engine, older_than=POLICY, table=table, batch_size=batch_size, on_batch=on_batch
        )
        seconds = time.perf_counter() - started
        _check(engine, table, rows, deleted, batches, batch_size)
    finally:
        table.metadata.drop_all(engine, checkfirst=True)
    durations = [batch.seconds for batch in batches]
    return {
        "deleted": deleted,
        "seconds": seconds,
        "rows_per_second": deleted / seconds,
        "batches": len(batches),
        "longest_batch_seconds": max(durations),
        "median_batch_seconds": statistics.median(durations),
    }


def run(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """``config.repeat`` runs of :func:`measure` on ``config.rows`` rows; medians and runs.

    :raises BenchError: if a run leaves the wrong rows.
    """
    batch_size = int(config.options.get("batch_size", DEFAULT_BATCH_SIZE))
    engine = make_engine(config.url)
    try:
        runs = [measure(engine, config.rows, batch_size, progress) for _ in range(config.repeat)]
    finally:
        engine.dispose()
    keys = ("rows_per_second", "longest_batch_seconds", "median_batch_seconds", "seconds")
    return {
        "rows": config.rows,
        "expired_rows": config.rows // 2,
        "batch_size": batch_size,
        "window_seconds": POLICY.window.total_seconds(),
        "summary": {key: statistics.median(r[key] for r in runs) for key in keys},
        "runs": runs,
    }


def table(results: Mapping[str, Any]) -> Table:
    """Rows, rows deleted, batch size, rows deleted per second, longest and median batch."""
    out = Table("rows", "deleted", "batch", "rows/s", "longest batch", "median batch", "runs")
    summary = results["summary"]
    out.add_row(
        f"{results['rows']:,}",
        f"{results['expired_rows']:,}",
        f"{results['batch_size']:,}",
        f"{summary['rows_per_second']:,.0f}",
        f"{summary['longest_batch_seconds'] * 1000:.0f} ms",
        f"{summary['median_batch_seconds'] * 1000:.0f} ms",
        str(len(results["runs"])),
    )
    return out
