"""``sa-inbox alembic``: set up Alembic for the inbox tables.

- ``sa-inbox alembic init DIR``: a new Alembic environment from the ``sa_inbox`` template
  (``alembic.ini`` is written next to the current directory unless ``-c`` says otherwise).
- ``sa-inbox alembic revision -m "add inbox"``: in an existing Alembic project, a ready
  revision creating the inbox tables (and dropping them on downgrade): the processed-messages
  table and the consumers table (:mod:`sa_inbox.consumers`), plus the inbox store table with
  ``--store``; or only the store table with ``--store-only`` (when an earlier revision
  already created the others), only the consumers table with ``--consumers-only`` (a
  history whose inbox tables were created without it); ``--no-consumers`` leaves the
  consumers table out (an application whose Inbox is built with ``consumers=False``).

Alembic is imported only when a sub-command runs (it is the optional ``alembic`` extra).
Exit codes (:mod:`._common`): 0 done, 2 usage error, 3 Alembic refused the command.
"""

from __future__ import annotations

from pathlib import Path

import click

from .._optional import optional_dependencies
from ._common import POSITIVE, CannotRun, setting

__all__ = ["alembic_group"]

CONFIG_OPTION = setting(
    ("-c", "--config", "config_file"),
    "alembic.ini",
    click.Path(dir_okay=False, path_type=Path),
    "The Alembic config file.",
)


@click.group("alembic")
def alembic_group() -> None:
    """Alembic support: an environment for sa-inbox, or a revision adding the inbox."""


@alembic_group.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@CONFIG_OPTION
def init(directory: Path, config_file: Path) -> None:
    """Create an Alembic environment in DIRECTORY, pre-wired for sa-inbox.

    Writes the config file (unless it exists), DIRECTORY/env.py, script.py.mako and
    versions/. Then set sqlalchemy.url and [sa_inbox] target_metadata in the config file,
    and run: alembic revision --autogenerate -m "add inbox".
    """
    with optional_dependencies(__name__, "alembic", "alembic"):
        from alembic import command
        from alembic.util import CommandError

        from ..alembic import Config
        from ..alembic.config import TEMPLATE

    try:
        command.init(Config(str(config_file)), str(directory), template=TEMPLATE)
    except CommandError as exc:
        raise CannotRun(str(exc)) from exc
    except OSError as exc:
        raise CannotRun(
            f"cannot create the Alembic environment in {str(directory)!r}: "
            f"{exc.strerror or exc} ({exc.filename or directory})"
        ) from exc


@alembic_group.command("revision")
@setting(("-m", "--message"), "add inbox", None, "Revision message.")
@CONFIG_OPTION
@setting("--table-name", "inbox_processed_messages", None, "Name of the processed-messages table.")
@click.option(
    "--store",
    is_flag=True,
    help="Also create the inbox store table (sa_inbox.store.InboxStore).",
)
@click.option(
    "--store-only",
    is_flag=True,
    help="Create only the inbox store table: for a history whose earlier revision already "
    "creates the processed-messages table.",
)
@click.option(
    "--consumers-only",
    is_flag=True,
    help="Create only the consumers table (the handler owning each consumer name): for a "
    "history whose inbox tables were created without it.",
)
@click.option(
    "--no-consumers",
    is_flag=True,
    help="Leave the consumers table out: for an application whose Inbox and InboxStore are "
    "built with consumers=False.",
)
@setting("--store-table-name", "inbox_store", None, "Name of the inbox store table (with --store).")
@click.option("--schema", default=None, help="Schema of the tables (default: the connection's).")
@setting(
    "--message-id-length", 255, POSITIVE, "Length in characters of message_id and consumer_name."
)
@click.option("--rev-id", default=None, help="Revision id (default: a random one).")
@setting("--head", "head", None, "Revision to build on.")
def revision(
    message: str,
    config_file: Path,
    table_name: str,
    store: bool,
    store_only: bool,
    consumers_only: bool,
    no_consumers: bool,
    store_table_name: str,
    schema: str | None,
    message_id_length: int,
    rev_id: str | None,
    head: str,
) -> None:
    """Write a revision that creates the sa-inbox tables in an existing Alembic project.

    No database connection is needed; the revision uses op.create_inbox_table() and
    op.create_inbox_consumers_table() (and op.create_inbox_store_table() with --store), its
    downgrade the drop operations. Each revision creates its tables anew: to add the store
    to a history that already has the other tables, use --store-only; to add the consumers
    table to a history that has the inbox tables without it, --consumers-only (otherwise
    the upgrade would create a table a second time, and fail).
    """
    with optional_dependencies(__name__, "alembic", "alembic"):
        from alembic.util import CommandError

        from ..alembic import Config, inbox_operations, write_inbox_revision
        from ..exc import InvalidArgument

    if not config_file.is_file():
        raise click.UsageError(f"no Alembic config file {str(config_file)!r} (see -c)")
    _check_selection(
        store=store, store_only=store_only, consumers_only=consumers_only, no_consumers=no_consumers
    )
    only = store_only or consumers_only
    try:
        operations = inbox_operations(
            table_name=table_name,
            schema=schema,
            message_id_length=message_id_length,
            processed_messages=not only,
            store=(store and not consumers_only) or store_only,
            store_table_name=store_table_name,
            consumers=not (no_consumers or store_only),
        )
    except InvalidArgument as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        script = write_inbox_revision(
            Config(str(config_file)), message, operations=operations, rev_id=rev_id, head=head
        )
    except CommandError as exc:
        raise CannotRun(str(exc)) from exc
    click.echo(f"Generated {script.path}")


def _check_selection(**flags: bool) -> None:
    """Refuse flags that ask for contradictory tables (a usage error, exit 2).

    :raises click.UsageError: for two ``--*-only`` flags, or one with a flag it excludes.
    """
    given = {name for name, value in flags.items() if value}
    clashes = [
        pair
        for pair in (
            ("store_only", "consumers_only"),
            ("consumers_only", "no_consumers"),
            ("consumers_only", "store"),
        )
        if set(pair) <= given
    ]
    if clashes:
        first, second = (f"--{name.replace('_', '-')}" for name in clashes[0])
        raise click.UsageError(f"{first} and {second} ask for different tables: give one")
