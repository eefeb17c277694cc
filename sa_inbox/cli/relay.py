"""``sa-inbox relay``: publish the outbox's committed rows to a broker, with confirms.

Runs :class:`~sa_inbox.outbox.OutboxRelay` until SIGTERM / SIGINT (or, with
``--until-empty``, until no row is pending or in flight), then prints the totals as JSON.
Once the signals are handled it says so on stderr (``relay running: ...``).
Exit codes (:mod:`._common`): 0 success, 2 usage error (a bad option, an unsupported broker
URL scheme), 3 the command could not run (database or broker unreachable, the outbox table
missing).
"""

from __future__ import annotations

import dataclasses
import json
import signal
from typing import Any

import click
import sqlalchemy as sa

from ..exc import MissingExtra, UnsupportedBroker
from ._common import CannotRun, connected, require_table

__all__ = ["relay_command"]


@click.command("relay")
@click.option("--url", required=True, help="The outbox's database URL (SQLAlchemy form).")
@click.option(
    "--broker",
    required=True,
    help="Broker URL: amqp:// (RabbitMQ), redis:// (Redis Streams), nats:// (JetStream).",
)
@click.option("--table", default="outbox_messages", show_default=True, help="The outbox table.")
@click.option("--schema", default=None, help="The outbox table's schema.")
@click.option("--batch-size", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--max-attempts", default=10, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--visibility-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds after which a claimed, unmarked row is published again by another relay.",
)
@click.option(
    "--backoff",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds before a message the broker refused is retried, doubling per attempt.",
)
@click.option(
    "--max-backoff",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="The longest of those waits. (A broker that cannot be reached costs no attempt: "
    "the relay waits 1 s, doubling to 30 s, before its next claim.)",
)
@click.option("--ordered", is_flag=True, help="Keep each destination's messages in order.")
@click.option(
    "--until-empty",
    is_flag=True,
    help="Stop once nothing is pending or in flight (while the broker cannot be reached, "
    "rows stay pending and the relay waits).",
)
def relay_command(
    url: str,
    broker: str,
    table: str,
    schema: str | None,
    until_empty: bool,
    **settings: Any,
) -> None:
    """Publish committed outbox rows to the broker, each confirmed, then mark them."""
    from ..outbox import Outbox, OutboxRelay
    from ..outbox.publisher import publisher_for
    from ..store.worker import Backoff

    backoff = Backoff(settings.pop("backoff"), settings.pop("max_backoff"))
    try:
        publisher = publisher_for(broker)
    except UnsupportedBroker as exc:
        raise click.BadParameter(str(exc), param_hint="--broker") from exc
    except MissingExtra:
        raise  # exit 2 (._common.Group): the broker's extra is not installed
    except Exception as exc:  # the broker's client: unreachable, refused
        raise CannotRun(f"cannot connect to the broker: {type(exc).__name__}: {exc}") from exc
    try:
        with connected(url, "the relay failed") as engine:
            require_table(engine, table, schema, "outbox table")
            outbox = Outbox(sa.MetaData(), table_name=table, schema=schema)
            relay = OutboxRelay(engine, outbox, publisher, backoff=backoff, **settings)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: relay.stop())
            click.echo("relay running: SIGTERM or SIGINT stops it after its batch", err=True)
            total = relay.run(until_empty=until_empty)
    finally:
        publisher.close()
    click.echo(json.dumps(dataclasses.asdict(total)))
