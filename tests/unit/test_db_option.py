"""``pytest --db NAME``: the backend-parametrised tests of the other backends are
deselected (the ``url`` fixture, an async driver, a ``backend`` parameter), and an unknown
name is a usage error. Runs pytest's collection in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Modules with each kind of per-backend parametrisation.
MODULES = [
    "tests/backends/asyncio/test_async_claims.py",  # the async_url fixture (drivers)
    "tests/acceptance/test_store_cli.py",  # the url fixture
    "tests/acceptance/test_retention_cli.py",  # a backend parameter
]


def collect(*options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *options, *MODULES],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def ids(output: str) -> list[str]:
    return [line for line in output.splitlines() if "::" in line]


def test_db_keeps_the_chosen_backends_only() -> None:
    everything = ids(collect().stdout)
    chosen = collect("--db", "sqlite", "--db", "mysql")
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    kept = ids(chosen.stdout)
    assert kept and set(kept) < set(everything)
    for test in kept:
        params = test.partition("[")[2]
        assert not any(name in params for name in ("postgresql", "oracle", "asyncpg", "psycopg"))
    assert any("[aiosqlite" in t for t in kept) and any("[aiomysql" in t for t in kept)
    assert any("[sqlite]" in t for t in kept) and any("[mysql]" in t for t in kept)
    comma = collect("--db", "sqlite,mysql")
    assert ids(comma.stdout) == kept


@pytest.mark.parametrize("value", ["sqlit", "sqlite,postgres"])
def test_an_unknown_db_is_a_usage_error(value: str) -> None:
    done = collect("--db", value)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert (
        "--db: unknown database" in done.stderr
        and "sqlite, postgresql, mysql, oracle" in done.stderr
    )
