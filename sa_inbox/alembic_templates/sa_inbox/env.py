"""Alembic environment pre-wired for sa-inbox: online and offline, sync and async engines.

The target MetaData is the application's (``[sa_inbox] target_metadata`` in alembic.ini)
plus the sa-inbox processed-messages table and the consumers table (which handler owns each
consumer name, ``sa_inbox.consumers``); ``import sa_inbox.alembic`` registers the
``op.create_inbox_table()`` and ``op.create_inbox_consumers_table()`` operations and the
autogenerate hooks that render them.

On SQLite, autogenerate renders table changes in batch mode (``render_as_batch``): SQLite's
ALTER TABLE cannot change a column, so Alembic re-creates the table with its rows (Alembic
docs, "Running 'Batch' Migrations for SQLite and Other Databases").

An async driver's URL (``postgresql+asyncpg://``, ``sqlite+aiosqlite://``) needs greenlet
(``pip install 'sqlalchemy[asyncio]'``); sync URLs do not.
"""

import asyncio
from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context
from sqlalchemy import pool

import sa_inbox.alembic

config = context.config

if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

# The application's MetaData plus the inbox tables and the consumers table they claim through
# (see the [sa_inbox] section of alembic.ini).
target_metadata = sa_inbox.alembic.target_metadata(config)


def database_url() -> sa.URL:
    """``alembic -x url=...`` if given, else ``sqlalchemy.url`` from alembic.ini."""
    url = context.get_x_argument(as_dictionary=True).get("url")
    url = url or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no database URL: set sqlalchemy.url in alembic.ini or pass -x url=...")
    return sa.make_url(url)


def render_as_batch(dialect_name: str) -> bool:
    """Batch mode where ALTER TABLE cannot alter a column: SQLite."""
    return dialect_name == "sqlite"


def run_migrations_offline() -> None:
    """Offline mode (``--sql``): print the SQL for the URL's dialect, connect to nothing."""
    url = database_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        render_as_batch=render_as_batch(url.get_backend_name()),
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def do_run_migrations(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=render_as_batch(connection.dialect.name),
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations(url: sa.URL) -> None:
    # Imported here, for async URLs only: sqlalchemy.ext.asyncio needs greenlet, which
    # SQLAlchemy 2.1 installs only with sqlalchemy[asyncio] (sync projects lack it).
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    """Online mode: a sync Engine, or an AsyncEngine for an async driver's URL."""
    url = database_url()
    if url.get_dialect().is_async:
        asyncio.run(run_async_migrations(url))
        return
    engine = sa.create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            do_run_migrations(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
