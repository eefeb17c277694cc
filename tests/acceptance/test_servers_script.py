"""``scripts/servers.sh kill`` / ``restart`` / ``start``: a SIGKILLed PostgreSQL or MariaDB
comes back on the same URL with its committed rows, and ``start`` creates its directory.
Each test kills servers of its own (:func:`tests.support.servers.own_servers`), never the
suite's, which other tests use meanwhile."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support.servers import OwnServers, own_servers, servers_sh

#: The file ``servers.sh start`` keeps Redis's port in, under its directory.
REDIS_PORT_FILE = "redis/redis.port"
URL_VARIABLES = {"postgresql": "SA_INBOX_TEST_POSTGRESQL_URL", "mysql": "SA_INBOX_TEST_MYSQL_URL"}


@pytest.fixture(scope="module")
def databases() -> Iterator[OwnServers]:
    """A PostgreSQL and a MariaDB of this module's own."""
    with own_servers("postgresql", "mysql") as servers:
        yield servers


def one_value(url: str, sql: str) -> object:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql(sql).scalar()
    finally:
        engine.dispose()


@pytest.mark.backend
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_killed_server_restarts_on_its_url_with_its_rows(
    backend: str, databases: OwnServers
) -> None:
    server_dir = databases.directory
    url = databases.env[URL_VARIABLES[backend]]
    table = "servers_restart"
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {table} (n INTEGER)")
        conn.exec_driver_sql(f"INSERT INTO {table} VALUES (42)")
    killed = servers_sh("kill", str(server_dir), backend)
    try:
        assert killed.returncode == 0, killed.stderr
        with pytest.raises(sa.exc.OperationalError):
            one_value(url, "SELECT 1")
        again = servers_sh("restart", str(server_dir), backend)
        assert again.returncode == 0, again.stderr
        assert one_value(url, f"SELECT n FROM {table}") == 42  # the same server, its data
        twice = servers_sh("restart", str(server_dir), backend)
        assert twice.returncode == 1 and "is running" in twice.stderr
    finally:
        servers_sh("restart", str(server_dir), backend)  # whatever failed, bring it back
        engine.dispose()


def test_start_creates_its_directory_and_restart_follows_a_stop() -> None:
    """``start`` into a directory that does not exist yet (Redis: the fastest to start);
    ``restart`` after ``stop`` brings it back on the same port."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    parent = Path(tempfile.mkdtemp(prefix="sa-inbox-servers-"))
    directory = parent / "new" / "dir"
    try:
        started = servers_sh("start", str(directory), "redis")
        assert started.returncode == 0, started.stderr
        port = (directory / REDIS_PORT_FILE).read_text().strip()
        assert f"redis://127.0.0.1:{port}/0" in (directory / "env.sh").read_text()
        servers_sh("stop", str(directory))
        assert servers_sh("kill", str(directory), "redis").returncode == 1  # not running
        again = servers_sh("restart", str(directory), "redis")
        assert again.returncode == 0, again.stderr
        ping = subprocess.run(
            ["redis-cli", "-p", port, "ping"], capture_output=True, text=True, timeout=30
        )
        assert ping.stdout.strip() == "PONG"
    finally:
        servers_sh("stop", str(directory))
        shutil.rmtree(parent, ignore_errors=True)
