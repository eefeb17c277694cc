"""A statement that runs a given time on the server, for tests that need one in flight."""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine


def sleep_sql(engine: AsyncEngine, seconds: float) -> str:
    """``SELECT pg_sleep(s)`` / ``SELECT SLEEP(s)``; on SQLite ``SELECT sleep_seconds(s)``,
    a Python function :func:`add_sqlite_sleep` gives each connection."""
    backend = engine.dialect.name
    if backend == "postgresql":
        return f"SELECT pg_sleep({seconds})"
    if backend in ("mysql", "mariadb"):
        return f"SELECT SLEEP({seconds})"
    add_sqlite_sleep(engine)
    return f"SELECT sleep_seconds({seconds})"


def add_sqlite_sleep(engine: AsyncEngine) -> None:
    """Give each new aiosqlite connection of ``engine`` a ``sleep_seconds(s)`` function
    (sqlite3's ``create_function``, run by aiosqlite in its thread); idempotent."""
    if sa.event.contains(engine.sync_engine, "connect", _add_sleep):
        return
    sa.event.listen(engine.sync_engine, "connect", _add_sleep)


def _add_sleep(dbapi_connection: Any, record: object) -> None:
    dbapi_connection.run_async(
        lambda driver: driver.create_function("sleep_seconds", 1, time.sleep)
    )
