"""Outbox: the cost of outbox.publish() in the handler's transaction, and relay throughput.

Two parts:

* **write cost**: the claim-overhead business transaction *with the claim* (a ledger row,
  the worker's own balance, commit), without and with one ``outbox.publish()`` of a small
  JSON message in the same transaction, run *paired* (alternately, message by message, in
  the same worker processes), through the ORM (the session extension's claim) and Core
  (``inbox.claim()``), at 1 … W worker processes. The ratio is the outbox's cost as a
  handler sees it;
* **relay throughput** (needs a RabbitMQ URL: ``--broker`` / ``SA_INBOX_BENCH_AMQP_URL``):
  ``messages`` committed outbox rows relayed to a fresh quorum queue by 1 and 4
  :class:`~sa_inbox.outbox.OutboxRelay` processes (batches of 100, pika: each message
  confirmed by the broker before the next, then one ``UPDATE`` per batch), and by 1 and 4
  :class:`~sa_inbox.asyncio.AsyncOutboxRelay` processes on the backend's first async driver
  (aio-pika: a batch published, then all its confirms awaited): messages per second from
  the first claim to the last mark. The queue must then hold exactly ``messages`` messages
  and every row be ``dispatched``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from rich.progress import Progress
from rich.table import Table

from .._optional import import_optional_dependency
from ..outbox import Outbox, OutboxRelay
from .claim_overhead import (
    CLAIM_SESSIONS,
    CONSUMER,
    WARMUP,
    Context,
    _core_business,
    _orm_business,
    core_claim,
    orm_claim,
    run_in_turn,
)
from .db import BenchSchema, make_engine
from .runner import BenchConfig
from .workers import BenchError, WorkerPool, levels, share

__all__ = [
    "BROKER_VARIABLE",
    "DEFAULT_MESSAGES",
    "RELAY_LEVELS",
    "core_outbox",
    "measure_relay",
    "measure_write",
    "orm_outbox",
    "run",
    "table",
]

DEFAULT_MESSAGES = 1000
#: Relay processes measured.
RELAY_LEVELS = (1, 4)
#: The environment variable read for the broker when ``--broker`` is not given.
BROKER_VARIABLE = "SA_INBOX_BENCH_AMQP_URL"
OUTBOX_TABLE = "bench_outbox"
DESTINATION = "bench-outbox"
#: The outbox of every worker process (its MetaData is its own: the table is created by run()).
OUTBOX = Outbox(sa.MetaData(), table_name=OUTBOX_TABLE)


def _payload(message_id: str) -> dict[str, str]:
    return {"payment": message_id, "amount": "1.00", "currency": "EUR"}


def orm_outbox(ctx: Context, message_id: str) -> None:
    """ORM: register_claim() + business transaction + outbox.publish()"""
    from ..session import register_claim

    with CLAIM_SESSIONS(bind=ctx.conn) as session, session.begin():
        register_claim(session, ctx.inbox, message_id, CONSUMER)
        _orm_business(session, ctx, message_id)
        OUTBOX.publish(session, DESTINATION, _payload(message_id))


def core_outbox(ctx: Context, message_id: str) -> None:
    """Core: inbox.claim() + business transaction + outbox.publish()"""
    with ctx.conn.begin():
        if ctx.inbox.claim(ctx.conn, message_id, CONSUMER):
            _core_business(ctx.conn, ctx, message_id)
            OUTBOX.publish(ctx.conn, DESTINATION, _payload(message_id))


#: layer -> (with the claim, with the claim and the outbox)
LAYERS: dict[str, tuple[Callable[[Context, str], None], Callable[[Context, str], None]]] = {
    "orm": (orm_claim, orm_outbox),
    "core": (core_claim, core_outbox),
}


def measure_write(
    params: Mapping[str, Any], worker: int, workers: int, go: Callable[[], float]
) -> dict[str, Any]:
    """One worker's part of a paired write-cost cell (in a worker process)."""
    engine = make_engine(params["url"])
    ctx = Context(engine, account=worker)
    ids = [str(uuid.uuid4()) for _ in range(share(params["messages"], worker, workers))]
    try:
        started, finished, by_kind = run_in_turn(ctx, LAYERS[params["layer"]], ids, go)
    finally:
        ctx.close()
        engine.dispose()
    return {
        "started": started,
        "finished": finished,
        "claim_only": by_kind[0],
        "with_outbox": by_kind[1],
        "published": len(by_kind[1]) + WARMUP,
    }


