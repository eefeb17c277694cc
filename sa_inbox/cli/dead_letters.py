"""``sa-inbox dead-letters``: count, list and replay a broker's dead-letter queue / stream.

``count`` prints ``{"queue": ..., "dead_letters": N}``; ``list`` a table of the dead letters
(``--json``: one JSON object per line); ``replay`` moves them back to the queue / stream /
subject each came from (:func:`sa_inbox.brokers.dead_letters.replay`) and prints
``{"replayed": N, ...}``, or ``{"would_replay": N, ...}`` with ``--dry-run``. Each takes the
broker's URL (``--broker``) and the dead-letter queue's or stream's name (``--queue``).

Exit codes (:mod:`._common`): 0 success; 1 ``replay`` left some chosen dead letters in
place (their source refused them or they name none: listed under ``refused`` /
``unsourced``); 2 usage error, or the broker's extra is not installed; 3 the broker cannot
be reached or the queue / stream does not exist (what a replay moved before stays moved:
run it again).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from ..brokers.delivery import DeadLetterReason
from ._common import EXIT_FAILED, POSITIVE, SECONDS, CannotRun, options, setting

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ..brokers.dead_letters import DeadLetter

__all__ = ["dead_letters_group", "reading"]

REASONS = click.Choice([reason.value for reason in DeadLetterReason])


#: ``--broker``, ``--queue`` and ``--timeout``: the options of every ``dead-letters`` command.
target_options = options(
    click.option(
        "--broker",
        required=True,
        help="The broker's URL: amqp://user:pw@host/vhost, redis://host/0, nats://host.",
    ),
    click.option(
        "--queue",
        required=True,
        help="The dead-letter queue (RabbitMQ) or stream (Redis, NATS JetStream).",
    ),
    setting("--timeout", 10.0, SECONDS, "Seconds to connect and to wait for each reply."),
)


#: ``--reason`` and ``--limit``: which dead letters ``list`` and ``replay`` take.
choice_options = options(
    click.option("--reason", type=REASONS, default=None, help="Only those of this reason."),
    click.option("--limit", type=POSITIVE, default=None, help="At most this many."),
)


@contextmanager
def reading() -> Iterator[None]:
    """The library's errors as the command's: a bad argument exit 2, a broker that cannot
    be read exit 3 (:class:`~._common.CannotRun`); a missing extra is left to the group."""
    from ..exc import DeadLetterQueueUnavailable, InvalidArgument, UnsupportedBroker

    try:
        yield
    except (InvalidArgument, UnsupportedBroker) as exc:
        raise click.UsageError(str(exc)) from exc
    except DeadLetterQueueUnavailable as exc:
        raise CannotRun(str(exc)) from exc


@click.group("dead-letters")
def dead_letters_group() -> None:
    """Count, list and replay a broker's dead-letter queue / stream."""


@dead_letters_group.command("count")
@target_options
def count_command(broker: str, queue: str, timeout: float) -> None:
    """Print how many dead letters the queue / stream holds, as JSON."""
    from ..brokers.dead_letters import DeadLetterTarget, count

    with reading():
        found = count(broker, queue, timeout=timeout)
        shown = DeadLetterTarget.of(broker, queue).display
    click.echo(json.dumps({"queue": shown, "dead_letters": found}))


@dead_letters_group.command("list")
@target_options
@choice_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per dead letter.")
def list_command(
    broker: str,
    queue: str,
    timeout: float,
    reason: str | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """List the dead letters, oldest first, and leave them in place.

    Each shows where it is, its key, its reason and detail, and the queue / stream /
    subject a replay puts it back on.
    """
    from ..brokers.dead_letters import peek

    with reading():
        found = peek(broker, queue, reason=reason, limit=limit, timeout=timeout)
    if as_json:
        for letter in found:
            click.echo(json.dumps(letter.as_dict()))
        return
    from rich.console import Console

    Console().print(render(found))


def render(found: list[DeadLetter]) -> RenderableType:
    """The rich table of ``list``."""
    from rich.table import Table

    table = Table("ref", "message id", "reason", "source", "detail", title="Dead letters")
    for letter in found:
        table.add_row(
            letter.ref,
            letter.message_id or "-",
            letter.reason or "-",
            letter.source or "-",
            (letter.detail or "")[:120],
        )
    return table


@dead_letters_group.command("replay")
@target_options
@choice_options
@click.option("--dry-run", is_flag=True, help="Only count what would be replayed; move nothing.")
def replay_command(
    broker: str,
    queue: str,
    timeout: float,
    reason: str | None,
    limit: int | None,
    dry_run: bool,
) -> None:
    """Move dead letters back to the queue / stream / subject each came from.

    Each is published there with its key, confirmed by the broker, before it is removed
    from the dead-letter queue, so a replay killed halfway duplicates a message (the inbox
    skips it) and never loses one. Replay once the cause is fixed: a message that fails
    again is dead-lettered again. Exit 1 if some chosen dead letters stayed (see
    "refused" and "unsourced").
    """
    from ..brokers.dead_letters import replay

    with reading():
        result = replay(broker, queue, dry_run=dry_run, reason=reason, limit=limit, timeout=timeout)
    click.echo(json.dumps(result.as_dict()))
    if not dry_run and not result.complete:
        click.get_current_context().exit(EXIT_FAILED)
