"""Every example the documentation shows (docs/examples/*.py, included by the pages) runs
and checks its own result: on SQLite and on PostgreSQL, and those of a broker against the
live broker. A page cannot show code that does not run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import backend_url, broker_url

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"

#: Examples on a synchronous database URL (DATABASE_URL; SQLite when unset).
DATABASE_EXAMPLES = [
    "claim",
    "session_extension",
    "store",
    "outbox",
    "retention",
    "collisions",
    "metrics",
    "alembic_rename_consumer",
]
#: Examples that need nothing but Python and SQLite files of their own.
LOCAL_EXAMPLES = ["testing_handlers", "sharding"]
#: Examples on a live broker: the broker, and whether the database URL is an async one.
BROKER_EXAMPLES = {
    "redis_consumer": ("redis", "REDIS_URL", False),
    "asyncio_rabbitmq": ("rabbitmq", "AMQP_URL", True),
    "nats_consumer": ("nats", "NATS_URL", True),
    "dead_letters": ("redis", "REDIS_URL", False),
}
#: Async driver of each backend's URL.
ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}

#: Pages whose inline Python is not run, and why. Everything else is included from
#: docs/examples/ (``literalinclude``) and run here.
NOT_RUN = {
    "how-to/sqs.md": "the consumer shown runs in tests/backends/brokers/test_sqs.py, against moto",
    "how-to/kafka.md": "the consumer shown runs in tests/backends/brokers/test_kafka.py, "
    "against Tansu",
    "how-to/faststream-celery.md": "application wiring: tests/backends/brokers/test_faststream.py "
    "and test_celery.py run the same wiring in real worker processes on the live brokers",
    "testing-your-handlers.md": "its test runs as written in "
    "tests/backends/testkit/test_docs_example.py; the fault helpers it shows run in "
    "tests/backends/testkit/test_faults.py on the live brokers",
    "console.md": "the app mounted under a path, as shown, is driven by a real browser in "
    "tests/backends/console/test_console_browser.py",
}


def run_example(name: str, cwd: Path, **environment: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        cwd=cwd,
        env={**{k: v for k, v in os.environ.items() if k != "DATABASE_URL"}, **environment},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{name}.py failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(backend, URL) of a database of the test's own: a file, or a new PostgreSQL database."""
    url = backend_url(request.param, tmp_path)
    if request.param == "sqlite":
        yield request.param, url
        return
    name = f"sa_inbox_docs_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield request.param, sa.make_url(url).set(database=name).render_as_string(False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


@pytest.mark.parametrize("name", DATABASE_EXAMPLES)
def test_database_example(name: str, database: tuple[str, str], tmp_path: Path) -> None:
    run_example(name, tmp_path, DATABASE_URL=database[1])


@pytest.mark.parametrize("name", LOCAL_EXAMPLES)
def test_local_example(name: str, tmp_path: Path) -> None:
    run_example(name, tmp_path)


@pytest.mark.parametrize("name", sorted(BROKER_EXAMPLES))
def test_broker_example(name: str, database: tuple[str, str], tmp_path: Path) -> None:
    broker, variable, asynchronous = BROKER_EXAMPLES[name]
    backend, url = database
    environment = {variable: broker_url(broker)}
    if asynchronous:
        url = sa.make_url(url).set(drivername=ASYNC_DRIVERS[backend]).render_as_string(False)
        environment["ASYNC_DATABASE_URL"] = url
    else:
        environment["DATABASE_URL"] = url
    out = run_example(name, tmp_path, **environment)
    assert "PROCESSED" in out


def test_the_commands_of_the_pages_run(tmp_path: Path) -> None:
    """docs/examples/cli.sh (the sa-inbox commands the how-to pages include) on the tables
    retention.py makes in a SQLite file, and against the live Redis."""
    redis_url = broker_url("redis")
    run_example("retention", tmp_path)
    bin_dir = str(Path(sys.executable).parent)  # the sa-inbox of this environment
    done = subprocess.run(
        ["bash", str(EXAMPLES / "cli.sh")],
        cwd=tmp_path,
        env={
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "DATABASE_URL": f"sqlite:///{tmp_path}/retention.db",
            "REDIS_URL": redis_url.rstrip("/"),
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "stats.json").read_text())["warnings"] == []
    pages = "\n".join(path.read_text() for path in DOCS.rglob("*.md"))
    for section in re.findall(r"^# \[([a-z-]+)\]$", (EXAMPLES / "cli.sh").read_text(), re.M):
        assert f'"# [{section}]"' in pages, f"cli.sh's [{section}] is on no page"


def test_every_example_is_run_and_shown() -> None:
    files = {path.stem for path in EXAMPLES.glob("*.py")}
    assert files == set(DATABASE_EXAMPLES) | set(LOCAL_EXAMPLES) | set(BROKER_EXAMPLES)
    pages = "\n".join(path.read_text() for path in DOCS.rglob("*.md"))
    for name in files:
        assert f"examples/{name}.py" in pages, f"docs/examples/{name}.py is on no page"


def test_pages_show_python_only_from_the_examples() -> None:
    inline = {}
    for path in DOCS.rglob("*.md"):
        page = path.relative_to(DOCS).as_posix()
        if page.startswith(("_build/", "examples/")) or page in NOT_RUN:
            continue
        blocks = re.findall(r"^```(?:python|py|pycon)\s*$", path.read_text(), re.MULTILINE)
        if blocks:
            inline[page] = len(blocks)
    assert not inline, f"inline Python that no test runs: {inline}"
