"""Purge: rows deleted per second and the longest batch, on a million-row table, per dialect.

Each run loads ``--rows`` processed-message rows (default 1,000,000), half of them older
than the retention window and interleaved with the rest in key and time order (the loader
of ``tests/retention/loaders.py``), then times :func:`sa_inbox.retention.purge` with
``--batch-size`` rows per batch. The business state is checked after every run: exactly
the expired half is gone and every row inside the window is still there; a wrong state
stops the benchmark. Figures are printed as a table and written as JSON; they are never
asserted anywhere.

Usage, from the repository root::

    python benchmarks/purge.py --dburl postgresql+psycopg://… --dburl mysql+pymysql://… \\
        --dburl sqlite:///purge.db --rows 1000000 --repeats 3 --json purge.json
"""

from __future__ import annotations

import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import click
import sqlalchemy as sa
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the loader lives in tests/retention
    sys.path.insert(0, str(ROOT))

from sa_inbox import Inbox  # noqa: E402
from sa_inbox.retention import Batch, RetentionPolicy, purge  # noqa: E402
from tests.retention.loaders import load_rows  # noqa: E402

__all__ = ["main", "measure", "run", "table"]

TABLE = "bench_purge"
#: Window 9 days 1 hour: the loader's rows are either at most 8 or at least 10 days old.
POLICY = RetentionPolicy(
    max_redelivery=datetime.timedelta(days=2),
    max_replay=datetime.timedelta(days=7),
    margin=datetime.timedelta(hours=1),
)


PRODUCTS = {"postgresql": "PostgreSQL", "mysql": "MySQL", "sqlite": "SQLite", "oracle": "Oracle"}


def _backend(engine: sa.Engine) -> str:
    name = engine.dialect.name
    return "mysql" if name in ("mysql", "mariadb") else name


def _label(engine: sa.Engine) -> str:
    version = ".".join(str(v) for v in (engine.dialect.server_version_info or ())[:3])
    if engine.dialect.name == "sqlite":
        import sqlite3

        version = sqlite3.sqlite_version
    product = PRODUCTS.get(engine.dialect.name, engine.dialect.name)
    if getattr(engine.dialect, "is_mariadb", False):
        product = "MariaDB"
    return f"{product} {version}".strip()


def measure(engine: sa.Engine, rows: int, batch_size: int) -> dict[str, Any]:
    """Load ``rows`` rows, purge the expired half, check the state; return the figures."""
    metadata = sa.MetaData()
    inbox = Inbox(metadata, table_name=TABLE)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        load_rows(_backend(engine), engine, TABLE, rows)
        batches: list[Batch] = []
        started = time.perf_counter()
        deleted = purge(
            engine, older_than=POLICY, table=inbox, batch_size=batch_size, on_batch=batches.append
        )
        elapsed = time.perf_counter() - started
        _check(engine, inbox.table, rows, deleted, batches, batch_size)
    finally:
        metadata.drop_all(engine)
    seconds = [batch.seconds for batch in batches]
    return {
        "deleted": deleted,
        "seconds": elapsed,
        "rows_per_second": deleted / elapsed,
        "batches": len(batches),
        "longest_batch_seconds": max(seconds),
        "median_batch_seconds": statistics.median(seconds),
    }


def _check(
    engine: sa.Engine,
    table: sa.Table,
    rows: int,
    deleted: int,
    batches: list[Batch],
    batch_size: int,
) -> None:
    with engine.connect() as conn:
        old = conn.execute(
            sa.select(sa.func.count()).where(table.c.message_id.startswith("old-"))
        ).scalar_one()
        kept = conn.execute(
            sa.select(sa.func.count()).where(table.c.message_id.startswith("keep-"))
        ).scalar_one()
    expected = rows // 2
    if (deleted, old, kept) != (expected, 0, rows - expected):
        raise SystemExit(
            f"wrong state after the purge: deleted {deleted} (expected {expected}), "
            f"{old} expired rows left, {kept} of {rows - expected} rows inside the window"
        )
    if any(batch.rows > batch_size for batch in batches):
        raise SystemExit(f"a batch deleted more than {batch_size} rows")


def run(url: str, rows: int, batch_size: int, repeats: int) -> dict[str, Any]:
    """``repeats`` measurements on one database; the medians and every run."""
    engine = sa.create_engine(url)
    try:
        runs = [measure(engine, rows, batch_size) for _ in range(repeats)]
        label = _label(engine)
    finally:
        engine.dispose()
    keys = ("rows_per_second", "longest_batch_seconds", "median_batch_seconds", "seconds")
    return {
        "backend": label,
        "rows": rows,
        "expired_rows": rows // 2,
        "batch_size": batch_size,
        "repeats": repeats,
        "median": {key: statistics.median(r[key] for r in runs) for key in keys},
        "runs": runs,
    }


def table(results: list[dict[str, Any]]) -> Table:
    """The figures to print: one row per database (medians of the runs)."""
    output = Table(title="purge: delete the expired half (median of the runs)")
    for column in ("backend", "rows", "deleted", "batch", "rows/s", "longest batch", "median"):
        output.add_column(column, justify="left" if column == "backend" else "right")
    for result in results:
        median = result["median"]
        output.add_row(
            result["backend"],
            f"{result['rows']:,}",
            f"{result['expired_rows']:,}",
            f"{result['batch_size']:,}",
            f"{median['rows_per_second']:,.0f}",
            f"{median['longest_batch_seconds'] * 1000:.0f} ms",
            f"{median['median_batch_seconds'] * 1000:.0f} ms",
        )
    return output


@click.command()
@click.option("--dburl", "urls", multiple=True, required=True, help="Database URL (repeat).")
@click.option("--rows", type=click.IntRange(min=2), default=1_000_000, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=5000, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None)
def main(
    urls: tuple[str, ...], rows: int, batch_size: int, repeats: int, json_path: Path | None
) -> None:
    """Measure the purge on each --dburl; print a table, optionally write JSON."""
    results = [run(url, rows, batch_size, repeats) for url in urls]
    Console().print(table(results))
    if json_path is not None:
        document = {
            "scenario": "purge",
            "machine": {"cpus": _cpus(), "python": platform.python_version()},
            "sqlalchemy": sa.__version__,
            "results": results,
        }
        json_path.write_text(json.dumps(document, indent=2) + "\n")


def _cpus() -> int | None:
    import os

    return os.cpu_count()


if __name__ == "__main__":
    main()
