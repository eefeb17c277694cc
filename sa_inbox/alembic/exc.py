"""Exceptions of the Alembic integration; all derive from :class:`sa_inbox.InboxError`."""

from __future__ import annotations

from ..exc import ConfigurationError, InboxError

__all__ = [
    "AlembicSetupError",
    "InboxSettingsConflict",
    "InboxTableDropRefused",
    "InvalidTableOptions",
]


class InvalidTableOptions(InboxError, ValueError):
    """An sa-inbox Alembic operation got a bad table name, schema or factory option.

    Raised when the operation is built (in the migration script, or by
    ``sa-inbox alembic revision``), before any SQL is emitted or any file is written.
    """


class AlembicSetupError(ConfigurationError):
    """The Alembic environment could not be set up as asked.

    For example a ``[sa_inbox] target_metadata`` option in ``alembic.ini`` that names no
    importable :class:`~sqlalchemy.MetaData`.
    """


class InboxSettingsConflict(AlembicSetupError):
    """``[sa_inbox]`` in ``alembic.ini`` says one thing about a table the models define.

    The models' table (``Inbox(metadata, table_name=..., message_id_length=...)``) is the one
    the application claims through, so it is the one migrated; an ``alembic.ini`` option that
    disagrees with it (``table_name``, ``store_table_name``, ``schema``,
    ``message_id_length``) is refused instead of being ignored. Remove the option.
    """


class InboxTableDropRefused(AlembicSetupError):
    """A revision would drop an sa-inbox table whose rows autogenerate could not keep.

    Raised when the upgrade reaches ``op.refuse_inbox_table_drop(...)``, the line that
    autogenerate writes where a table left the models and could not be paired with exactly
    one compatible new table to rename it to. Nothing of the revision has run before it (it
    is the first operation). The message says how to edit the revision.
    """
