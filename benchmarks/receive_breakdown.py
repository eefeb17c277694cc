"""Where an async receive's time goes: wall time and client CPU per message, interleaved.

Ways of one transaction each (``async with engine.begin() as conn``), rotated message by
message on one engine: ``empty`` (no statement: pool checkout, commit, pool return),
``core`` (a hand-written ``await conn.execute()`` of the backend's insert-or-skip of the
store's row, built once, the column types serialising), ``claim`` (``AsyncInbox.claim``),
``receive`` (``AsyncInboxStore.receive`` of the same message), ``compiled`` (the same
receive on a store of its own table whose statement runs through ``Connection.execute()``,
the compiled-statement path, as every receive did before the driver-SQL receive of
``sa_inbox/dialects/driver_sql.py``), ``driver`` (the receive's
``INSERT`` text and values sent on the driver's own connection inside the same
``engine.begin()``, no SQLAlchemy execution at all: the floor of any receive that runs
through SQLAlchemy's ``Connection``) and, where ``pactix`` is installed (its Python 3.12
virtualenv, see ``peer_pactix.py``), ``pactix`` (``InboxStore.save_received``, as in
``peer_pactix.py``). Per way: the median wall time,
the mean client CPU (``time.process_time``, this process only: Python, the driver, the event
loop) and the statements sent per message (``before_cursor_execute``; the driver's own
``COMMIT``/``ROLLBACK`` calls are not cursor statements). Wall minus CPU is the time spent
waiting for the server (round trips and its work). Used for ``benchmarks/RESULTS.md``::

    python benchmarks/receive_breakdown.py pg 1500     # asyncpg on SA_INBOX_TEST_POSTGRESQL_URL
    python benchmarks/receive_breakdown.py my 1500     # aiomysql on SA_INBOX_TEST_MYSQL_URL

With pactix, each way's throughput over pactix's (messages / the sum of their transaction
times, as ``peer_pactix.py``) is printed too: ``driver``'s is the ceiling of the receive's
ratio with this engine's fixed per-transaction cost.
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
from sa_inbox.claim import PreparedInsert
from sa_inbox.dialects import backend_for
from sa_inbox.store.store import receive_insert

try:
    from pactix import InboxStore as PactixInboxStore
    from pactix import MessageEnvelope, MessageMetadata, PactixConfig
    from pactix.db.tables import inbox_message as PACTIX_TABLE
except ImportError:  # the main virtualenv: no pactix (Python >= 3.12 only)
    PACTIX = None
else:
    PACTIX = PactixInboxStore(PactixConfig())

WAYS = ("empty", "core", "claim", "receive", "compiled", "driver") + (("pactix",) if PACTIX else ())
METADATA = sa.MetaData()
STORE = AsyncInboxStore(InboxStore(METADATA, table_name="bd_store"))
# The receive on Connection.execute(): a PreparedInsert without row_keys gives single() the
# statement itself (private attribute, benchmark only).
COMPILED = AsyncInboxStore(InboxStore(METADATA, table_name="bd_compiled"))
COMPILED.sync_store._insert = PreparedInsert(COMPILED.table, build=receive_insert)
CORE = InboxStore(METADATA, table_name="bd_core")
CLAIMS = AsyncInbox(Inbox(METADATA, table_name="bd_claims"))


async def raw_insert(conn: AsyncConnection, message_id: str, body: Any) -> None:
    """The receive's row, its INSERT sent on the driver connection (no SQLAlchemy
    execution), in the transaction of ``conn``."""
    raw = await conn.get_raw_connection()
    now = datetime.datetime.now(datetime.UTC)
    text = json.dumps(body)
    columns = "message_id, consumer_name, message_type, payload, status, received_at, available_at"
    if conn.dialect.name == "postgresql":
        # SQLAlchemy's asyncpg adapter opens its transaction at the first statement
        # (private, benchmark only): the same BEGIN a receive's first statement sends.
        if raw.dbapi_connection._transaction is None:
            await raw.dbapi_connection._start_transaction()
        await raw.driver_connection.execute(
            f"INSERT INTO bd_store ({columns}, attempts) VALUES ($1, 'billing', "
            "'payment.captured', $2::json, 'pending', $3, $3, 0) ON CONFLICT DO NOTHING",
            message_id,
            text,
            now,
        )
        return
    naive = now.replace(tzinfo=None)
    async with raw.driver_connection.cursor() as cursor:
        await cursor.execute(
            f"INSERT IGNORE INTO bd_store ({columns}, attempts) VALUES (%s, 'billing', "
            "'payment.captured', %s, 'pending', %s, %s, 0)",
            (message_id, text, naive, naive),
        )


async def one(way: str, conn: AsyncConnection, core: Any, message_id: str, i: int) -> None:
    body = {"order": f"o-{i:07d}", "amount": i % 100, "currency": "EUR"}
    if way == "driver":
        await raw_insert(conn, f"{message_id}-driver", body)  # bd_store, next to receive's
    elif way == "pactix":
        envelope = MessageEnvelope(MessageMetadata(message_id, "payment.captured"), body)
        assert (await PACTIX.save_received(conn, "billing", envelope)).inserted
    elif way == "compiled":
        await COMPILED.receive(
            conn, message_id, body, consumer_name="billing", message_type="payment.captured"
        )
    elif way == "receive":
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
        if PACTIX:
            await conn.run_sync(PACTIX_TABLE.drop, checkfirst=True)
            await conn.run_sync(PACTIX_TABLE.create)
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
        stored = {
            way: (await conn.execute(sa.select(sa.func.count()).select_from(t))).scalar_one()
            for way, t in (("driver", STORE.table), ("pactix", PACTIX_TABLE if PACTIX else None))
            if t is not None
        }
        await conn.run_sync(METADATA.drop_all)
        if PACTIX:
            await conn.run_sync(PACTIX_TABLE.drop)
    await engine.dispose()
    # bd_store holds the receive's and the driver's rows: 50 warm-up and the timed ones each.
    expected = {"driver": 2 * (messages + 50), "pactix": messages + 50}
    if stored != {way: expected[way] for way in stored}:
        raise SystemExit(f"wrong state: rows {stored}, expected {expected}")
    per_second = {w: messages / sum(wall[w]) for w in WAYS}
    return {
        "backend": backend,
        "messages": messages,
        "loadavg_1min": float(Path("/proc/loadavg").read_text().split()[0]),
        "ways": {
            w: {
                "wall_median_us": statistics.median(wall[w]) * 1e6,
                "cpu_mean_us": statistics.mean(cpu[w]) * 1e6,
                "statements_per_message": statements[w] / messages,
                "per_second": per_second[w],
                **({"x_pactix": per_second[w] / per_second["pactix"]} if PACTIX else {}),
            }
            for w in WAYS
        },
    }


if __name__ == "__main__":
    result = asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1500))
    print(json.dumps(result, indent=2))
