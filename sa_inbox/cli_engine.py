"""Opening the database of a ``sa-inbox`` command: one helper, the same errors everywhere.

:func:`open_engine` turns the ``--url`` of a command into an engine (:func:`check_url` only
checks it, for ``demo`` and ``bench``, whose engines live in worker processes), or into a clean
``Error: ...`` with the CLI's exit codes (:mod:`sa_inbox.cli`): 2 for a URL that is not a
SQLAlchemy URL, 3 when the command cannot run (the backend's driver is not installed, the
SQLite file does not exist). :func:`require_table` reports a missing table the same way.
"""

from __future__ import annotations

from pathlib import Path

import click
import sqlalchemy as sa

__all__ = [
    "DRIVER_EXTRAS",
    "EXIT_ERROR",
    "CannotRun",
    "check_url",
    "open_engine",
    "require_table",
    "sqlite_file",
]

#: Exit code when a command could not run (as :data:`sa_inbox.cli.EXIT_ERROR`).
EXIT_ERROR = 3

#: The ``pip install 'sa-inbox[extra]'`` extra for each backend, and the driver it installs.
DRIVER_EXTRAS = {
    "postgresql": ("postgresql", "postgresql+psycopg"),
    "mysql": ("mysql", "mysql+pymysql"),
    "mariadb": ("mysql", "mariadb+pymysql"),
    "oracle": ("oracle", "oracle+oracledb"),
}


class CannotRun(click.ClickException):
    """The command cannot run; printed as ``Error: ...``, exit code :data:`EXIT_ERROR`."""

    exit_code = EXIT_ERROR


def sqlite_file(url: sa.URL) -> Path | None:
    """The file of a SQLite URL, or ``None`` (not SQLite, in memory, or a ``file:`` URI)."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def check_url(url: str) -> sa.URL:
    """Parse a command's ``--url`` and import its driver, without connecting.

    For commands that create their engines elsewhere (``demo``, ``bench``: in worker
    processes, with their own pool settings).

    :raises click.BadParameter: (exit 2) as :func:`open_engine`.
    :raises CannotRun: (exit 3) if the backend's driver is not installed.
    """
    try:
        parsed = sa.make_url(url)
        dialect = parsed.get_dialect()
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from exc
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        raise CannotRun(_missing_driver(parsed, exc)) from exc
    return parsed


def open_engine(url: str, *, existing: bool = True) -> sa.Engine:
    """An engine for a command's ``--url``.

    :param url: a SQLAlchemy URL, as given on the command line.
    :param existing: the command needs tables that must already exist, so a SQLite URL
        naming a file that does not exist is refused instead of creating an empty file.
    :raises click.BadParameter: (exit 2) if ``url`` is not a SQLAlchemy URL or names an
        unknown backend.
    :raises CannotRun: (exit 3) if the backend's driver is not installed (with the
        ``pip install 'sa-inbox[...]'`` that installs one), or the SQLite file is missing.
    """
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from exc
    path = sqlite_file(parsed)
    if existing and path is not None and not path.is_file():
        raise CannotRun(
            f"the SQLite database file {str(path)!r} does not exist (nothing was created): "
            "check the --url path"
        )
    try:
        return sa.create_engine(parsed)
    except sa.exc.NoSuchModuleError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from exc
    except ImportError as exc:
        raise CannotRun(_missing_driver(parsed, exc)) from exc


def _missing_driver(url: sa.URL, exc: ImportError) -> str:
    """The message for a driver that cannot be imported, naming the extra to install."""
    backend = url.get_backend_name()
    found = f"the database driver for {url.drivername!r} is not installed ({exc})"
    if backend not in DRIVER_EXTRAS:
        return f"{found}: install it"
    extra, supported = DRIVER_EXTRAS[backend]
    return f"{found}: pip install 'sa-inbox[{extra}]' (it installs the driver of {supported}://)"


def require_table(engine: sa.Engine, table: str, schema: str | None, what: str) -> None:
    """Check that ``table`` exists before a command uses it.

    :param what: how the command calls the table (``"store table"``, ``"table"``).
    :raises CannotRun: (exit 3) if the database cannot be reached or the table does not
        exist.
    """
    try:
        exists = sa.inspect(engine).has_table(table, schema=schema)
    except sa.exc.SQLAlchemyError as exc:
        raise CannotRun(f"cannot connect to the database: {exc}") from exc
    if not exists:
        name = table if schema is None else f"{schema}.{table}"
        raise CannotRun(
            f"the {what} {name!r} does not exist: create it with metadata.create_all() "
            "or an Alembic migration (sa-inbox alembic revision)"
        )
