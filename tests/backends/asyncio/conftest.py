"""Async backend fixtures: every test runs once per async driver, on the real servers the
sync suite uses (aiosqlite on a file; asyncpg and psycopg 3 async on PostgreSQL; aiomysql on
MariaDB). A missing server skips locally and fails in CI, as for the sync suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.conftest import ASYNC_DRIVERS as DRIVERS
from tests.conftest import async_driver_url
from tests.support.app import App, sync_driver_url
from tests.support.store_app import StoreApp, fresh_store_app


@pytest.fixture(params=list(DRIVERS))
def async_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """The async URL of the driver under test (one run per async driver)."""
    request.applymarker(pytest.mark.backend)
    return async_driver_url(request.param, tmp_path)


@pytest.fixture
def sync_url(async_url: str) -> str:
    """The same database through the sync driver (to set up and to read business state)."""
    return sync_driver_url(async_url).render_as_string(hide_password=False)


@pytest.fixture
def app(sync_url: str) -> Iterator[App]:
    """The accounts/ledger schema and the inbox table, made with the sync driver."""
    engine = sa.create_engine(sync_url)
    app = App(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


@pytest.fixture
def store_app(request: pytest.FixtureRequest, sync_url: str) -> Iterator[StoreApp]:
    """The store tests' schema made with the sync driver (the root fixture's, on
    ``sync_url``)."""
    with fresh_store_app(sync_url, getattr(request.module, "ACCOUNTS", 0)) as store_app:
        yield store_app
