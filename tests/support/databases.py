"""Databases of their own beside the suite's test database, on the same server and for the
same user: a fresh one per Alembic test, and one per pytest-xdist worker.

A new database takes the test database's character set and collation (MariaDB:
``information_schema.SCHEMATA``; PostgreSQL: ``pg_database``, copied from ``template0``,
manual 23.3 "Template Databases"), so that a test sees the same server settings whichever
database it runs in. The user needs the right to create databases (``CREATEDB`` on
PostgreSQL, ``CREATE`` on MariaDB); the servers of ``scripts/servers.sh`` grant it.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["create_database", "drop_database"]


def _admin(url: sa.URL) -> sa.Engine:
    """An engine on the test database itself, outside transactions (``CREATE DATABASE``
    refuses to run in one on PostgreSQL)."""
    return sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)


def _like(conn: sa.Connection, url: sa.URL) -> str:
    """The ``CREATE DATABASE`` options that copy the test database's encoding and collation."""
    if url.get_backend_name() == "postgresql":
        encoding, collate, ctype = conn.exec_driver_sql(
            "SELECT pg_encoding_to_char(encoding), datcollate, datctype FROM pg_database "
            "WHERE datname = current_database()"
        ).one()
        return (
            f" TEMPLATE template0 ENCODING '{encoding}' LC_COLLATE '{collate}' LC_CTYPE '{ctype}'"
        )
    charset, collation = conn.exec_driver_sql(
        "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME "
        "FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = DATABASE()"
    ).one()
    return f" CHARACTER SET {charset} COLLATE {collation}"


def _drop(conn: sa.Connection, url: sa.URL, name: str) -> None:
    # WITH (FORCE): a connection a crashed test left open must not keep the database.
    force = " WITH (FORCE)" if url.get_backend_name() == "postgresql" else ""
    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")


def create_database(base: str, name: str) -> str:
    """Create database ``name`` (dropped first if a former run left it) beside the database
    of URL ``base`` (PostgreSQL or MariaDB/MySQL), like it; return its URL (``base`` with
    the new database).

    :param name: a plain identifier (letters, digits, ``_``).
    :raises sqlalchemy.exc.DBAPIError: if the server refuses (no right to create databases).
    """
    url = sa.make_url(base)
    admin = _admin(url)
    try:
        with admin.connect() as conn:
            _drop(conn, url, name)
            conn.exec_driver_sql(f"CREATE DATABASE {name}{_like(conn, url)}")
    finally:
        admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def drop_database(base: str, name: str) -> None:
    """Drop database ``name`` beside the database of URL ``base``, if it exists."""
    url = sa.make_url(base)
    admin = _admin(url)
    try:
        with admin.connect() as conn:
            _drop(conn, url, name)
    finally:
        admin.dispose()
