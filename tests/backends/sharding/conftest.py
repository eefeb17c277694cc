"""Two real PostgreSQL servers as two shards.

Shard ``a`` is the suite's PostgreSQL (``SA_INBOX_TEST_POSTGRESQL_URL``); shard ``b`` is a
second, throwaway PostgreSQL 15 server started once for the session by the project's own
``scripts/servers.sh start DIR postgresql`` in a temp dir, and stopped afterwards. It fails
the tests in CI when it cannot start, and skips them locally.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import _in_ci, backend_url

SERVERS_SH = Path(__file__).resolve().parents[3] / "scripts" / "servers.sh"


def _unavailable(message: str) -> None:
    if _in_ci():
        pytest.fail(f"{message}: CI must test sharding on two PostgreSQL servers")
    pytest.skip(message)


@pytest.fixture(scope="session")
def second_postgresql_url() -> Iterator[str]:
    """The URL of a second PostgreSQL server, started once for the test session and stopped after.

    Its directory is made under the system temp dir, not pytest's (whose parent is closed
    to other users, and the server runs as the ``postgres`` user when the tests run as
    root)."""
    directory = Path(tempfile.mkdtemp(prefix="sa-inbox-shard-"))
    try:
        subprocess.run(
            [str(SERVERS_SH), "start", str(directory), "postgresql"],
            check=True,
            capture_output=True,
            text=True,
            timeout=180,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        subprocess.run([str(SERVERS_SH), "stop", str(directory)], check=False, timeout=120)
        shutil.rmtree(directory, ignore_errors=True)
        detail = getattr(exc, "stderr", "") or str(exc)
        _unavailable(f"scripts/servers.sh could not start a second PostgreSQL: {detail[-500:]}")
    try:
        env = (directory / "env.sh").read_text()
        match = re.search(r"SA_INBOX_TEST_POSTGRESQL_URL='([^']+)'", env)
        assert match, env
        yield match.group(1)
    finally:
        subprocess.run([str(SERVERS_SH), "stop", str(directory)], check=False, timeout=120)
        shutil.rmtree(directory, ignore_errors=True)


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
