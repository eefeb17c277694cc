"""Backend fixtures: every ``backend`` test runs once per database.

SQLite is embedded (a file in the test's temp dir). PostgreSQL, MariaDB/MySQL and Oracle come
from URLs in ``SA_INBOX_TEST_POSTGRESQL_URL``, ``SA_INBOX_TEST_MYSQL_URL`` and
``SA_INBOX_TEST_ORACLE_URL`` (``scripts/test.sh`` starts throwaway PostgreSQL and MariaDB
servers and sets the first two). A missing URL skips that backend locally; with ``CI=true``
a missing PostgreSQL or MySQL URL is a failure, never a skip. Oracle has no server here and
runs only when its URL is set.

``pytest --db NAME`` (repeatable, or comma-separated: ``--db sqlite,postgresql``) runs the
backend tests of those databases only: every test parametrised by backend (the ``url``
fixture, a ``backend`` parameter, an async driver of :data:`ASYNC_DRIVERS`, a pair of
backends) whose backends are not all chosen is deselected, and :func:`backend_url` skips a
backend that is not chosen. Tests of an optional extra import its modules through
:func:`importorskip`: a skip locally, a failure with ``CI=true``.

Under pytest-xdist (``pytest -n N --dist loadgroup``, as ``scripts/test.sh`` runs it) each
worker gets PostgreSQL and MariaDB databases of its own, and the tests that share something
else run in one xdist group (:mod:`tests.support.parallel`).
"""

from __future__ import annotations

import gc
import importlib
import os
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa

from tests.support import parallel
from tests.support.app import App

if TYPE_CHECKING:
    from tests.support.store_app import StoreApp

pytest_plugins = ["tests.support.reports", "tests.support.unawaited"]

BACKENDS = ("sqlite", "postgresql", "mysql", "oracle")
URL_VARIABLES = {
    "postgresql": "SA_INBOX_TEST_POSTGRESQL_URL",
    "mysql": "SA_INBOX_TEST_MYSQL_URL",
    "oracle": "SA_INBOX_TEST_ORACLE_URL",
}
REQUIRED_IN_CI = ("postgresql", "mysql")

#: Each async driver under test: (its backend, the driver name of its URL).
ASYNC_DRIVERS = {
    "aiosqlite": ("sqlite", "sqlite+aiosqlite"),
    "asyncpg": ("postgresql", "postgresql+asyncpg"),
    "psycopg_async": ("postgresql", "postgresql+psycopg"),
    "aiomysql": ("mysql", "mysql+aiomysql"),
}

#: The live brokers scripts/test.sh starts (all required in CI).
BROKER_URL_VARIABLES = {
    "rabbitmq": "SA_INBOX_TEST_AMQP_URL",
    "redis": "SA_INBOX_TEST_REDIS_URL",
    "nats": "SA_INBOX_TEST_NATS_URL",
    "kafka": "SA_INBOX_TEST_KAFKA_URL",
    "sqs": "SA_INBOX_TEST_SQS_URL",
}


#: The three nodes' URLs of the live MariaDB Galera cluster scripts/test.sh starts (comma-
#: separated), and the directory scripts/servers.sh started it in (to kill and restart a node).
GALERA_URLS_VARIABLE = "SA_INBOX_TEST_GALERA_URLS"
GALERA_DIR_VARIABLE = "SA_INBOX_TEST_GALERA_DIR"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


#: The backends ``--db`` chose (all by default); set by :func:`pytest_configure`.
CHOSEN: set[str] = set(BACKENDS)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run the backend tests of these databases only ({', '.join(BACKENDS)}); "
        "repeatable or comma-separated; default: all",
    )


def chosen_backends(values: list[str]) -> set[str]:
    """The backends of ``--db`` values (every backend for none).

    :raises pytest.UsageError: for a name that is not a backend.
    """
    names = {name.strip() for value in values for name in value.split(",") if name.strip()}
    unknown = names - set(BACKENDS)
    if unknown:
        raise pytest.UsageError(
            f"--db: unknown database {', '.join(sorted(unknown))} (one of {', '.join(BACKENDS)})"
        )
    return names or set(BACKENDS)


def pytest_configure(config: pytest.Config) -> None:
    CHOSEN.clear()
    CHOSEN.update(chosen_backends(config.getoption("db")))
    parallel.start_worker(
        config, [URL_VARIABLES[name] for name in REQUIRED_IN_CI if name in CHOSEN]
    )
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(parallel.scheduler_plugin(), "sa-inbox-xdist-groups")


def pytest_unconfigure(config: pytest.Config) -> None:
    parallel.end_worker(config)


