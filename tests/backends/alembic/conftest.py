"""Fixtures of the Alembic tests (defined in :mod:`tests.support.alembic.fixtures`)."""

from __future__ import annotations

from tests.support.alembic.fixtures import _restore_logging, database_url, project

__all__ = ["_restore_logging", "database_url", "project"]
