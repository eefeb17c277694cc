"""Whether another connection still holds locks on a table: take its exclusive lock from a
second connection, with a short lock wait, and give it back."""

from __future__ import annotations

import sqlalchemy as sa

#: Seconds the second connection waits for the lock; a lock left held fails the test after it.
LOCK_WAIT_SECONDS = 2


def assert_no_lock_held(engine: sa.Engine, *tables: sa.Table) -> None:
    """Take an exclusive lock on each of ``tables`` from a new connection of ``engine`` (a
    sync engine on the database under test) within :data:`LOCK_WAIT_SECONDS`.

    PostgreSQL: ``LOCK TABLE … IN ACCESS EXCLUSIVE MODE`` under ``lock_timeout`` (PostgreSQL
    manual, "LOCK": it conflicts with every lock, a row lock's ``ROW EXCLUSIVE`` included).
    MariaDB: ``LOCK TABLES … WRITE`` under ``lock_wait_timeout`` (it waits for the metadata
    lock every open transaction that touched the table holds; MariaDB KB, "Metadata
    Locking"). SQLite: ``BEGIN IMMEDIATE`` under ``busy_timeout`` (the database's write lock).

    :raises AssertionError: naming the lock that could not be had.
    """
    quoted = [engine.dialect.identifier_preparer.format_table(table) for table in tables]
    names = ", ".join(quoted)
    with engine.connect() as conn:
        backend = engine.dialect.name
        try:
            if backend == "postgresql":
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_WAIT_SECONDS}s'")
                conn.exec_driver_sql(f"LOCK TABLE {names} IN ACCESS EXCLUSIVE MODE")
            elif backend in ("mysql", "mariadb"):
                conn.exec_driver_sql(f"SET SESSION lock_wait_timeout = {LOCK_WAIT_SECONDS}")
                writes = ", ".join(f"{name} WRITE" for name in quoted)
                conn.exec_driver_sql(f"LOCK TABLES {writes}")
                conn.exec_driver_sql("UNLOCK TABLES")
            elif backend == "sqlite":
                conn.exec_driver_sql(f"PRAGMA busy_timeout = {LOCK_WAIT_SECONDS * 1000}")
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:  # pragma: no cover - the suite's backends only
                raise AssertionError(f"no lock check for {backend}")
        except sa.exc.DBAPIError as exc:
            raise AssertionError(f"a lock on {names} is still held: {exc.orig}") from exc
        finally:
            conn.rollback()
