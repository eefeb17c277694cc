"""Engines for the demo: SQLite files tuned for several writer processes, or a server URL."""

from __future__ import annotations

import sqlalchemy as sa

from ..bench.db import sqlite_wal

__all__ = ["SQLITE_TIMEOUT", "make_engine", "prepare_database", "sqlite_url"]

#: Seconds a SQLite writer waits for the write lock before SQLITE_BUSY.
SQLITE_TIMEOUT = 30.0


def sqlite_url(path: str) -> str:
    """The URL of the SQLite database file ``path``."""
    return f"sqlite:///{path}"


def make_engine(url: str, *, pool_size: int = 1) -> sa.Engine:
    """An engine on ``url`` for one process.

    SQLite: the driver's busy ``timeout`` is :data:`SQLITE_TIMEOUT` seconds, so a writer
    waits for another process's transaction instead of failing at once; what still fails
    with SQLITE_BUSY is retried by :func:`sa_inbox.handle`. Connections run in WAL mode with
    ``synchronous=NORMAL`` (:func:`sa_inbox.bench.db.sqlite_wal`): commits append to the log
    without an fsync each, so the demo measures the inbox, not the disk (durability is still
    that of a WAL database).

    :param url: a SQLAlchemy URL string (password included).
    :param pool_size: connections kept open (a worker needs one).
    """
    if sa.make_url(url).get_backend_name() == "sqlite":
        return sqlite_wal(sa.create_engine(url, connect_args={"timeout": SQLITE_TIMEOUT}))
    return sa.create_engine(url, pool_size=pool_size, max_overflow=2, pool_pre_ping=True)


def prepare_database(engine: sa.Engine) -> None:
    """Once, before the workers start: put a SQLite file in WAL mode (readers never block
    the writer, and the mode persists in the file), so that no two workers' first
    connections switch it at once. Nothing to do on a server."""
    if engine.dialect.name == "sqlite":
        with engine.connect():
            pass  # make_engine's sqlite_wal switches the file on connecting