def measure_relay(
    params: Mapping[str, Any], worker: int, workers: int, go: Callable[[], float]
) -> dict[str, Any]:
    """One relay process draining the outbox to RabbitMQ (in a worker process): the sync
    relay with pika (one confirm per message), or with ``client="aio-pika"`` the asyncio
    relay on the backend's first async driver with confirms pipelined per batch."""
    if params.get("client") == "aio-pika":
        return asyncio.run(_measure_async_relay(params, go))
    from ..brokers.rabbitmq import Publisher

    engine = make_engine(params["url"])
    publisher = Publisher(params["broker"])
    try:
        relay = OutboxRelay(engine, OUTBOX, publisher, batch_size=100, poll_interval=0.01)
        publisher.connect()
        with engine.connect():
            pass  # the pool's first connection, before the clock starts
        started = go()
        total = relay.run(until_empty=True)
        finished = time.perf_counter()
    finally:
        publisher.close()
        engine.dispose()
    return {"started": started, "finished": finished, "dispatched": total.dispatched}


async def _measure_async_relay(
    params: Mapping[str, Any], go: Callable[[], float]
) -> dict[str, Any]:
    from ..asyncio import AsyncOutboxRelay
    from ..brokers.rabbitmq import AsyncPublisher
    from .async_layer import async_layers, async_url, make_async_engine

    url = async_url(params["url"], async_layers(params["url"])[0])
    engine = make_async_engine(url)
    publisher = AsyncPublisher(params["broker"])
    try:
        relay = AsyncOutboxRelay(engine, OUTBOX, publisher, batch_size=100, poll_interval=0.01)
        await publisher.connect()
        async with engine.connect():
            pass
        started = go()  # a short barrier wait: blocking the loop here is harmless
        total = await relay.run(until_empty=True)
        finished = time.perf_counter()
    finally:
        await publisher.close()
        await engine.dispose()
    return {"started": started, "finished": finished, "dispatched": total.dispatched}


def _write_cells(config: BenchConfig, pool: WorkerPool, progress: Progress) -> list[dict[str, Any]]:
    messages = config.messages or DEFAULT_MESSAGES
    engine = make_engine(config.url)
    schema = BenchSchema(engine)
    cells = [
        (r, w, layer)
        for r in range(config.repeat)
        for w in levels(config.workers)
        for layer in LAYERS
    ]
    task = progress.add_task("outbox write cost", total=len(cells))
    out = []
    try:
        for repeat, workers, layer in cells:
            schema.reset()
            _reset_outbox(engine)
            params = {"url": config.url, "layer": layer, "messages": messages}
            results = pool.run(f"{__name__}:measure_write", params, workers)
            published = sum(r["published"] for r in results)
            rows = _count(engine)
            if rows != published:
                raise BenchError(f"{rows} outbox rows for {published} publishing transactions")
            plain = statistics.median(x for r in results for x in r["claim_only"]) * 1e6
            with_outbox = statistics.median(x for r in results for x in r["with_outbox"]) * 1e6
            out.append(
                {
                    "repeat": repeat,
                    "workers": workers,
                    "layer": layer,
                    "messages": messages,
                    "outbox_rows": rows,
                    "claim_median_us": plain,
                    "outbox_median_us": with_outbox,
                    "ratio": with_outbox / plain,
                }
            )
            progress.advance(task)
        schema.drop()
        OUTBOX.table.drop(engine, checkfirst=True)
    finally:
        engine.dispose()
    return out


def _relay_cells(
    config: BenchConfig, broker: str, pool: WorkerPool, progress: Progress
) -> list[dict[str, Any]]:
    import pika  # run() checked the extra

    messages = config.messages or DEFAULT_MESSAGES
    engine = make_engine(config.url)
    connection = pika.BlockingConnection(pika.URLParameters(broker))
    channel = connection.channel()
    from .async_layer import async_layers

    clients = ["pika", *(["aio-pika"] if async_layers(config.url) else [])]
    cells = [
        (r, client, n)
        for r in range(config.repeat)
        for client in clients
        for n in RELAY_LEVELS
        if n <= pool.size
    ]
    task = progress.add_task("outbox relay to RabbitMQ", total=len(cells))
    out = []
    try:
        for repeat, client, relays in cells:
            queue = f"{DESTINATION}-{uuid.uuid4().hex[:8]}"
            channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
            try:
                _reset_outbox(engine)
                _fill(engine, queue, messages)
                params = {"url": config.url, "broker": broker, "client": client}
                results = pool.run(f"{__name__}:measure_relay", params, relays)
                queued = channel.queue_declare(queue, passive=True).method.message_count
            finally:
                channel.queue_delete(queue)
            dispatched = sum(r["dispatched"] for r in results)
            if (
                dispatched != messages
                or queued != messages
                or _count(engine, "dispatched") != messages
            ):
                raise BenchError(
                    f"relayed {dispatched}, queued {queued}, for {messages} outbox rows"
                )
            wall = max(r["finished"] for r in results) - min(r["started"] for r in results)
            out.append(
                {
                    "repeat": repeat,
                    "client": client,
                    "relays": relays,
                    "messages": messages,
                    "seconds": wall,
                    "per_second": messages / wall,
                }
            )
            progress.advance(task)
        OUTBOX.table.drop(engine, checkfirst=True)
    finally:
        connection.close()
        engine.dispose()
    return out


