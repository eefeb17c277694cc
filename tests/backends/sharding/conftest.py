"""Two real PostgreSQL servers as two shards.

Shard ``a`` is the suite's PostgreSQL (``SA_INBOX_TEST_POSTGRESQL_URL``); shard ``b`` is a
second, throwaway PostgreSQL 15 server started once for the session by the project's own
``scripts/servers.sh start DIR postgresql`` in a temp dir, and stopped afterwards. It fails
the tests in CI when it cannot start, and skips them locally.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.conftest import backend_url
from tests.support.servers import own_servers


@pytest.fixture(scope="session")
def second_postgresql_url() -> Iterator[str]:
    """The URL of a second PostgreSQL server, started once for the test session (for the
    xdist worker running the sharding tests' group) and stopped after."""
    with own_servers("postgresql") as servers:
        yield servers.env["SA_INBOX_TEST_POSTGRESQL_URL"]


@pytest.fixture(scope="session")
def shard_urls(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """``{"a": the suite's PostgreSQL, "b": the second server}`` (the first is checked
    before the second is started)."""
    first = backend_url("postgresql", tmp_path_factory.getbasetemp())
    return {"a": first, "b": request.getfixturevalue("second_postgresql_url")}


@pytest.fixture
def shard_engines(shard_urls: dict[str, str]) -> Iterator[dict[str, sa.Engine]]:
    engines = {
        name: sa.create_engine(url, pool_size=10, max_overflow=10)
        for name, url in shard_urls.items()
    }
    yield engines
    for engine in engines.values():
        engine.dispose()
