"""Write a ready revision that adds the sa-inbox tables to an existing Alembic project.

``sa-inbox alembic revision -m "add inbox"`` calls :func:`write_inbox_revision`: no database
connection and no ``env.py`` run are needed, since the revision's content is known. The
upgrade and downgrade are rendered by the same renderers as autogenerate, through the
project's own ``script.py.mako``.
"""

from __future__ import annotations

from collections.abc import Sequence

import alembic.config
from alembic.autogenerate import render_python_code
from alembic.operations import ops
from alembic.script import Script, ScriptDirectory
from alembic.util import rev_id as new_rev_id

from ..consumers import DEFAULT_CONSUMERS_TABLE, consumer_name_length_for
from ..exc import InvalidArgument
from ..schema import DEFAULT_MESSAGE_ID_LENGTH, DEFAULT_TABLE_NAME
from ..store import DEFAULT_STORE_TABLE
from .autogenerate import IMPORT_LINE
from .operations import (
    CreateInboxConsumersTableOp,
    CreateInboxStoreTableOp,
    CreateInboxTableOp,
    CreateProcessedMessagesTableOp,
)

__all__ = ["inbox_operations", "write_inbox_revision"]


def inbox_operations(
    *,
    table_name: str = DEFAULT_TABLE_NAME,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    processed_messages: bool = True,
    store: bool = False,
    store_table_name: str = DEFAULT_STORE_TABLE,
    consumers: bool = True,
) -> list[CreateInboxTableOp]:
    """The operations that create the sa-inbox tables, for :func:`write_inbox_revision`.

    :param processed_messages: create the processed-messages table ``table_name``.
    :param store: create the inbox store table ``store_table_name``.
    :param consumers: create the consumers table (:mod:`sa_inbox.consumers`), which an
        ``Inbox`` or ``InboxStore`` built with the default ``consumers=True`` claims
        through (``consumer_name`` of
        :func:`~sa_inbox.consumers.consumer_name_length_for` ``message_id_length``).
    :raises sa_inbox.exc.InvalidArgument: for a bad name, schema or length.
    :raises sa_inbox.exc.InvalidArgument: if no table is asked for.
    """
    operations: list[CreateInboxTableOp] = []
    if processed_messages:
        operations.append(
            CreateProcessedMessagesTableOp(
                table_name, schema=schema, message_id_length=message_id_length
            )
        )
    if store:
        operations.append(
            CreateInboxStoreTableOp(
                store_table_name, schema=schema, message_id_length=message_id_length
            )
        )
    if consumers:
        operations.append(
            CreateInboxConsumersTableOp(
                DEFAULT_CONSUMERS_TABLE,
                schema=schema,
                consumer_name_length=consumer_name_length_for(message_id_length),
            )
        )
    if not operations:
        raise InvalidArgument("no sa-inbox table asked for")
    return operations


def write_inbox_revision(
    config: alembic.config.Config,
    message: str = "add inbox",
    *,
    operations: Sequence[CreateInboxTableOp] | None = None,
    rev_id: str | None = None,
    head: str = "head",
) -> Script:
    """Write a revision file whose upgrade creates the sa-inbox tables and downgrade drops them.

    :param config: the project's Alembic config (its ``script_location`` is used).
    :param message: the revision message (``-m``).
    :param operations: what to create; default: :func:`inbox_operations` with defaults.
    :param rev_id: the revision id; default: a new random one.
    :param head: the revision to build on, ``"head"`` when the history has one head.
    :returns: the new :class:`alembic.script.Script`.
    :raises alembic.util.CommandError: from Alembic, e.g. several heads and ``head="head"``.
    """
    upgrade = ops.UpgradeOps(list(operations or inbox_operations()))
    downgrade = ops.DowngradeOps([operation.reverse() for operation in reversed(upgrade.ops)])
    script_directory = ScriptDirectory.from_config(config)
    script = script_directory.generate_revision(
        rev_id or new_rev_id(),
        message,
        head=head,
        refresh=True,
        upgrades=render_python_code(upgrade).strip(),
        downgrades=render_python_code(downgrade).strip(),
        imports=IMPORT_LINE,
        config=config,
    )
    assert script is not None
    return script
