"""Growth: bytes per row of the inbox table (table + indexes) at 1 M rows, and a calculator.

The measurement fills the standard inbox table (``bench_growth``, the shape of
:func:`sa_inbox.schema.processed_messages_table`: the primary key and the ``received_at``
index) with ``rows`` claims of random UUIDv4 ids (36 characters) for one consumer, in
random key order as real claims arrive, :data:`CHUNK` rows per transaction, then measures
the space the database reports:

* PostgreSQL: ``pg_total_relation_size`` after ``VACUUM ANALYZE`` (PostgreSQL manual, 9.27.7
  "Database Object Management Functions");
* MariaDB/MySQL: ``data_length + index_length`` of ``information_schema.TABLES`` after
  ``ANALYZE TABLE`` (the clustered primary key is ``data_length``);
* SQLite: the pages of the table and its indexes in the ``dbstat`` virtual table.

The calculator (:func:`project`, ``sa-inbox bench growth --rate 2000 --window 7d``) turns a
message rate and a retention window into rows and bytes, from the measured bytes per row:
:data:`PUBLISHED_FIGURES` (this repository's measurement, shipped with the package) unless
given the JSON of your own run.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from rich.progress import Progress
from rich.table import Table

from ..schema import processed_messages_table
from .db import make_engine
from .runner import BenchConfig

__all__ = [
    "PUBLISHED_FIGURES",
    "Projection",
    "figures_document",
    "load_figures",
    "parse_window",
    "project",
    "projection_table",
    "run",
    "table",
]

TABLE = "bench_growth"
CONSUMER = "billing"
#: Rows per INSERT transaction while filling.
CHUNK = 10_000
#: The packaged JSON of measured bytes per row, per backend (``sa-inbox bench growth``).
PUBLISHED_FIGURES = "growth_figures.json"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_WINDOW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def growth_table() -> sa.Table:
    """The standard inbox table, named :data:`TABLE`, on a fresh MetaData."""
    return processed_messages_table(sa.MetaData(), table_name=TABLE)


def _fill(engine: sa.Engine, table: sa.Table, rows: int, progress: Progress) -> float:
    task = progress.add_task(f"growth: insert {rows:,} rows", total=rows)
    started = time.perf_counter()
    done = 0
    while done < rows:
        count = min(CHUNK, rows - done)
        batch = [{"message_id": str(uuid.uuid4()), "consumer_name": CONSUMER} for _ in range(count)]
        with engine.begin() as conn:
            conn.execute(table.insert(), batch)
        done += count
        progress.advance(task, count)
    return time.perf_counter() - started


def _postgresql_bytes(engine: sa.Engine) -> dict[str, int]:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"VACUUM ANALYZE {TABLE}")
        row = conn.execute(
            sa.text("SELECT pg_total_relation_size(:t), pg_table_size(:t), pg_indexes_size(:t)"),
            {"t": TABLE},
        ).one()
    return {"total_bytes": int(row[0]), "table_bytes": int(row[1]), "index_bytes": int(row[2])}


def _mysql_bytes(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        conn.exec_driver_sql(f"ANALYZE TABLE {TABLE}").all()
        data, index = conn.execute(
            sa.text(
                "SELECT data_length, index_length FROM information_schema.TABLES "
                "WHERE table_schema = database() AND table_name = :t"
            ),
            {"t": TABLE},
        ).one()
    return {
        "total_bytes": int(data) + int(index),
        "table_bytes": int(data),
        "index_bytes": int(index),
    }


def _sqlite_bytes(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT name, sum(pgsize) FROM dbstat WHERE name IN "
            "(SELECT name FROM sqlite_master WHERE tbl_name = ?) GROUP BY name",
            (TABLE,),
        ).all()
    sizes = {str(name): int(size) for name, size in rows}
    table_bytes = sizes.pop(TABLE, 0)
    index_bytes = sum(sizes.values())
    return {
        "total_bytes": table_bytes + index_bytes,
        "table_bytes": table_bytes,
        "index_bytes": index_bytes,
    }


_BYTES = {
    "postgresql": _postgresql_bytes,
    "mysql": _mysql_bytes,
    "mariadb": _mysql_bytes,
    "sqlite": _sqlite_bytes,
}


def run(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Fill ``config.rows`` rows, measure the bytes, check the row count, drop the table.

    :raises BenchError: if the table does not hold exactly ``config.rows`` rows.
    """
    from .workers import BenchError

    engine = make_engine(config.url)
    table = growth_table()
    measure = _BYTES.get(engine.dialect.name)
    if measure is None:
        raise BenchError(f"no size measurement for {engine.dialect.name}")
    try:
        table.metadata.drop_all(engine, checkfirst=True)
        table.metadata.create_all(engine)
        seconds = _fill(engine, table, config.rows, progress)
        with engine.connect() as conn:
            rows = int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
        if rows != config.rows:
            raise BenchError(f"{TABLE} holds {rows} rows, not {config.rows}")
        sizes = measure(engine)
        table.metadata.drop_all(engine)
    finally:
        engine.dispose()
    return {
        "rows": rows,
        "key_format": "uuid4",
        "message_id_chars": 36,
        "consumer_name": CONSUMER,
        "fill_seconds": seconds,
        **sizes,
        "bytes_per_row": sizes["total_bytes"] / rows,
        "table_bytes_per_row": sizes["table_bytes"] / rows,
        "index_bytes_per_row": sizes["index_bytes"] / rows,
    }


