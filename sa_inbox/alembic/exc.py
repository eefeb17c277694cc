"""The Alembic integration's exceptions, defined in :mod:`sa_inbox.exc` and re-exported here
so that this import path keeps working (``InvalidTableOptions`` is a deprecated alias of
:class:`~sa_inbox.exc.InvalidArgument`)."""

from __future__ import annotations

from ..exc import AlembicSetupError as AlembicSetupError
from ..exc import InboxSettingsConflict as InboxSettingsConflict
from ..exc import InboxTableDropRefused as InboxTableDropRefused
from ..exc import InvalidTableOptions as InvalidTableOptions

__all__ = ["AlembicSetupError", "InboxSettingsConflict", "InboxTableDropRefused"]
