"""``sa-inbox relay``: publish the outbox's committed rows to a broker, with confirms.

Runs :class:`~sa_inbox.outbox.OutboxRelay` until SIGTERM / SIGINT (or, with
``--until-empty``, until no row is pending or in flight), then prints the totals as JSON.
Once the signals are handled it says so on stderr (``relay running: ...``).
Exit codes (:mod:`._common`): 0 success, 2 usage error (a bad option, an unsupported broker
URL scheme), 3 the command could not run (database or broker unreachable when it starts,
the outbox table missing). A database outage while it runs is waited out
(:mod:`sa_inbox.outage`), as a broker outage is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import click
import sqlalchemy as sa

from .._signals import STOP_SIGNALS, on_signals
from ..exc import MissingExtra, UnsupportedBroker
from ._common import (
    POSITIVE,
    SECONDS,
    WAIT,
    CannotRun,
    Database,
    connected,
    require_table,
    setting,
    url_option,
)
from .metrics import metrics_options, serve_metrics

if TYPE_CHECKING:
    from ..asyncio import AsyncOutboxRelay
    from ..outbox import OutboxRelay
    from ..outbox.publisher import Publisher
    from ..outbox.relay import RelayBatch

__all__ = ["relay_command"]


@click.command("relay")
@url_option("The outbox's database URL (SQLAlchemy form).")
@click.option(
    "--broker",
    required=True,
    help="Broker URL: amqp:// (RabbitMQ), redis:// (Redis Streams), nats:// (JetStream), "
    "sqs:// (Amazon SQS).",
)
@setting("--table", "outbox_messages", None, "The outbox table.")
@click.option("--schema", default=None, help="The outbox table's schema.")
@setting("--batch-size", 100, POSITIVE, "Rows leased per transaction.")
@setting("--max-attempts", 10, POSITIVE, "Publish attempts before a row is dead.")
@setting(
    "--visibility-timeout",
    30.0,
    SECONDS,
    "Seconds after which a leased, unmarked row is published again by another relay.",
)
@setting(
    "--backoff",
    1.0,
    WAIT,
    "Seconds before a message the broker refused is retried, doubling per attempt.",
)
@setting(
    "--max-backoff",
    60.0,
    WAIT,
    "The longest of those waits. (A broker that cannot be reached costs no attempt: "
    "the relay waits 1 s, doubling to 30 s, before its next lease.)",
)
@click.option("--ordered", is_flag=True, help="Keep each destination's messages in order.")
@click.option(
    "--until-empty",
    is_flag=True,
    help="Stop once nothing is pending or in flight (while the broker cannot be reached, "
    "rows stay pending and the relay waits).",
)
@metrics_options
def relay_command(
    url: str,
    broker: str,
    table: str,
    schema: str | None,
    until_empty: bool,
    metrics_port: int | None,
    metrics_host: str,
    **settings: Any,
) -> None:
    """Publish committed outbox rows to the broker, each confirmed, then mark them.

    On an async driver's URL (postgresql+asyncpg, postgresql+psycopg_async,
    mysql+aiomysql, sqlite+aiosqlite) the asyncio relay runs, on that driver, with the
    broker's asyncio publisher (aio-pika, redis.asyncio, nats-py).

    With --metrics-port the relay's counts (sa_inbox_relay_messages_total by outcome,
    sa_inbox_relay_batches_total) are served for Prometheus on
    http://--metrics-host:PORT/metrics (the [prometheus] extra).
    """
    from ..outbox import Outbox, OutboxRelay
    from ..store.worker import Backoff

    settings["backoff"] = Backoff(settings.pop("backoff"), settings.pop("max_backoff"))
    _check_broker(broker)
    if metrics_port is not None:
        settings["on_batch"] = serve_metrics(metrics_port, metrics_host, "relay")
    with connected(url, "the relay failed") as db:
        publisher = _publisher(broker, asynchronous=db.async_engine is not None)
        try:
            db.call(require_table, db.engine, table, schema, "outbox table")
            outbox = Outbox(sa.MetaData(), table_name=table, schema=schema)
            if db.async_engine is None:
                total = _relay(OutboxRelay(db.engine, outbox, publisher, **settings), until_empty)
            else:
                from ..asyncio import AsyncOutboxRelay

                relay = AsyncOutboxRelay(db.async_engine, outbox, publisher, **settings)
                total = db.run(_relay_async(relay, until_empty))
        finally:
            _close(db, publisher)
    click.echo(json.dumps(dataclasses.asdict(total)))


def _check_broker(broker: str) -> None:
    """Refuse ``--broker`` before the database is opened.

    :raises click.BadParameter: (exit 2) for an unsupported scheme.
    :raises MissingExtra: (exit 2) if the broker's extra is not installed.
    """
    from ..outbox.publisher import check_broker

    try:
        check_broker(broker)
    except UnsupportedBroker as exc:
        raise click.BadParameter(str(exc), param_hint="--broker") from exc


def _publisher(broker: str, *, asynchronous: bool) -> Publisher:
    """The publisher of ``--broker``: the asyncio one for an async driver's URL.

    :raises click.BadParameter: (exit 2) for an unsupported scheme.
    :raises CannotRun: (exit 3) if the broker's client refuses the URL.
    """
    from ..outbox.publisher import async_publisher_for, publisher_for

    try:
        return (async_publisher_for if asynchronous else publisher_for)(broker)
    except UnsupportedBroker as exc:
        raise click.BadParameter(str(exc), param_hint="--broker") from exc
    except MissingExtra:
        raise  # exit 2 (._common.Group): the broker's extra is not installed
    except Exception as exc:  # the broker's client: unreachable, refused
        raise CannotRun(f"cannot connect to the broker: {type(exc).__name__}: {exc}") from exc


def _close(db: Database, publisher: Publisher) -> None:
    """Close the publisher's connection (on the event loop for an asyncio publisher)."""
    closing = publisher.close()
    if closing is not None:
        db.run(_awaited(closing))


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


#: What the relay says on stderr once SIGTERM and SIGINT stop it.
RUNNING = "relay running: SIGTERM or SIGINT stops it after its batch"


def _relay(relay: OutboxRelay, until_empty: bool) -> RelayBatch:
    with on_signals(lambda _: relay.stop()):
        click.echo(RUNNING, err=True)
        return relay.run(until_empty=until_empty)


async def _relay_async(relay: AsyncOutboxRelay, until_empty: bool) -> RelayBatch:
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, relay.stop)
    click.echo(RUNNING, err=True)
    try:
        return await relay.run(until_empty=until_empty)
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
