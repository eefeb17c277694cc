"""pactix 0.2.0's worker as a peer contender of the ``store_drain`` scenario
(:class:`benchmarks.drain_peers.Peer`), when importable.

pactix is async only and needs Python >= 3.12: ``benchmarks/peer_pactix_drain.py`` runs the
scenario from a 3.12 virtualenv with ``pip install pactix==0.2.0`` and this module as a
peer (:class:`benchmarks.drain_peers.WithPeers`), so the drain cells get a ``pactix``
contender next to sa-inbox's two transaction modes. Elsewhere :func:`available` is False and
the scenario runs without it.

What runs: the messages are stored in pactix's own ``inbox_message`` table (made from its
metadata) as its ``InboxStore.save_received`` stores them (the rows built by pactix's own
``InboxMessageRecord.pending``, inserted in polls of 100); each worker process loops
``await InboxRunner.new_unordered(...).run_once(engine)`` (claim up to
``PactixConfig.inbox_batch_size`` = 100 rows with ``FOR UPDATE SKIP LOCKED``, run the
handler, one ``mark_processed`` transaction per message) on asyncpg (PostgreSQL) or
aiomysql (MariaDB), with a no-op handler, until no row is ``pending`` or ``processing``. A
``run_once`` that raises (a deadlock) is counted in ``errors`` and the loop goes on; its rows
come back after pactix's lease (30 s), which the drain then waits for, as a user would.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from sa_inbox.bench.workers import BenchError

__all__ = ["DRIVERS", "NAME", "available", "check", "drain_worker", "receive"]

#: The contender's name in the scenario's results (``x_pactix``: batch over pactix).
NAME = "pactix"

#: The async driver pactix runs on, per backend.
DRIVERS = {"postgresql": "postgresql+asyncpg", "mysql": "mysql+aiomysql"}
SOURCE = "bench"
POLL = 100


def available(url: str) -> bool:
    """Whether pactix is importable and runs on ``url``'s backend."""
    backend = sa.make_url(url).get_backend_name()
    return backend in DRIVERS and importlib.util.find_spec("pactix") is not None


def _async_url(url: str) -> str:
    parsed = sa.make_url(url)
    driver = DRIVERS[parsed.get_backend_name()]
    return parsed.set(drivername=driver).render_as_string(hide_password=False)


def receive(url: str, messages: int) -> float:
    """Drop and create pactix's table, store ``messages`` pending rows; the seconds taken."""
    return asyncio.run(_receive(url, messages))


async def _receive(url: str, messages: int) -> float:
    from pactix import MessageMetadata, PactixConfig
    from pactix.db.tables import inbox_message
    from pactix.inbox import InboxMessageRecord
    from pactix.inbox.store import _record_values
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(_async_url(url))
    dialect = "mysql" if engine.dialect.name in ("mysql", "mariadb") else "postgresql"
    policy = PactixConfig().retry_policy
    try:
        async with engine.begin() as conn:
            await conn.run_sync(inbox_message.drop, checkfirst=True)
            await conn.run_sync(inbox_message.create)
        started = time.perf_counter()
        for start in range(0, messages, POLL):
            rows = [
                _record_values(
                    InboxMessageRecord.pending(
                        SOURCE,
                        MessageMetadata(message_id=f"bench-{i:07d}", event_type="bench"),
                        {"amount": i % 100},
                        policy,
                    ),
                    dialect,
                )
                for i in range(start, min(messages, start + POLL))
            ]
            async with engine.begin() as conn:
                await conn.execute(inbox_message.insert(), rows)
        return time.perf_counter() - started
    finally:
        await engine.dispose()


def drain_worker(
    params: Mapping[str, Any], worker: int, workers: int, go: Callable[[], float]
) -> dict[str, Any]:
    """A worker process (:data:`~sa_inbox.bench.workers.WorkerFunction`): pactix's
    ``run_once`` in a loop until the table has nothing left to do."""
    return asyncio.run(_drain(params["url"], go))


async def _drain(url: str, go: Callable[[], float]) -> dict[str, Any]:
    from pactix import PactixConfig
    from pactix.db.tables import inbox_message
    from pactix.inbox import (
        AcceptAllEvents,
        HandleOutcome,
        InboxRunner,
        InboxStore,
        ProcessAll,
        inbox_handler,
    )
    from sqlalchemy.ext.asyncio import create_async_engine

    async def noop(record: Any) -> Any:
        return HandleOutcome.processed()

    engine = create_async_engine(_async_url(url), pool_size=2, max_overflow=2)
    runner = InboxRunner.new_unordered(
        InboxStore(PactixConfig()), inbox_handler(noop), ProcessAll(), AcceptAllEvents()
    )
    unfinished = (
        sa.select(inbox_message.c.id)
        .where(inbox_message.c.status.in_(("pending", "processing")))
        .limit(1)
    )
    processed = errors = 0
    try:
        async with engine.connect():
            pass
        started = go()
        while True:
            try:
                summary = await runner.run_once(engine)
            except Exception:
                errors += 1
                continue
            processed += summary.processed
            if summary.claimed:
                continue
            async with engine.connect() as conn:
                if (await conn.execute(unfinished)).first() is None:
                    break
            await asyncio.sleep(0.05)
        finished = time.perf_counter()
    finally:
        await engine.dispose()
    return {
        "started": started,
        "finished": finished,
        "latencies": [],
        "done": processed,
        "errors": errors,
    }


def check(url: str, messages: int) -> None:
    """:raises BenchError: unless every row of pactix's table is ``processed``."""
    from pactix.db.tables import inbox_message

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            counts: dict[str, int] = dict(
                conn.execute(
                    sa.select(inbox_message.c.status, sa.func.count()).group_by(
                        inbox_message.c.status
                    )
                ).all()
            )
        with engine.begin() as conn:
            inbox_message.drop(conn)
    finally:
        engine.dispose()
    if counts != {"processed": messages}:
        raise BenchError(f"pactix drain left {counts} for {messages} messages")
