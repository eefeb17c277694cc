"""Bad arguments to ``sa-inbox`` commands, run as real subprocesses: a clean ``Error:``
line and exit code (2 usage, 3 could not run), never a traceback, and nothing changed."""

from __future__ import annotations

import datetime
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox
from tests.conftest import backend_url
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
DAY = datetime.timedelta(days=1)
POLICY_ARGS = ["--max-redelivery", "1d", "--max-replay", "2d"]
HANDLER = "tests.acceptance.cli_handler:record"


@pytest.fixture
def sqlite_inbox(tmp_path: Path) -> Iterator[tuple[str, sa.Engine, sa.Table]]:
    """A SQLite file with the processed-messages table: 40 rows, 10 of them 10 days old."""
    url = f"sqlite:///{tmp_path}/inbox.db"
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    inbox = Inbox(metadata)
    metadata.create_all(engine)
    with engine.begin() as conn:
        now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
        rows = [
            {"message_id": f"m-{i}", "consumer_name": "c", "received_at": now - DAY * (i % 4 * 3)}
            for i in range(40)
        ]
        conn.execute(inbox.table.insert(), rows)
    yield url, engine, inbox.table
    engine.dispose()


def count(engine: sa.Engine, table: sa.Table) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def test_an_unknown_log_level_is_a_usage_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    done = run_cli("worker", "--url", url, "--handler", HANDLER, "--log-level", "LOUD")
    assert done.returncode == 2
    assert "Invalid value for '--log-level': 'LOUD' is not one of" in done.stderr
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("target", ["/proc/nope", "a-file/migrations"])
def test_alembic_init_where_no_directory_can_be_made(tmp_path: Path, target: str) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    done = run_cli("alembic", "init", target, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "Error: cannot create the Alembic environment in" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"], "nothing written"


def test_an_unwritable_json_path_is_refused_before_the_purge(
    sqlite_inbox: tuple[str, sa.Engine, sa.Table], tmp_path: Path
) -> None:
    url, engine, table = sqlite_inbox
    for path in ["/nonexistent/dir/x.json", str(tmp_path)]:
        done = run_cli("purge", "--url", url, *POLICY_ARGS, "--json", path)
        assert done.returncode == 2, done.stderr
        assert "Invalid value for '--json'" in done.stderr
        assert count(engine, table) == 40, "nothing deleted"
    out = tmp_path / "figures.json"
    done = run_cli("purge", "--url", url, *POLICY_ARGS, "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert count(engine, table) == 20 and out.is_file(), "the 9- and 6-day-old rows went"


#: Every command that opens --url, with the arguments it needs besides --url.
URL_COMMANDS = [
    ["worker", "--consumer", "default", "--handler", HANDLER, "--until-empty"],
    ["store", "counts"],
    ["store", "replay", "--status", "dead"],
    ["outbox", "counts"],
    ["outbox", "replay", "--status", "dead"],
    ["purge", *POLICY_ARGS],
    ["purge", *POLICY_ARGS, "--store"],
    ["partitions", "list"],
    ["partitions", "maintain", *POLICY_ARGS],
]


def _with_url(command: list[str], url: str) -> list[str]:
    split = 2 if command[0] in ("store", "outbox", "partitions") else 1
    return [*command[:split], "--url", url, *command[split:]]


def run_without(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``sa-inbox ARGS`` in a Python where ``import MODULE`` fails, as if not installed."""
    code = f"import sys; sys.modules[{module!r}] = None; from sa_inbox.cli import main; main()"
    completed = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed


@pytest.mark.parametrize(
    "command",
    [*URL_COMMANDS, ["demo", "--messages", "10"], ["bench", "growth", "--rows", "10"]],
    ids=lambda c: " ".join(c[:2]),
)
@pytest.mark.parametrize(
    ("module", "url", "extra"),
    [
        ("psycopg", "postgresql+psycopg://u@127.0.0.1:1/db", "postgresql"),
        ("psycopg", "postgresql://u@127.0.0.1:1/db", "postgresql"),
        ("pymysql", "mysql+pymysql://u@127.0.0.1:1/db", "mysql"),
        ("oracledb", "oracle+oracledb://u@127.0.0.1:1/db", "oracle"),
    ],
)
def test_a_missing_driver_is_reported_the_same_way_by_every_command(
    command: list[str], module: str, url: str, extra: str
) -> None:
    done = run_without(module, *_with_url(command, url))
    assert done.returncode == 3, done.stderr
    assert f"Error: the database driver for {url.split(':')[0]!r} is not installed" in done.stderr
    assert f"No module named '{module}'" in done.stderr or module in done.stderr
    assert f"pip install 'sa-inbox[{extra}]'" in done.stderr


@pytest.mark.parametrize("command", URL_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_missing_sqlite_file_is_refused_and_not_created(
    command: list[str], tmp_path: Path
) -> None:
    missing = tmp_path / "typo.db"
    done = run_cli(*_with_url(command, f"sqlite:///{missing}"))
    assert done.returncode == 3, done.stderr
    assert f"the SQLite database file '{missing}' does not exist" in done.stderr
    assert not missing.exists(), "no empty database file left behind"


def test_purge_of_a_missing_table_says_it_does_not_exist(
    sqlite_inbox: tuple[str, sa.Engine, sa.Table],
) -> None:
    url, engine, table = sqlite_inbox
    cases = [
        (["--table", "nosuch"], "the table 'nosuch' does not exist"),
        (["--store"], "the store table 'inbox_store' does not exist"),
        (["--store", "--table", "nosuch"], "the store table 'nosuch' does not exist"),
    ]
    for extra, message in cases:
        done = run_cli("purge", "--url", url, *POLICY_ARGS, *extra)
        assert done.returncode == 3, done.stderr
        assert f"Error: {message}" in done.stderr
        assert "SELECT" not in done.stderr, "no raw SQL"
    assert count(engine, table) == 40, "nothing deleted"


@pytest.mark.backend
def test_partition_commands_on_a_missing_table(tmp_path: Path) -> None:
    url = backend_url("postgresql", tmp_path)
    for command in (["list"], ["maintain", *POLICY_ARGS]):
        done = run_cli("partitions", command[0], "--url", url, "--table", "nosuch", *command[1:])
        assert done.returncode == 3, done.stderr
        assert "Error: the table 'nosuch' does not exist" in done.stderr


@pytest.mark.backend
def test_partition_commands_on_an_unpartitioned_table(tmp_path: Path) -> None:
    url = backend_url("postgresql", tmp_path)
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    plain = Inbox(metadata, table_name="cli_not_partitioned").table
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        for command in (["list"], ["maintain", *POLICY_ARGS]):
            done = run_cli(
                "partitions", command[0], "--url", url, "--table", plain.name, *command[1:]
            )
            assert done.returncode == 2, done.stderr
            assert "table 'cli_not_partitioned' is not partitioned" in done.stderr
            assert done.stdout == ""
        assert count(engine, plain) == 0
        with engine.connect() as conn:
            children = conn.exec_driver_sql(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'cli_not_partitioned'::regclass"
            ).scalar()
        assert children == 0, "nothing created"
    finally:
        metadata.drop_all(engine)
        engine.dispose()


def test_bench_help_names_every_scenario_it_accepts() -> None:
    from sa_inbox.cli.bench import bench

    (names,) = [p for p in bench.params if p.name == "names"]
    accepted = list(names.type.choices)  # type: ignore[attr-defined]
    assert "purge" in accepted and "report" in accepted
    done = run_cli("bench", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # click wraps the help
    for name in accepted:
        assert name in text, f"bench accepts {name!r} but its help does not name it"


@pytest.mark.parametrize(
    "command",
    [["demo"], ["bench", "claim_overhead"], ["chaos", "--broker", "amqp://127.0.0.1:1/"]],
    ids=["demo", "bench", "chaos"],
)
def test_commands_on_the_sync_core_refuse_an_async_drivers_url(
    command: list[str], tmp_path: Path
) -> None:
    """demo, bench and chaos run their workers on the synchronous core: an async driver's
    URL is refused with one line naming the sync URL (exit 2), no file created, instead of
    being swapped for another driver or failing with "greenlet_spawn has not been called"."""
    path = tmp_path / "async.db"
    done = run_cli(*command, "--url", f"sqlite+aiosqlite:///{path}")
    assert done.returncode == 2, done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "sqlite+aiosqlite is an async driver and" in error[0]
    assert error[0].endswith("give the URL of a sync driver (sqlite:///)")
    assert not path.exists()
