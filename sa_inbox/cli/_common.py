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

:func:`open_database` turns the ``--url`` of a command into a :class:`Database` on the driver
the URL names: an Engine, or for an async driver's URL (``postgresql+asyncpg``,
``postgresql+psycopg_async``, ``mysql+aiomysql``, ``sqlite+aiosqlite``) an AsyncEngine, on
which a command runs the asyncio API, or the synchronous one in a greenlet. The URL is never
swapped for another driver's. :func:`check_url` only checks it, for ``demo``, ``bench`` and
``chaos``, whose engines live in worker processes on the synchronous core (an async
driver's URL is refused there). Errors are one clean ``Error: ...`` line: exit 2 for a URL
that is not a SQLAlchemy URL or a driver the command cannot use, 3 when the command cannot
run (the driver is not installed, the SQLite file does not exist).
:func:`require_table` reports a missing table the same way.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click
import sqlalchemy as sa

from .._compat import greenlet_spawn
from ..exc import ConfigurationError, MissingExtra

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ..store import InboxStore

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "DRIVER_EXTRAS",
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "POSITIVE",
    "SECONDS",
    "SHARE",
    "WAIT",
    "CannotRun",
    "Database",
    "FiniteRange",
    "Group",
    "Verified",
    "bind_store",
    "check_url",
    "connected",
    "finish",
    "is_async_url",
    "json_option",
    "missing_driver",
    "one_line",
    "open_database",
    "options",
    "parse_url",
    "require_table",
    "setting",
    "sqlite_file",
    "stop_on_interrupt",
    "url_option",
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
    pip install 'sa-inbox[<extra>]'`` line, exit :data:`EXIT_USAGE`, not a traceback; one
    cut short by Ctrl-C ends with ``interrupted``, exit :data:`EXIT_INTERRUPTED`.

    Nested groups run inside its :meth:`invoke`, so they need no class of their own.
    """

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except MissingExtra as exc:
            raise _ExtraNotInstalled(str(exc)) from exc
        except KeyboardInterrupt:  # click's own handling would say "Aborted!" and exit 1
            click.echo("interrupted", err=True)
            raise SystemExit(EXIT_INTERRUPTED) from None


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


def parse_url(url: str) -> sa.URL:
    """A command's ``--url`` parsed, its dialect known (nothing imported but SQLAlchemy's
    dialect module).

    :raises click.BadParameter: (exit 2) if ``url`` is not a SQLAlchemy URL or names an
        unknown backend or driver.
    """
    try:
        parsed = sa.make_url(url)
        parsed.get_dialect()
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from exc
    return parsed


def is_async_url(url: sa.URL) -> bool:
    """Whether ``url`` names an async driver (asyncpg, psycopg_async, aiomysql, aiosqlite):
    its SQLAlchemy dialect is an asyncio one (``Dialect.is_async``)."""
    return bool(url.get_dialect().is_async)


def check_url(url: str, *, sync_only: str) -> sa.URL:
    """Parse a command's ``--url`` and import its driver, without connecting.

    For commands that create their engines elsewhere (``demo``, ``bench``, ``chaos``: in
    worker processes, with their own pool settings), on the synchronous core.

    :param sync_only: why the command needs a sync driver, for the refusal of an async one
        (``"the demo's workers run on the synchronous core"``).
    :raises click.BadParameter: (exit 2) as :func:`parse_url`, or if ``url`` names an async
        driver.
    :raises CannotRun: (exit 3) if the backend's driver is not installed.
    """
    parsed = parse_url(url)
    if is_async_url(parsed):
        raise click.BadParameter(
            f"{parsed.drivername} is an async driver and {sync_only}: give the URL of a sync "
            f"driver ({_sync_example(parsed)})",
            param_hint="--url",
        )
    try:
        parsed.get_dialect().import_dbapi()
    except ImportError as exc:
        raise CannotRun(missing_driver(parsed, exc)) from exc
    return parsed


class Database:
    """The database of a command's ``--url``, on the URL's own driver.

    A sync driver's URL gets an Engine. An async driver's URL gets an AsyncEngine and the
    event loop it runs on: a command runs the library's asyncio API there (:meth:`run`),
    or its synchronous API on ``AsyncEngine.sync_engine`` in a greenlet (:meth:`call`),
    where every database call is awaited on the async driver, as
    ``AsyncConnection.run_sync`` does (SQLAlchemy docs, "Asynchronous I/O (asyncio)",
    "Running Synchronous Methods and Functions under asyncio").

    :param engine: the Engine, or the AsyncEngine's ``sync_engine``: what the synchronous
        API takes.
    :param async_engine: the AsyncEngine of an async driver's URL, else None.
    """

    def __init__(self, engine: sa.Engine, async_engine: AsyncEngine | None = None) -> None:
        self.engine = engine
        self.async_engine = async_engine
        self._runner = None if async_engine is None else asyncio.Runner()

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``: synchronous code on :attr:`engine` (in a greenlet on
        the event loop for an async driver); its result or exception."""
        if self._runner is None:
            return fn(*args, **kwargs)
        return self._runner.run(greenlet_spawn(fn, *args, **kwargs))

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` (the asyncio API on :attr:`async_engine`) on the event loop.

        :raises RuntimeError: on a sync driver's database (it has no event loop).
        """
        if self._runner is None:
            coroutine.close()
            raise RuntimeError(f"{self.engine.url.drivername} is not an async driver")
        return self._runner.run(coroutine)

    def close(self) -> None:
        """Dispose of the engine's connections (on its event loop) and close the loop."""
        if self._runner is None or self.async_engine is None:
            self.engine.dispose()
            return
        try:
            self._runner.run(self.async_engine.dispose())
        finally:
            self._runner.close()


def open_database(url: str, *, existing: bool = True, needs_async: str | None = None) -> Database:
    """The :class:`Database` of a command's ``--url``, on the driver the URL names (an
    Engine, or an AsyncEngine for an async driver); nothing is connected yet.

    :param url: a SQLAlchemy URL, as given on the command line.
    :param existing: the command needs tables that must already exist, so a SQLite URL
        naming a file that does not exist is refused instead of creating an empty file.
    :param needs_async: why the command needs an AsyncEngine even for a sync driver's URL
        (``"an async def --handler runs on an AsyncSession"``): a driver without an
        asyncio side (pysqlite, PyMySQL) is then refused; psycopg 3 has one
        (``postgresql+psycopg``).
    :raises click.BadParameter: (exit 2) as :func:`parse_url`, or for ``needs_async`` and a
        driver without an asyncio side.
    :raises CannotRun: (exit 3) if the driver (or, for an async one, greenlet) is not
        installed, with the ``pip install 'sa-inbox[...]'`` that installs it, or the SQLite
        file is missing.
    """
    parsed = parse_url(url)
    path = sqlite_file(parsed)
    if existing and path is not None and not path.is_file():
        raise CannotRun(
            f"the SQLite database file {str(path)!r} does not exist (nothing was created): "
            "check the --url path"
        )
    if needs_async is None and not is_async_url(parsed):
        try:
            return Database(sa.create_engine(parsed))
        except ImportError as exc:
            raise CannotRun(missing_driver(parsed, exc)) from exc
    async_engine = _async_engine(parsed, needs_async)
    return Database(async_engine.sync_engine, async_engine)


def _async_engine(url: sa.URL, needs_async: str | None) -> AsyncEngine:
    """``create_async_engine(url)``, its failures as a command's errors (see
    :func:`open_database`)."""
    if importlib.util.find_spec("greenlet") is None:
        raise CannotRun(
            f"the asyncio side of {url.drivername!r} needs greenlet, which is not installed: "
            f"pip install 'sa-inbox[{_async_extra(url)}]'"
        )
    from sqlalchemy.ext.asyncio import create_async_engine

    try:
        return create_async_engine(url)
    except ImportError as exc:
        raise CannotRun(missing_driver(url, exc)) from exc
    except sa.exc.InvalidRequestError as exc:  # a sync-only driver ("... is not async")
        examples = ASYNC_URL_EXAMPLES.get(url.get_backend_name(), "one with an asyncio side")
        raise click.BadParameter(
            f"{url.drivername} has no asyncio side and {needs_async}: give the URL of an "
            f"async driver ({examples})",
            param_hint="--url",
        ) from exc


#: The extra that installs each async driver with greenlet (by ``URL.get_driver_name()``).
ASYNC_DRIVER_EXTRAS = {
    "asyncpg": "asyncpg",
    "psycopg": "postgresql,asyncio",
    "psycopg_async": "postgresql,asyncio",
    "aiomysql": "aiomysql",
    "aiosqlite": "aiosqlite",
}

#: Async drivers' URLs of each backend, for the message that asks for one.
ASYNC_URL_EXAMPLES = {
    "postgresql": "postgresql+asyncpg:// or postgresql+psycopg://",
    "mysql": "mysql+aiomysql://",
    "mariadb": "mariadb+aiomysql://",
    "sqlite": "sqlite+aiosqlite:///",
}


def _async_extra(url: sa.URL) -> str:
    return ASYNC_DRIVER_EXTRAS.get(url.get_driver_name(), "asyncio")


def _sync_example(url: sa.URL) -> str:
    """A sync driver's URL scheme for ``url``'s backend, for a message."""
    backend = url.get_backend_name()
    if backend == "sqlite":
        return "sqlite:///"
    return f"{DRIVER_EXTRAS[backend][1]}://" if backend in DRIVER_EXTRAS else "its sync driver"


def missing_driver(url: sa.URL, exc: ImportError) -> str:
    """The message for a driver that cannot be imported, naming the extra to install."""
    backend = url.get_backend_name()
    found = f"the database driver for {url.drivername!r} is not installed ({exc})"
    if is_async_url(url):
        return f"{found}: pip install 'sa-inbox[{_async_extra(url)}]'"
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
def connected(url: str, failure: str, *, needs_async: str | None = None) -> Iterator[Database]:
    """The :class:`Database` of a command's ``--url`` for the ``with`` block, closed at its
    end; a database error inside the block ends the command as one ``Error: <failure>: ...``
    line.

    :param url: the ``--url``, as :func:`open_database` takes it.
    :param failure: what failed, for the message (``"purge failed"``).
    :param needs_async: as :func:`open_database`.
    :raises click.ClickException: as :func:`open_database` (exit 2 or 3).
    :raises CannotRun: (exit 3) for a :class:`sqlalchemy.exc.SQLAlchemyError` or a
        :class:`~sa_inbox.exc.ConfigurationError` (a missing table or column) in the block;
        a :class:`~sa_inbox.exc.MissingExtra` is raised as it is (exit 2).
    """
    database = open_database(url, needs_async=needs_async)
    try:
        yield database
    except sa.exc.SQLAlchemyError as exc:
        raise CannotRun(f"{failure}: {exc}") from exc
    except MissingExtra:
        raise  # exit 2 (:class:`Group`): nothing ran
    except ConfigurationError as exc:
        raise CannotRun(f"{failure}: {type(exc).__name__}: {exc}") from exc
    finally:
        database.close()


# -- options every command spells alike -------------------------------------------------


class FiniteRange(click.FloatRange):
    """A :class:`click.FloatRange` of finite numbers: ``nan`` passes its comparisons (every
    one is false) and ``inf`` its open upper end, and either would spin or hang a loop."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


#: A count: messages, workers, rows, attempts (at least 1).
POSITIVE = click.IntRange(min=1)
#: A period in seconds that must pass (above 0).
SECONDS = FiniteRange(min=0, min_open=True)
#: A wait in seconds that may be none (0 or more).
WAIT = FiniteRange(min=0)
#: A share of messages or deliveries, 0 to 1.
SHARE = FiniteRange(0, 1)


def options(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """The click option ``decorators`` as one decorator, in the order listed (the order of
    ``--help``)."""

    def decorate(command: F) -> F:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return decorate


def setting(
    name: str | tuple[str, ...], default: Any, kind: Any, help: str, **kwargs: Any
) -> Callable[[F], F]:
    """An option of type ``kind`` whose ``default`` ``--help`` shows.

    :param name: ``"--name"``, or click's declarations (``("-c", "--config", "config_file")``).
    """
    names = (name,) if isinstance(name, str) else name
    return click.option(*names, default=default, show_default=True, type=kind, help=help, **kwargs)


def url_option(help: str = "Database URL (SQLAlchemy form).", **kwargs: Any) -> Callable[[F], F]:
    """``--url``, required unless ``kwargs`` give a default."""
    kwargs.setdefault("required", "default" not in kwargs)
    return click.option("--url", help=help, **kwargs)


def json_option(help: str, **kwargs: Any) -> Callable[[F], F]:
    """``--json FILE`` (the ``json_path`` parameter): where a command also writes its
    figures."""
    kind = click.Path(dir_okay=False, path_type=Path)
    return click.option("--json", "json_path", type=kind, default=None, help=help, **kwargs)


class Verified(Protocol):
    """A run's verified result (the demo's, the chaos run's)."""

    @property
    def ok(self) -> bool: ...

    def to_json(self) -> dict[str, Any]: ...


@contextmanager
def stop_on_interrupt(console: Console, stopped: str) -> Iterator[None]:
    """End the command with exit :data:`EXIT_INTERRUPTED` on Ctrl-C in the block.

    :param stopped: what Ctrl-C stopped (``"workers"``), for the message.
    """
    try:
        yield
    except KeyboardInterrupt:
        console.print(f"interrupted: {stopped} stopped, nothing verified")
        raise SystemExit(EXIT_INTERRUPTED) from None


def finish(
    console: Console, report: RenderableType, result: Verified, json_path: Path | None
) -> None:
    """Print a run's ``report``, write ``result`` to ``json_path`` (if given).

    :raises SystemExit: :data:`EXIT_FAILED` if the verification failed.
    """
    console.print(report)
    if json_path is not None:
        json_path.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    if not result.ok:
        raise SystemExit(EXIT_FAILED)