def _reset_outbox(engine: sa.Engine) -> None:
    OUTBOX.table.drop(engine, checkfirst=True)
    OUTBOX.table.create(engine)


def _fill(engine: sa.Engine, destination: str, messages: int) -> None:
    rows = [OUTBOX.row(destination, _payload(str(n))) for n in range(messages)]
    with engine.begin() as conn:
        for start in range(0, len(rows), 1000):
            conn.execute(OUTBOX.table.insert(), rows[start : start + 1000])


def _count(engine: sa.Engine, status: str | None = None) -> int:
    query = sa.select(sa.func.count()).select_from(OUTBOX.table)
    if status is not None:
        query = query.where(OUTBOX.table.c.status == status)
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def run(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """The write-cost cells, then (with a broker URL) the relay cells.

    :raises sa_inbox.exc.MissingExtra: with a broker URL, before any cell, if the
        ``rabbitmq`` extra is not installed.
    """
    broker = config.options.get("broker") or os.environ.get(BROKER_VARIABLE)
    if broker:
        import_optional_dependency("pika", extra="rabbitmq", module=__name__)
    with WorkerPool(max(config.workers, max(RELAY_LEVELS) if broker else 1)) as pool:
        write = _write_cells(config, pool, progress)
        relay = _relay_cells(config, broker, pool, progress) if broker else []
    return {
        "workers_kind": "processes",
        "write_cells": write,
        "relay_cells": relay,
        "relay_skipped": None if broker else f"no broker URL (--broker or {BROKER_VARIABLE})",
        "summary": summary(write, relay),
    }


def summary(write: list[dict[str, Any]], relay: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repeats: per (workers, layer) the paired ratio (and its min-max), per
    relay count the messages per second."""
    rows = []
    for workers, layer in sorted({(c["workers"], c["layer"]) for c in write}):
        cells = [c for c in write if (c["workers"], c["layer"]) == (workers, layer)]
        ratios = [c["ratio"] for c in cells]
        rows.append(
            {
                "workers": workers,
                "layer": layer,
                "claim_median_us": statistics.median(c["claim_median_us"] for c in cells),
                "outbox_median_us": statistics.median(c["outbox_median_us"] for c in cells),
                "ratio": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
            }
        )
    relays = []
    for client, n in sorted({(c["client"], c["relays"]) for c in relay}, reverse=True):
        rates = [c["per_second"] for c in relay if (c["client"], c["relays"]) == (client, n)]
        relays.append(
            {
                "client": client,
                "relays": n,
                "per_second": statistics.median(rates),
                "per_second_min": min(rates),
                "per_second_max": max(rates),
            }
        )
    return {"write": rows, "relay": relays}


def table(results: Mapping[str, Any]) -> Table:
    """The paired write-cost ratios, then the relay throughput."""
    out = Table("part", "workers / relays", "layer", "µs claim only", "µs + outbox", "figure")
    for row in results["summary"]["write"]:
        spread = f"{row['ratio_min']:.2f}-{row['ratio_max']:.2f}"
        out.add_row(
            "write cost",
            str(row["workers"]),
            row["layer"],
            f"{row['claim_median_us']:.0f}",
            f"{row['outbox_median_us']:.0f}",
            f"paired ratio {row['ratio']:.2f} ({spread})",
        )
    for row in results["summary"]["relay"]:
        spread = f"{row['per_second_min']:.0f}-{row['per_second_max']:.0f}"
        out.add_row(
            f"relay ({row['client']})",
            str(row["relays"]),
            "-",
            "-",
            "-",
            f"{row['per_second']:.0f} msg/s ({spread})",
        )
    if results.get("relay_skipped"):
        out.caption = f"relay skipped: {results['relay_skipped']}"
    return out
