"""What every ``sa-inbox`` command shares: the exit codes, the error that ends a command
that could not run, and opening the database of a command's ``--url``.

Exit codes (one place for them; every command uses these):

=====  ===========================================================================
code   meaning
=====  ===========================================================================
0      success (:data:`EXIT_OK`)
1      the run finished but its verification failed (``demo``; :data:`EXIT_FAILED`)
2      usage error: bad options, a window the policy refuses, an extra the command needs
       is not installed (:data:`EXIT_USAGE`, :class:`Group`)
3      the command could not run: database unreachable, driver not installed, table
       missing, a worker died (:data:`EXIT_ERROR`, raised as :class:`CannotRun`)
130    interrupted (:data:`EXIT_INTERRUPTED`)
=====  ===========================================================================

:func:`open_engine` turns the ``--url`` of a command into an engine (:func:`check_url` only
checks it, for ``demo`` and ``bench``, whose engines live in worker processes), or into a
clean ``Error: ...`` line: exit 2 for a URL that is not a SQLAlchemy URL, 3 when the command
cannot run (the backend's driver is not installed, the SQLite file does not exist).
:func:`require_table` reports a missing table the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
import sqlalchemy as sa

from ..exc import ConfigurationError, MissingExtra

if TYPE_CHECKING:
    from ..store import InboxStore

__all__ = [
    "DRIVER_EXTRAS",
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CannotRun",
    "Group",
    "bind_store",
    "check_url",
    "connected",
    "one_line",
    "open_engine",
    "require_table",
    "sqlite_file",
]

#: The command did what it was asked.
EXIT_OK = 0
#: The command ran to the end but its verification failed (``sa-inbox demo``).
EXIT_FAILED = 1
#: Usage error (click's own exit code for :class:`click.UsageError`); nothing was changed.
EXIT_USAGE = 2
#: The command could not run to the end.
EXIT_ERROR = 3
#: Interrupted (SIGINT), as a shell reports it.
EXIT_INTERRUPTED = 130

#: The ``pip install 'sa-inbox[extra]'`` extra for each backend, and the driver it installs.
DRIVER_EXTRAS = {
    "postgresql": ("postgresql", "postgresql+psycopg"),
    "mysql": ("mysql", "mysql+pymysql"),
    "mariadb": ("mysql", "mariadb+pymysql"),
    "oracle": ("oracle", "oracle+oracledb"),
}


class CannotRun(click.ClickException):
    """The command cannot run; printed as one ``Error: ...`` line, exit code
    :data:`EXIT_ERROR`.

    :param message: what went wrong; a driver's or SQLAlchemy's error text in it is put on
        one line by :func:`one_line`.
    """

    exit_code = EXIT_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class _ExtraNotInstalled(click.ClickException):
    """A :class:`~sa_inbox.exc.MissingExtra` as one ``Error: ...`` line, exit code
    :data:`EXIT_USAGE` (nothing ran; ``pip install`` the extra and run it again)."""

    exit_code = EXIT_USAGE


class Group(click.Group):
    """The ``sa-inbox`` group: a command (or an option's callback) whose module needs an
    extra that is not installed ends as one ``Error: <module> needs the '<extra>' extra:
    pip install 'sa-inbox[<extra>]'`` line, exit :data:`EXIT_USAGE`, not a traceback.

    Nested groups run inside its :meth:`invoke`, so they need no class of their own.
    """

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except MissingExtra as exc:
            raise _ExtraNotInstalled(str(exc)) from exc


#: Where the parts of SQLAlchemy's error text that a user of the command does not need
#: start: the statement, its parameters, the link to the error's page.
_DETAIL_MARKERS = ("\n[SQL:", "\n[parameters:", "\n(Background on this error at:")


def one_line(message: str) -> str:
    """``message`` on one line: without the SQL statement, parameters and link of a
    SQLAlchemy error, its remaining lines joined by single spaces.

    ``"(psycopg.OperationalError) connection failed: ...\\n\\tIs the server running ...?
    \\n(Background on this error at: ...)"`` becomes ``"(psycopg.OperationalError) connection
    failed: ... Is the server running ...?"``.
    """
    cut = min((i for m in _DETAIL_MARKERS if (i := message.find(m)) >= 0), default=len(message))
    return " ".join(message[:cut].split())


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
    parsed = sync_peer(parsed)
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


#: The sync driver the commands use for a URL of each async driver (the same database).
SYNC_DRIVERS = {
    "postgresql+asyncpg": "postgresql+psycopg",
    "postgresql+psycopg_async": "postgresql+psycopg",
    "mysql+aiomysql": "mysql+pymysql",
    "mysql+asyncmy": "mysql+pymysql",
    "mariadb+aiomysql": "mariadb+pymysql",
    "mariadb+asyncmy": "mariadb+pymysql",
    "sqlite+aiosqlite": "sqlite",
}


def sync_peer(url: sa.URL) -> sa.URL:
    """``url`` with an async driver swapped for its sync peer (``postgresql+asyncpg`` ->
    ``postgresql+psycopg``, ``mysql+aiomysql`` -> ``mysql+pymysql``, ``sqlite+aiosqlite``
    -> ``sqlite``), so that every command accepts the URL an asyncio application uses; any
    other URL unchanged."""
    driver = SYNC_DRIVERS.get(url.drivername)
    return url if driver is None else url.set(drivername=driver)


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


def bind_store(engine: sa.Engine, table: str, schema: str | None) -> InboxStore:
    """The :class:`~sa_inbox.store.InboxStore` of the existing store table ``table``.

    :raises CannotRun: (exit 3) as :func:`require_table`.
    """
    from ..store import InboxStore

    require_table(engine, table, schema, "store table")
    return InboxStore(sa.MetaData(), table_name=table, schema=schema)


@contextmanager
def connected(url: str, failure: str) -> Iterator[sa.Engine]:
    """The engine of a command's ``--url`` for the ``with`` block, disposed at its end; a
    database error inside the block ends the command as one ``Error: <failure>: ...`` line.

    :param url: the ``--url``, as :func:`open_engine` takes it.
    :param failure: what failed, for the message (``"purge failed"``).
    :raises click.ClickException: as :func:`open_engine` (exit 2 or 3).
    :raises CannotRun: (exit 3) for a :class:`sqlalchemy.exc.SQLAlchemyError` or a
        :class:`~sa_inbox.exc.ConfigurationError` (a missing table or column) in the block;
        a :class:`~sa_inbox.exc.MissingExtra` is raised as it is (exit 2).
    """
    engine = open_engine(url)
    try:
        yield engine
    except sa.exc.SQLAlchemyError as exc:
        raise CannotRun(f"{failure}: {exc}") from exc
    except MissingExtra:
        raise  # exit 2 (:class:`Group`): nothing ran
    except ConfigurationError as exc:
        raise CannotRun(f"{failure}: {type(exc).__name__}: {exc}") from exc
    finally:
        engine.dispose()
