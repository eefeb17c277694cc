"""Fixtures of the Alembic tests: a fresh database per test; logging, sys.path as found."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import backend_url
from tests.support.databases import create_database, drop_database

from .project import Project

#: Backends with a server (or file) a test can have to itself; Oracle has no server here.
ROUND_TRIP_BACKENDS = ("sqlite", "postgresql", "mysql")


@pytest.fixture(params=ROUND_TRIP_BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database of its own: a SQLite file, or a new PostgreSQL/MariaDB DB.

    Autogenerate compares the whole schema, so the test must not share it with others.
    """
    request.applymarker(pytest.mark.backend)
    base = backend_url(request.param, tmp_path)
    if request.param == "sqlite":
        yield base
        return
    name = f"sa_inbox_alembic_{uuid.uuid4().hex[:12]}"
    url = create_database(base, name)
    try:
        yield url
    finally:
        drop_database(base, name)


@pytest.fixture
def project(tmp_path: Path, database_url: str) -> Project:
    return Project(tmp_path / "project", database_url)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """env.py runs fileConfig and prepend_sys_path in this process: undo them after each test."""
    path = list(sys.path)  # env.py's prepend_sys_path adds the project dir
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    loggers = {
        name: (logger.level, logger.disabled, list(logger.handlers))
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    yield
    sys.path[:] = path
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, logger in logging.Logger.manager.loggerDict.items():
        if isinstance(logger, logging.Logger):
            saved_level, disabled, saved_handlers = loggers.get(name, (logging.NOTSET, False, []))
            logger.setLevel(saved_level)
            logger.disabled = disabled
            logger.handlers[:] = saved_handlers