def table(results: Mapping[str, Any]) -> Table:
    """Rows, total/table/index bytes and bytes per row."""
    out = Table("rows", "total MiB", "table MiB", "indexes MiB", "bytes/row")
    mib = 1024 * 1024
    out.add_row(
        f"{results['rows']:,}",
        f"{results['total_bytes'] / mib:.1f}",
        f"{results['table_bytes'] / mib:.1f}",
        f"{results['index_bytes'] / mib:.1f}",
        f"{results['bytes_per_row']:.0f}",
    )
    return out


# -- the calculator ----------------------------------------------------------------------


def parse_window(text: str) -> float:
    """Seconds in a retention window written as ``<number><unit>``.

    :param text: e.g. ``"7d"``, ``"12h"``, ``"90m"``, ``"2w"``, ``"3600s"``.
    :raises ValueError: if ``text`` is not a positive number followed by s, m, h, d or w.
    """
    match = _WINDOW.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(
            f"window must be a positive number and a unit s/m/h/d/w, like 7d: {text!r}"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


def load_figures(source: Path | None = None) -> dict[str, dict[str, Any]]:
    """Measured bytes per row, per backend.

    :param source: ``None`` for the published figures shipped with sa-inbox; a
        ``growth-<backend>.json`` written by ``sa-inbox bench growth``; or a directory of
        such files.
    :returns: backend -> ``{"bytes_per_row": float, "rows": int, "server": str, ...}``.
    :raises FileNotFoundError: if ``source`` does not exist or holds no growth JSON.
    """
    if source is None:
        text = resources.files(__package__).joinpath(PUBLISHED_FIGURES).read_text()
        figures: dict[str, dict[str, Any]] = json.loads(text)["backends"]
        return figures
    paths = sorted(source.glob("growth-*.json")) if source.is_dir() else [source]
    if not paths or not all(p.exists() for p in paths):
        raise FileNotFoundError(f"no growth-*.json at {source}")
    figures = {}
    for path in paths:
        document = json.loads(path.read_text())
        figures[document["backend"]] = figures_of(document)
    return figures


def figures_document(directory: Path) -> dict[str, Any]:
    """The content of :data:`PUBLISHED_FIGURES` from the ``growth-*.json`` in ``directory``.

    This is how the packaged file is made from a published run (``benchmarks/results``).
    """
    return {
        "source": "sa-inbox bench growth --rows 1000000; see benchmarks/RESULTS.md",
        "backends": load_figures(directory),
    }


def figures_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """The calculator's figures from one growth JSON document."""
    results = document["results"]
    return {
        "bytes_per_row": results["bytes_per_row"],
        "rows": results["rows"],
        "key_format": results["key_format"],
        "server": document["server"],
        "measured_at": document["finished_at"],
    }


@dataclass(frozen=True)
class Projection:
    """Rows and bytes the inbox holds at a steady rate over a retention window.

    :param backend: the backend whose bytes per row were used.
    :param rows: rows held (rate x window x consumers).
    :param bytes_per_row: the measured bytes per row (table + indexes).
    :param total_bytes: rows x bytes_per_row.
    """

    backend: str
    rows: int
    bytes_per_row: float
    total_bytes: float


def project(
    rate: float, window_seconds: float, figures: Mapping[str, Mapping[str, Any]], consumers: int = 1
) -> list[Projection]:
    """Rows and bytes for ``rate`` messages/s kept ``window_seconds`` s, per backend.

    :param rate: messages per second, > 0.
    :param window_seconds: the retention window in seconds, > 0.
    :param figures: from :func:`load_figures`.
    :param consumers: consumers claiming every message (one row each), >= 1.
    :raises ValueError: for a non-positive rate, window or consumer count.
    """
    if rate <= 0 or window_seconds <= 0 or consumers < 1:
        raise ValueError("rate and window must be > 0 and consumers >= 1")
    rows = round(rate * window_seconds * consumers)
    return [
        Projection(name, rows, float(f["bytes_per_row"]), rows * float(f["bytes_per_row"]))
        for name, f in sorted(figures.items())
    ]


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def projection_table(projections: list[Projection], figures: Mapping[str, Any]) -> Table:
    """The calculator's output: one row per backend."""
    out = Table("backend", "rows", "bytes/row (measured at)", "table + indexes")
    for p in projections:
        measured = figures[p.backend]
        out.add_row(
            p.backend,
            f"{p.rows:,}",
            f"{p.bytes_per_row:.0f} ({measured['rows']:,} rows, {measured['key_format']})",
            _human(p.total_bytes),
        )
    return out
