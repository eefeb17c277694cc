"""Fixtures of the outbox tests: the Alembic project fixtures (one run per database)."""

from __future__ import annotations

from tests.support.alembic.fixtures import _restore_logging, database_url, project

__all__ = ["_restore_logging", "database_url", "project"]
