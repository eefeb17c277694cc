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

from ._common import EXIT_USAGE, bind_store, connected, options, setting, url_option

__all__ = [
    "ConfirmationNeeded",
    "replay_options",
    "require_rows",
    "run_replay",
    "store_group",
    "store_options",
]


#: ``--url``, ``--table``, ``--schema`` and ``--consumer``: the options of every command on
#: the store table (``worker`` and ``store ...``).
store_options = options(
    url_option(),
    setting("--table", "inbox_store", None, "The store table's name."),
    click.option("--schema", default=None, help="The store table's schema."),
    click.option(
        "--consumer",
        default=None,
        help=(
            "The consumer (queue) name. store commands: every consumer if left out; "
            "worker: required unless --all-consumers."
        ),
    ),
)


@click.group("store")
def store_group() -> None:
    """Inspect the inbox store and replay its rows."""


@store_group.command("counts")
@store_options
def counts_command(url: str, table: str, schema: str | None, consumer: str | None) -> None:
    """Print the number of rows per status as JSON (every consumer's without --consumer)."""
    with connected(url, "cannot count the store's rows") as db:
        counts = db.call(lambda: bind_store(db.engine, table, schema).counts(db.engine, consumer))
    click.echo(json.dumps(counts))


class ConfirmationNeeded(click.ClickException):
    """A replay of done rows without ``--yes``: nothing changed, exit code
    :data:`~._common.EXIT_USAGE`."""

    exit_code = EXIT_USAGE


def replay_options(finished: str, again: str) -> Callable[[Callable[..., Any]], Any]:
    """``--id``, ``--status`` (``dead`` or ``finished``), ``--dry-run`` and ``--yes``: the
    options of a replay command (``store replay``, ``outbox replay``).

    :param finished: the status of rows whose messages went through (``done``,
        ``dispatched``).
    :param again: what replaying those does (for ``--yes``'s help).
    """
    return options(
        click.option("--id", "ids", type=int, multiple=True, help="A row id (repeatable)."),
        click.option(
            "--status", type=click.Choice(["dead", finished]), help="Rows in this status."
        ),
        click.option(
            "--dry-run",
            is_flag=True,
            help="Only print how many rows would be replayed; change nothing.",
        ),
        click.option("--yes", is_flag=True, help=f"Confirm a replay of {finished} rows ({again})."),
    )


@store_group.command("replay")
@store_options
@replay_options("done", "their messages are processed a second time")
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

    Replaying done rows processes their messages again, so a replay that would reset any
    (--status done, or --id of a done row) needs --yes (without it: the count is printed,
    nothing changes, exit code 2). --id or --status is required. --dry-run prints
    {"would_replay": N} and changes nothing.
    """
    require_rows(ids, status)
    filters: dict[str, Any] = {"ids": ids or None, "consumer_name": consumer}
    with connected(url, "replay failed") as db:
        store = db.call(bind_store, db.engine, table, schema)
        run_replay(
            lambda chosen: db.call(store.replayable, db.engine, status=chosen, **filters),
            lambda: db.call(store.replay, db.engine, status=status, **filters),
            status=status,
            finished="done",
            again="done rows would be reset to pending and their messages processed again",
            dry_run=dry_run,
            yes=yes,
        )


def require_rows(ids: tuple[int, ...], status: str | None) -> None:
    """Refuse a replay command that names no rows (neither ``--id`` nor ``--status``).

    :raises click.UsageError: (exit 2) then, before the database is opened.
    """
    if status is None and not ids:
        raise click.UsageError("name the rows to replay: --id ID (repeatable) or --status")


def run_replay(
    count: Callable[[str | None], int],
    replay: Callable[[], int],
    *,
    status: str | None,
    finished: str,
    again: str,
    dry_run: bool,
    yes: bool,
) -> None:
    """A replay command's body (the rule of :func:`sa_inbox.store.replay.guarded_replay`):
    print ``{"would_replay": N}`` (``--dry-run``) or ``{"replayed": N}``.

    :param count: counts the rows the replay would reset, of the given status (``None``:
        the command's ``--status``, as given).
    :param replay: resets them; returns how many.
    :param status: the command's ``--status`` (``None``: every replayable status).
    :param finished: the status of rows whose messages went through (``done``,
        ``dispatched``): a replay that would reset any of them (chosen by ``--status`` or by
        ``--id``) needs ``yes``, since their messages are handled a second time.
    :param again: what the confirmation message says after the count of those rows.
    :raises ConfirmationNeeded: (exit 2) if finished rows would be reset without ``yes``:
        nothing changed.
    :raises click.UsageError: (exit 2) for filters the library refuses (a ``ValueError``).
    """
    from ..store.replay import guarded_replay

    try:
        outcome = guarded_replay(
            count, replay, status=status, finished=finished, dry_run=dry_run, confirmed=yes
        )
    except ValueError as exc:  # InvalidArgument
        raise click.UsageError(str(exc)) from exc
    if dry_run:
        click.echo(json.dumps({"would_replay": outcome.chosen}))
    elif outcome.needs_confirmation:
        raise ConfirmationNeeded(
            f"{outcome.finished} {again}: pass --yes to replay them (or --dry-run to only count)"
        )
    else:
        click.echo(json.dumps({"replayed": outcome.replayed}))
