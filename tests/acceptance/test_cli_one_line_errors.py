"""Every command that could not run says so in one ``Error:`` line (exit code 3): a driver's
multi-line message is joined, SQLAlchemy's statement and link are left out."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox.cli._common import CannotRun, one_line
from tests.acceptance.test_cli_errors import URL_COMMANDS, _with_url, run_cli

#: Nothing listens on port 1: the connection is refused at once.
UNREACHABLE = {
    "postgresql": "postgresql+psycopg://u@127.0.0.1:1/db",
    "mysql": "mysql+pymysql://u@127.0.0.1:1/db",
}


def test_one_line_drops_sql_parameters_and_link() -> None:
    text = (
        "(psycopg.OperationalError) connection failed: refused\n"
        "\tIs the server running on that host?\n"
        "[SQL: SELECT 1\nFROM t]\n[parameters: {}]\n"
        "(Background on this error at: https://sqlalche.me/e/20/e3q8)"
    )
    expected = (
        "(psycopg.OperationalError) connection failed: refused Is the server running on that host?"
    )
    assert one_line(text) == expected
    assert CannotRun(text).message == expected
    assert one_line("already one line") == "already one line"


@pytest.mark.parametrize("backend", sorted(UNREACHABLE))
@pytest.mark.parametrize("command", URL_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_an_unreachable_server_is_one_error_line(command: list[str], backend: str) -> None:
    if command[0] == "partitions" and backend != "postgresql":
        pytest.skip("partitions refuse every backend but PostgreSQL before connecting")
    done = run_cli(*_with_url(command, UNREACHABLE[backend]))
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("Error: cannot connect to the database: ("), done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.endswith("\n"), done.stderr
    assert "sqlalche.me" not in done.stderr


@pytest.mark.parametrize(
    ("command", "failure"),
    [
        (["store", "counts"], "cannot count the store's rows"),
        (["store", "replay", "--status", "dead"], "replay failed"),
    ],
)
def test_a_database_error_after_connecting_is_one_error_line(
    tmp_path: Path, command: list[str], failure: str
) -> None:
    """A table named like the store but without its columns: the query fails (a database
    error, or the store's MissingTable), cleanly."""
    url = f"sqlite:///{tmp_path}/wrong.db"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE inbox_store (id INTEGER PRIMARY KEY)")
    engine.dispose()
    done = run_cli(*_with_url(command, url))
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith(f"Error: {failure}: "), done.stderr
    assert "no such column" in done.stderr and "status" in done.stderr
    assert done.stderr.count("\n") == 1 and "[SQL:" not in done.stderr, done.stderr
