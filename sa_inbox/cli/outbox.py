"""``sa-inbox outbox``: inspect the outbox and replay its rows.

``outbox counts`` prints the rows per status; ``outbox replay`` resets dead or dispatched
rows to pending, for the relays to publish again. Both cover every destination unless
``--destination`` names one. Exit codes (:mod:`._common`): 0 success, 2 usage error (or a
replay of dispatched rows without ``--yes``: nothing changed), 3 the command could not run
(database unreachable, outbox table missing).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
import sqlalchemy as sa

from ._common import connected, options, require_table, setting, url_option
from .store import replay_options, require_rows, run_replay

if TYPE_CHECKING:
    from ..outbox.relay import RelayCore

__all__ = ["outbox_group"]


#: ``--url``, ``--table``, ``--schema`` and ``--destination`` of every ``outbox`` command.
outbox_options = options(
    url_option(),
    setting("--table", "outbox_messages", None, "The outbox table."),
    click.option("--schema", default=None, help="The outbox table's schema."),
    click.option("--destination", default=None, help="One destination; default: all."),
)


def bind_outbox(engine: sa.Engine, table: str, schema: str | None) -> RelayCore:
    """The relay's database steps on the existing outbox table ``table``.

    :raises CannotRun: (exit 3) if the database cannot be reached or the table is missing.
    """
    from ..outbox import Outbox
    from ..outbox.relay import RelayCore

    require_table(engine, table, schema, "outbox table")
    return RelayCore(engine, Outbox(sa.MetaData(), table_name=table, schema=schema))


@click.group("outbox")
def outbox_group() -> None:
    """Inspect the outbox and replay its rows."""


@outbox_group.command("counts")
@outbox_options
def counts_command(url: str, table: str, schema: str | None, destination: str | None) -> None:
    """Print the number of rows per status as JSON (every destination's without
    --destination)."""
    with connected(url, "cannot count the outbox's rows") as db:
        counts = db.call(lambda: bind_outbox(db.engine, table, schema).counts(destination))
    click.echo(json.dumps(counts))


@outbox_group.command("replay")
@outbox_options
@replay_options("dispatched", "their messages are published a second time")
def replay_command(
    url: str,
    table: str,
    schema: str | None,
    destination: str | None,
    ids: tuple[int, ...],
    status: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Reset the chosen dead or dispatched rows to pending; print how many as JSON.

    Rows of every destination are chosen unless --destination names one. A relay then
    publishes them again with their message_id (a consumer's inbox drops a copy it has
    processed). Replaying dispatched rows publishes their messages a second time, so a
    replay that would reset any (--status dispatched, or --id of a dispatched row) needs
    --yes (without it: the count is printed, nothing changes, exit code 2). --id or --status
    is required. --dry-run prints {"would_replay": N} and changes nothing.
    """
    require_rows(ids, status)
    filters: dict[str, Any] = {"ids": ids or None, "destination": destination}
    again = "dispatched rows would be reset to pending and their messages published again"
    with connected(url, "replay failed") as db:
        core = db.call(bind_outbox, db.engine, table, schema)
        run_replay(
            lambda chosen: db.call(core.replayable, status=chosen, **filters),
            lambda: db.call(core.replay, status=status, **filters),
            status=status,
            finished="dispatched",
            again=again,
            dry_run=dry_run,
            yes=yes,
        )