def backends_of(value: Any) -> set[str]:
    """The backends a test parameter's value names: a backend, an async driver of
    :data:`ASYNC_DRIVERS`, or a tuple of those; none for any other value."""
    if isinstance(value, tuple):
        return set().union(*(backends_of(v) for v in value))
    if isinstance(value, str) and value in BACKENDS:
        return {value}
    if isinstance(value, str) and value in ASYNC_DRIVERS:
        return {ASYNC_DRIVERS[value][0]}
    return set()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the backend-parametrised tests of backends ``--db`` did not choose; check
    the xdist groups (:func:`parallel.check_groups`)."""
    parallel.check_groups(items)
    if not set(BACKENDS) - CHOSEN:
        return
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        needed = set().union(*(backends_of(value) for value in params))
        (dropped if needed - CHOSEN else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def importorskip(module: str, extra: str) -> ModuleType:
    """``module``, imported, for the tests of the optional extra ``sa-inbox[extra]``: skips
    the test (or the module, at its top) when it is not installed, and fails instead with
    ``CI=true``, where every extra must be tested."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        message = f"{module} is not installed ({exc}): pip install -e '.[{extra},test]'"
        if _in_ci():
            pytest.fail(f"{message}: CI must test sa-inbox[{extra}]", pytrace=False)
        pytest.skip(message, allow_module_level=True)


def backend_url(name: str, tmp_path: object) -> str:
    """The URL for backend ``name``; skips (or fails, in CI) when it is not configured, and
    skips when ``--db`` did not choose it."""
    if name not in CHOSEN:
        pytest.skip(f"--db {','.join(sorted(CHOSEN))}: {name} not chosen")
    if name == "sqlite":
        return f"sqlite:///{tmp_path}/inbox.db"
    url = os.environ.get(URL_VARIABLES[name])
    if url:
        return url
    message = f"{URL_VARIABLES[name]} is not set"
    if _in_ci() and name in REQUIRED_IN_CI:
        pytest.fail(f"{message}: CI must test {name} (run ./scripts/test.sh)")
    pytest.skip(f"{message}; no {name} server to test against")


def async_driver_url(name: str, tmp_path: object) -> str:
    """The URL of async driver ``name`` (a key of :data:`ASYNC_DRIVERS`), as
    :func:`backend_url` gives its backend's."""
    backend, driver = ASYNC_DRIVERS[name]
    url = sa.make_url(backend_url(backend, tmp_path))
    return url.set(drivername=driver).render_as_string(hide_password=False)


def broker_url(name: str) -> str:
    """The URL of live broker ``name``; skips locally (fails in CI) when it is not set."""
    variable = BROKER_URL_VARIABLES[name]
    url = os.environ.get(variable)
    if url:
        return url
    if _in_ci():
        pytest.fail(f"{variable} is not set: CI must test against {name} (run ./scripts/test.sh)")
    pytest.skip(f"{variable} is not set; no {name} broker to test against")


def _required(variable: str, what: str) -> str:
    """``$variable``; skips locally (fails in CI) when it is not set. ``what`` completes
    "CI must test …"."""
    value = os.environ.get(variable)
    if value:
        return value
    if _in_ci():
        pytest.fail(f"{variable} is not set: CI must test {what} (run ./scripts/test.sh)")
    pytest.skip(f"{variable} is not set; cannot test {what}")


@pytest.fixture
def galera_urls() -> list[str]:
    """The URLs of the three nodes of the live Galera cluster (each node's test database);
    skips locally (fails in CI) when ``SA_INBOX_TEST_GALERA_URLS`` is not set."""
    urls = _required(GALERA_URLS_VARIABLE, "on a MariaDB Galera cluster").split(",")
    assert len(urls) == 3, f"{GALERA_URLS_VARIABLE} must hold 3 URLs, not {len(urls)}"
    return urls


@pytest.fixture
def galera_dir(galera_urls: list[str]) -> str:
    """The directory ``scripts/servers.sh`` started the Galera cluster in (for
    ``galera-kill``/``galera-restart``); skips locally (fails in CI) when
    ``SA_INBOX_TEST_GALERA_DIR`` is not set."""
    return _required(GALERA_DIR_VARIABLE, "killing and restarting Galera nodes")


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """The database URL of the backend under test (one test run per backend)."""
    request.applymarker(pytest.mark.backend)
    return backend_url(request.param, tmp_path)


@pytest.fixture
def engine(url: str) -> Iterator[sa.Engine]:
    engine = (
        sa.create_engine(url, pool_size=10, max_overflow=10)
        if not url.startswith("sqlite")
        else sa.create_engine(url, connect_args={"timeout": 30})
    )
    yield engine
    engine.dispose()


@pytest.fixture
def store_app(request: pytest.FixtureRequest, url: str) -> Iterator[StoreApp]:
    """The store tests' schema (:class:`tests.support.store_app.StoreApp`) made anew on the
    backend under test, with the test module's ``ACCOUNTS`` accounts opened (if it sets it)."""
    from tests.support.store_app import fresh_store_app

    with fresh_store_app(url, getattr(request.module, "ACCOUNTS", 0)) as store_app:
        yield store_app


@pytest.fixture
def app(engine: sa.Engine) -> Iterator[App]:
    """A fresh accounts/ledger schema plus the inbox table on the backend under test."""
    app = App(engine)
    app.reset()
    yield app
    app.drop()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move everything alive after the collection (modules, test items, parametrisations)
    out of the collector's reach (:func:`gc.freeze`): it lives until the session ends, and
    each full collection the tests cause would otherwise walk all of it again. Objects the
    tests make are collected as before."""
    gc.collect()
    gc.freeze()
