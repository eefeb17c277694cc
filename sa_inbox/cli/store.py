"""``sa-inbox store``: inspect the inbox store and replay its rows.

``store counts`` prints the rows per status; ``store replay`` resets dead or done rows to
pending. Both cover every consumer unless ``--consumer`` names one. Exit codes
(:mod:`._common`): 0 success, 2 usage error (or a replay of done rows without ``--yes``:
nothing changed), 3 the command could not run (database unreachable, store table missing).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from ._common import EXIT_USAGE, bind_store, connected

__all__ = ["ConfirmationNeeded", "store_group", "store_options"]


def store_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--url``, ``--table``, ``--schema`` and ``--consumer``: the options of every command
    on the store table (``worker`` and ``store ...``)."""
    options = [
        click.option("--url", required=True, help="Database URL (SQLAlchemy form)."),
        click.option(
            "--table", default="inbox_store", show_default=True, help="The store table's name."
        ),
        click.option("--schema", default=None, help="The store table's schema."),
        click.option(
            "--consumer",
            default=None,
            help="The consumer (queue) name; default: every consumer (worker: see "
            "--all-consumers).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.group("store")
def store_group() -> None:
    """Inspect the inbox store and replay its rows."""


@store_group.command("counts")
@store_options
def counts_command(url: str, table: str, schema: str | None, consumer: str | None) -> None:
    """Print the number of rows per status as JSON (every consumer's without --consumer)."""
    with connected(url, "cannot count the store's rows") as engine:
        counts = bind_store(engine, table, schema).counts(engine, consumer)
    click.echo(json.dumps(counts))


class ConfirmationNeeded(click.ClickException):
    """A replay of done rows without ``--yes``: nothing changed, exit code
    :data:`~._common.EXIT_USAGE`."""

    exit_code = EXIT_USAGE


@store_group.command("replay")
@store_options
@click.option("--id", "ids", type=int, multiple=True, help="A row id (repeatable).")
@click.option("--status", type=click.Choice(["dead", "done"]), help="Rows in this status.")
@click.option(
    "--dry-run", is_flag=True, help="Only print how many rows would be replayed; change nothing."
)
@click.option(
    "--yes",
    is_flag=True,
    help="Confirm a replay of done rows (their messages are processed a second time).",
)
def replay_command(
    url: str,
    table: str,
    schema: str | None,
    consumer: str | None,
    ids: tuple[int, ...],
    status: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Reset the chosen dead or done rows to pending; print how many as JSON.

    Rows of every consumer are chosen unless --consumer names one.

    Replaying done rows processes their messages again, so --status done needs --yes
    (without it: the count is printed, nothing changes, exit code 2). --dry-run prints
    {"would_replay": N} and changes nothing.
    """
    from ..exc import InvalidStoreArgument

    filters: dict[str, Any] = {"ids": ids or None, "status": status, "consumer_name": consumer}
    with connected(url, "replay failed") as engine:
        store = bind_store(engine, table, schema)
        try:
            if dry_run or (status == "done" and not yes):
                count = store.replayable(engine, **filters)
                if dry_run:
                    click.echo(json.dumps({"would_replay": count}))
                    return
                raise ConfirmationNeeded(
                    f"{count} done rows would be reset to pending and their messages "
                    "processed again: pass --yes to replay them (or --dry-run to only count)"
                )
            count = store.replay(engine, **filters)
        except InvalidStoreArgument as exc:
            raise click.UsageError(str(exc)) from exc
    click.echo(json.dumps({"replayed": count}))
