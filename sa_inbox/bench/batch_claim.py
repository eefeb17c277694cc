"""Batch claim: claim_many() at batch sizes 1, 10, 100, 500 and 1000.

One process claims fresh UUIDv4 ids, one batch per transaction, through
:meth:`sa_inbox.Inbox.claim_many` on one open connection. Each batch size claims
``max(messages, 10 x size)`` ids, so every size runs at least ten transactions. Figures:
messages per second and microseconds per message (wall time), median over repeats.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from rich.progress import Progress
from rich.table import Table

from .db import BenchSchema, make_engine
from .runner import BenchConfig
from .workers import BenchError

__all__ = ["BATCH_SIZES", "claim_batches", "run", "table"]

BATCH_SIZES = (1, 10, 100, 500, 1000)
CONSUMER = "billing"
DEFAULT_MESSAGES = 1000


def claim_batches(schema: BenchSchema, conn: sa.Connection, batches: list[list[str]]) -> float:
    """claim_many(), one transaction per batch; returns the seconds taken.

    :raises BenchError: if a batch of fresh ids did not come back claimed in full.
    """
    started = time.perf_counter()
    for batch in batches:
        with conn.begin():
            claimed = schema.inbox.claim_many(conn, batch, CONSUMER)
        if len(claimed) != len(batch):
            raise BenchError(f"claim_many claimed {len(claimed)} of {len(batch)} fresh ids")
    return time.perf_counter() - started


def _batches(total: int, size: int) -> list[list[str]]:
    ids = [str(uuid.uuid4()) for _ in range(total)]
    return [ids[i : i + size] for i in range(0, total, size)]


def run(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Claim fresh ids in batches of each size; check the inbox holds every id once."""
    engine = make_engine(config.url)
    schema = BenchSchema(engine)
    cells = [(repeat, size) for repeat in range(config.repeat) for size in BATCH_SIZES]
    task = progress.add_task("batch claim", total=len(cells))
    measured: list[dict[str, Any]] = []
    try:
        for repeat, size in cells:
            schema.reset()
            total = max(config.messages or DEFAULT_MESSAGES, 10 * size)
            batches = _batches(total, size)
            with engine.connect() as conn:
                seconds = claim_batches(schema, conn, batches)
            rows = schema.state()["inbox_rows"]
            if rows != total:
                raise BenchError(f"inbox holds {rows} rows after claiming {total} ids")
            measured.append(
                {
                    "repeat": repeat,
                    "batch_size": size,
                    "messages": total,
                    "transactions": len(batches),
                    "inbox_rows": rows,
                    "seconds": seconds,
                    "per_second": total / seconds,
                    "us_per_message": seconds * 1e6 / total,
                }
            )
            progress.advance(task)
        schema.drop()
    finally:
        engine.dispose()
    return {"cells": measured, "summary": summary(measured)}


def summary(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median messages/s and µs/message per batch size, and the speed-up over size 1."""
    rows: list[dict[str, Any]] = []
    for size in BATCH_SIZES:
        cells_of = [c for c in cells if c["batch_size"] == size]
        if not cells_of:
            continue
        rows.append(
            {
                "batch_size": size,
                "repeats": len(cells_of),
                "per_second": statistics.median(c["per_second"] for c in cells_of),
                "us_per_message": statistics.median(c["us_per_message"] for c in cells_of),
            }
        )
    if rows:
        base = rows[0]["us_per_message"]
        for row in rows:
            row["speedup"] = base / row["us_per_message"]
    return rows


def table(results: Mapping[str, Any]) -> Table:
    """Per batch size: messages/s, µs per message, speed-up over one id per transaction."""
    out = Table("batch size", "msg/s", "µs/msg", "x batch 1")
    for row in results["summary"]:
        out.add_row(
            str(row["batch_size"]),
            f"{row['per_second']:.0f}",
            f"{row['us_per_message']:.1f}",
            f"{row['speedup']:.1f}",
        )
    return out
