"""Alembic integration: operations, autogenerate hooks and templates for the sa-inbox tables.

Importing this module registers on Alembic's :class:`~alembic.operations.Operations`
``op.create_inbox_table()`` / ``op.drop_inbox_table()`` (processed messages, :class:`Inbox`),
``op.create_inbox_store_table()`` / ``op.drop_inbox_store_table()`` (the inbox store) and
``op.create_partitioned_inbox_table()`` / ``op.drop_partitioned_inbox_table()`` (PostgreSQL
partitions), ``op.create_outbox_table()`` / ``op.drop_outbox_table()`` (the outbox) and
``op.create_inbox_consumers_table()`` / ``op.drop_inbox_consumers_table()`` (the owner of
each consumer name, :mod:`sa_inbox.consumers`), with the autogenerate comparator and
renderers that write them into revisions; revision files that use them start with
``import sa_inbox.alembic``.

Renames keep the rows: ``op.rename_inbox_table(old, new)`` (and ``rename_inbox_store_table``,
``rename_outbox_table``), which autogenerate writes for a table renamed in the models instead
of a drop + create (:mod:`.pairing`; a drop it cannot pair is refused with
``op.refuse_inbox_table_drop``), and ``op.rename_inbox_consumer(table, old, new)``, which
copies a renamed consumer's claims under its new name (:mod:`.consumer`).

- ``sa-inbox alembic init DIR``: a new Alembic environment pre-wired for sa-inbox
  (:class:`Config`, template ``sa_inbox``).
- ``sa-inbox alembic revision -m "add inbox"``: a ready revision for an existing project
  (:func:`write_inbox_revision`).
- ``alembic revision --autogenerate``: renders ``op.create_inbox_table(...)`` and
  ``op.create_inbox_consumers_table(...)`` for the tables ``Inbox(metadata)`` defines.

Requires Alembic 1.18 or later (``pip install 'sa-inbox[alembic]'``).
"""

from __future__ import annotations

from .._optional import optional_dependencies

with optional_dependencies(__name__, "alembic", "alembic"):
    from ..exc import AlembicSetupError as AlembicSetupError
    from ..exc import InboxSettingsConflict as InboxSettingsConflict
    from ..exc import InboxTableDropRefused as InboxTableDropRefused
    from ..exc import InvalidTableOptions as InvalidTableOptions
    from . import autogenerate as autogenerate
    from .config import Config as Config
    from .config import target_metadata as target_metadata
    from .config import template_directory as template_directory
    from .consumer import RenameInboxConsumerOp as RenameInboxConsumerOp
    from .consumer import rename_inbox_consumer as rename_inbox_consumer
    from .operations import CreateInboxConsumersTableOp as CreateInboxConsumersTableOp
    from .operations import CreateInboxStoreTableOp as CreateInboxStoreTableOp
    from .operations import CreateInboxTableOp as CreateInboxTableOp
    from .operations import CreateOutboxTableOp as CreateOutboxTableOp
    from .operations import CreatePartitionedInboxTableOp as CreatePartitionedInboxTableOp
    from .operations import CreateProcessedMessagesTableOp as CreateProcessedMessagesTableOp
    from .operations import DropInboxConsumersTableOp as DropInboxConsumersTableOp
    from .operations import DropInboxStoreTableOp as DropInboxStoreTableOp
    from .operations import DropInboxTableOp as DropInboxTableOp
    from .operations import DropOutboxTableOp as DropOutboxTableOp
    from .operations import DropPartitionedInboxTableOp as DropPartitionedInboxTableOp
    from .operations import DropProcessedMessagesTableOp as DropProcessedMessagesTableOp
    from .operations import create_inbox_consumers_table as create_inbox_consumers_table
    from .operations import create_inbox_store_table as create_inbox_store_table
    from .operations import create_inbox_table as create_inbox_table
    from .operations import create_outbox_table as create_outbox_table
    from .operations import create_partitioned_inbox_table as create_partitioned_inbox_table
    from .operations import drop_inbox_consumers_table as drop_inbox_consumers_table
    from .operations import drop_inbox_store_table as drop_inbox_store_table
    from .operations import drop_inbox_table as drop_inbox_table
    from .operations import drop_outbox_table as drop_outbox_table
    from .operations import drop_partitioned_inbox_table as drop_partitioned_inbox_table
    from .refusal import RefuseInboxTableDropOp as RefuseInboxTableDropOp
    from .rename import RenameInboxStoreTableOp as RenameInboxStoreTableOp
    from .rename import RenameInboxTableOp as RenameInboxTableOp
    from .rename import RenameOutboxTableOp as RenameOutboxTableOp
    from .rename import RenameProcessedMessagesTableOp as RenameProcessedMessagesTableOp
    from .rename import rename_inbox_store_table as rename_inbox_store_table
    from .rename import rename_inbox_table as rename_inbox_table
    from .rename import rename_outbox_table as rename_outbox_table
    from .revision import inbox_operations as inbox_operations
    from .revision import write_inbox_revision as write_inbox_revision


__all__ = [
    "AlembicSetupError",
    "Config",
    "CreateInboxConsumersTableOp",
    "CreateInboxStoreTableOp",
    "CreateInboxTableOp",
    "CreateOutboxTableOp",
    "CreatePartitionedInboxTableOp",
    "CreateProcessedMessagesTableOp",
    "DropInboxConsumersTableOp",
    "DropInboxStoreTableOp",
    "DropInboxTableOp",
    "DropOutboxTableOp",
    "DropPartitionedInboxTableOp",
    "DropProcessedMessagesTableOp",
    "InboxSettingsConflict",
    "InboxTableDropRefused",
    "RefuseInboxTableDropOp",
    "RenameInboxConsumerOp",
    "RenameInboxStoreTableOp",
    "RenameInboxTableOp",
    "RenameOutboxTableOp",
    "RenameProcessedMessagesTableOp",
    "autogenerate",
    "create_inbox_consumers_table",
    "create_inbox_store_table",
    "create_inbox_table",
    "create_outbox_table",
    "create_partitioned_inbox_table",
    "drop_inbox_consumers_table",
    "drop_inbox_store_table",
    "drop_inbox_table",
    "drop_outbox_table",
    "drop_partitioned_inbox_table",
    "inbox_operations",
    "rename_inbox_consumer",
    "rename_inbox_store_table",
    "rename_inbox_table",
    "rename_outbox_table",
    "target_metadata",
    "template_directory",
    "write_inbox_revision",
]
