"""``scripts/servers.sh kill`` / ``restart`` / ``start`` on the suite's own servers: a
SIGKILLed PostgreSQL or MariaDB comes back on the same URL with its committed rows, and
``start`` creates its directory. Runs only on servers that ``scripts/test.sh`` started
(``SA_INBOX_TEST_SERVER_DIR``): a server of your own is never killed."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import backend_url

ROOT = Path(__file__).resolve().parents[2]
SERVERS_SH = ROOT / "scripts" / "servers.sh"

#: The file ``servers.sh start`` keeps each server's port in, under its directory.
PORT_FILES = {"postgresql": "pg.port", "mysql": "mariadb.port", "redis": "redis/redis.port"}


def servers_sh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SERVERS_SH), *args], capture_output=True, text=True, timeout=300, check=False
    )


def started_here(server_dir: Path, name: str) -> None:
    """Skip unless ``servers.sh start`` started ``name`` in ``server_dir`` (its URL may
    come from the environment instead)."""
    if not (server_dir / PORT_FILES[name]).is_file():
        pytest.skip(f"{name} was not started in {server_dir} by scripts/servers.sh")


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
    backend: str, server_dir: Path, tmp_path: Path
) -> None:
    started_here(server_dir, backend)
    url = backend_url(backend, tmp_path)
    table = f"servers_restart_{uuid.uuid4().hex[:10]}"
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
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {table}")
        engine.dispose()


def test_start_creates_its_directory_and_restart_follows_a_stop(server_dir: Path) -> None:
    """``start`` into a directory that does not exist yet (Redis: the fastest to start);
    ``restart`` after ``stop`` brings it back on the same port."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    parent = Path(tempfile.mkdtemp(prefix="sa-inbox-servers-"))
    directory = parent / "new" / "dir"
    try:
        started = servers_sh("start", str(directory), "redis")
        assert started.returncode == 0, started.stderr
        port = (directory / PORT_FILES["redis"]).read_text().strip()
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
