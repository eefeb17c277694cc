"""Exceptions of the Alembic integration; all derive from :class:`sa_inbox.InboxError`."""

from __future__ import annotations

from ..exc import InboxError

__all__ = ["AlembicSetupError", "InvalidTableOptions"]


class InvalidTableOptions(InboxError, ValueError):
    """An sa-inbox Alembic operation got a bad table name, schema or factory option.

    Raised when the operation is built (in the migration script, or by
    ``sa-inbox alembic revision``), before any SQL is emitted or any file is written.
    """


class AlembicSetupError(InboxError):
    """The Alembic environment could not be set up as asked.

    For example a ``[sa_inbox] target_metadata`` option in ``alembic.ini`` that names no
    importable :class:`~sqlalchemy.MetaData`.
    """
