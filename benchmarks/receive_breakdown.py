"""Where an async receive's time goes: wall time and client CPU per message, interleaved.

Four ways of one transaction each (``async with engine.begin() as conn``), rotated message by
message on one engine: ``empty`` (no statement: pool checkout, commit, pool return),
``core`` (a hand-written ``await conn.execute()`` of the backend's insert-or-skip of the
store's row, built once, the column types serialising), ``claim`` (``AsyncInbox.claim``) and
``receive`` (``AsyncInboxStore.receive`` of the same message). Per way: the median wall time,
the mean client CPU (``time.process_time``, this process only: Python, the driver, the event
loop) and the statements sent per message (``before_cursor_execute``; the driver's own
``COMMIT``/``ROLLBACK`` calls are not cursor statements). Wall minus CPU is the time spent
waiting for the server (round trips and its work). Used for ``benchmarks/RESULTS.md``::

    python benchmarks/receive_breakdown.py pg 1500     # asyncpg on SA_INBOX_TEST_POSTGRESQL_URL
    python benchmarks/receive_breakdown.py my 1500     # aiomysql on SA_INBOX_TEST_MYSQL_URL
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from sa_inbox import Inbox, InboxStore
from sa_inbox.asyncio import AsyncInbox, AsyncInboxStore
from sa_inbox.dialects import backend_for

WAYS = ("empty", "core", "claim", "receive")
METADATA = sa.MetaData()
STORE = AsyncInboxStore(InboxStore(METADATA, table_name="bd_store"))
CORE = InboxStore(METADATA, table_name="bd_core")
CLAIMS = AsyncInbox(Inbox(METADATA, table_name="bd_claims"))


async def one(way: str, conn: AsyncConnection, core: Any, message_id: str, i: int) -> None:
    body = {"order": f"o-{i:07d}", "amount": i % 100, "currency": "EUR"}
    if way == "receive":
        await STORE.receive(
            conn, message_id, body, consumer_name="billing", message_type="payment.captured"
        )
    elif way == "claim":
        await CLAIMS.claim(conn, message_id, "billing")
    elif way == "core":
        now = datetime.datetime.now(datetime.UTC)
        row = {
            "message_id": message_id,
            "consumer_name": "billing",
            "aggregate_id": None,
            "message_type": "payment.captured",
            "payload": body,
            "status": "pending",
            "received_at": now,
            "available_at": now,
            "attempts": 0,
        }
        await conn.execute(core, row, execution_options={"preserve_rowcount": True})


async def main(backend: str, messages: int) -> dict[str, Any]:
    variable, driver = {
        "pg": ("SA_INBOX_TEST_POSTGRESQL_URL", "postgresql+asyncpg"),
        "my": ("SA_INBOX_TEST_MYSQL_URL", "mysql+aiomysql"),
    }[backend]
    engine = create_async_engine(
        sa.make_url(os.environ[variable]).set(drivername=driver), pool_size=2, max_overflow=2
    )
    async with engine.begin() as conn:
        await conn.run_sync(METADATA.drop_all)
        await conn.run_sync(METADATA.create_all)
    core = backend_for(engine.dialect.name).claim.insert_or_skip(CORE.table)
    sent: list[str] = []
    sa.event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    prefix = uuid.uuid4().hex[:6]
    wall: dict[str, list[float]] = {w: [] for w in WAYS}
    cpu: dict[str, list[float]] = {w: [] for w in WAYS}
    statements = dict.fromkeys(WAYS, 0)
    for i in range(-50, messages):
        shift = i % len(WAYS)
        for way in WAYS[shift:] + WAYS[:shift]:
            sent.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            async with engine.begin() as conn:
                await one(way, conn, core, f"{prefix}-{i}", i)
            if i >= 0:
                wall[way].append(time.perf_counter() - t0)
                cpu[way].append(time.process_time() - c0)
                statements[way] += len(sent)
    async with engine.begin() as conn:
        await conn.run_sync(METADATA.drop_all)
    await engine.dispose()
    return {
        "backend": backend,
        "messages": messages,
        "loadavg_1min": float(Path("/proc/loadavg").read_text().split()[0]),
        "ways": {
            w: {
                "wall_median_us": statistics.median(wall[w]) * 1e6,
                "cpu_mean_us": statistics.mean(cpu[w]) * 1e6,
                "statements_per_message": statements[w] / messages,
            }
            for w in WAYS
        },
    }


if __name__ == "__main__":
    result = asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1500))
    print(json.dumps(result, indent=2))
