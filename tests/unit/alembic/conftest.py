"""Fixtures of the Alembic tests (defined in :mod:`tests.support.alembic.fixtures`); no
database here, so only the logging and ``sys.path`` restore."""

from __future__ import annotations

from tests.support.alembic.fixtures import _restore_logging

__all__ = ["_restore_logging"]
