"""``sa-inbox purge`` and ``sa-inbox partitions`` run as real subprocesses."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox
from sa_inbox.bench.purge import load_rows
from sa_inbox.retention.partitions import list_partitions, partitioned_processed_messages_table
from sa_inbox.store import DONE, InboxStore, Incoming, utc_now
from tests.conftest import backend_url
from tests.support.cli import ROOT, run_cli

DAY = datetime.timedelta(days=1)
POLICY_ARGS = ["--max-redelivery", "1d", "--max-replay", "2d", "--margin", "1h"]


@pytest.fixture
def sqlite_db(tmp_path: Path) -> tuple[str, sa.Engine, Inbox]:
    url = f"sqlite:///{tmp_path}/cli.db"
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    inbox = Inbox(metadata)
    metadata.create_all(engine)
    with engine.begin() as conn:
        now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
        conn.execute(
            inbox.table.insert(),
            [
                {
                    "message_id": f"m-{i}",
                    "consumer_name": "billing",
                    "received_at": now - (10 * DAY if i % 4 == 0 else DAY),
                }
                for i in range(400)
            ],
        )
    return url, engine, inbox


def _rows(engine: sa.Engine, table: sa.Table) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def test_purge_deletes_expired_rows_and_writes_figures(
    sqlite_db: tuple[str, sa.Engine, Inbox], tmp_path: Path
) -> None:
    url, engine, inbox = sqlite_db
    out = tmp_path / "purge.json"
    done = run_cli("purge", "--url", url, *POLICY_ARGS, "--batch-size", "30", "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "deleted 100 rows in 4 batches" in done.stdout
    figures = json.loads(out.read_text())
    assert figures["rows"] == 100 and figures["batches"] == 4
    assert figures["window_seconds"] == (3 * DAY + datetime.timedelta(hours=1)).total_seconds()
    assert figures["longest_batch_seconds"] > 0
    assert _rows(engine, inbox.table) == 300


def test_a_window_inside_the_policy_is_refused_with_exit_2(
    sqlite_db: tuple[str, sa.Engine, Inbox],
) -> None:
    url, engine, inbox = sqlite_db
    refused = run_cli("purge", "--url", url, *POLICY_ARGS, "--older-than", "3d")
    assert refused.returncode == 2
    assert "refusing to purge" in refused.stderr
    assert _rows(engine, inbox.table) == 400
    bad = run_cli("purge", "--url", url, "--max-redelivery", "soon")
    assert bad.returncode == 2 and "not a duration" in bad.stderr
    for huge in ("99999999999d", "999999999d", "36501d"):  # past datetime's range, or close
        long = run_cli("purge", "--url", url, "--max-redelivery", huge, "--max-replay", "7d")
        assert long.returncode == 2, long.stderr
        assert f"'{huge}' is longer than 36500 days" in long.stderr
        assert "Traceback" not in long.stderr
    assert _rows(engine, inbox.table) == 400


def test_ctrl_c_in_a_purge_exits_130(sqlite_db: tuple[str, sa.Engine, Inbox]) -> None:
    """SIGINT while the purge deletes (100 expired rows, one per batch, a tenth of a
    second between batches): ``interrupted``, exit 130, no traceback; the batches that
    committed stay deleted."""
    url, engine, inbox = sqlite_db
    child = subprocess.Popen(
        [sys.executable, "-m", "sa_inbox.cli", "purge", "--url", url, *POLICY_ARGS,
         "--batch-size", "1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while _rows(engine, inbox.table) == 400:  # the first batch committed: it is deleting
        assert time.monotonic() < deadline and child.poll() is None, child.communicate()
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert err.rstrip().endswith("interrupted") and "Traceback" not in err, err
    assert 300 < _rows(engine, inbox.table) < 400, "stopped part of the way"


def test_the_replay_limit_is_a_required_option(
    sqlite_db: tuple[str, sa.Engine, Inbox],
) -> None:
    url, engine, inbox = sqlite_db
    forgotten = run_cli("purge", "--url", url, "--max-redelivery", "1d")
    assert forgotten.returncode == 2 and "Missing option '--max-replay'" in forgotten.stderr
    assert _rows(engine, inbox.table) == 400, "nothing deleted"
    maintain = run_cli("partitions", "maintain", "--url", url, "--max-redelivery", "1d")
    assert maintain.returncode == 2 and "Missing option '--max-replay'" in maintain.stderr
    explicit = run_cli("purge", "--url", url, "--max-redelivery", "1d", "--max-replay", "0s")
    assert explicit.returncode == 0, explicit.stderr
    assert _rows(engine, inbox.table) == 300, "rows 10 days old go, rows 1 day old stay"


@pytest.mark.parametrize("interval", ["0s", "30s"])
def test_a_partition_interval_under_a_minute_is_a_usage_error(
    sqlite_db: tuple[str, sa.Engine, Inbox], interval: str
) -> None:
    url, _, _ = sqlite_db
    args = ("--url", url, "--max-redelivery", "1d", "--max-replay", "0s", "--interval", interval)
    refused = run_cli("partitions", "maintain", *args)
    assert refused.returncode == 2, refused.stderr
    assert f"'{interval}' is shorter than 1m" in refused.stderr


def test_purge_of_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    store = InboxStore(metadata)
    metadata.create_all(engine)
    old = utc_now() - 10 * DAY
    with engine.begin() as conn:
        store.receive_many(conn, [Incoming(f"m-{i}", {}) for i in range(50)], now=old)
        table = store.table
        conn.execute(table.update().where(table.c.id <= 20).values(status=DONE, processed_at=old))
    done = run_cli("purge", "--url", url, *POLICY_ARGS, "--store")
    assert done.returncode == 0, done.stderr
    assert "deleted 20 rows" in done.stdout
    assert store.counts(engine) == {"pending": 30, "processing": 0, "done": 0, "dead": 0}
    engine.dispose()


@pytest.mark.backend
def test_partitions_maintain_and_list(tmp_path: Path) -> None:
    url = backend_url("postgresql", tmp_path)
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    table = partitioned_processed_messages_table(metadata, table_name="cli_partitioned")
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        args = ["--url", url, "--table", "cli_partitioned", *POLICY_ARGS, "--ahead", "2d"]
        done = run_cli("partitions", "maintain", *args)
        assert done.returncode == 0, done.stderr
        with engine.connect() as conn:
            partitions = list_partitions(conn, table)
        assert f"created {len(partitions)}:" in done.stdout and len(partitions) >= 5
        again = run_cli("partitions", "maintain", *args)
        assert "created 0: -" in again.stdout and "dropped 0: -" in again.stdout
        listed = run_cli("partitions", "list", "--url", url, "--table", "cli_partitioned")
        assert listed.returncode == 0 and partitions[0].name in listed.stdout

        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE cli_arrival (message_id text, consumer_name text, "
                "received_at timestamptz DEFAULT now(), "
                "PRIMARY KEY (message_id, consumer_name, received_at)) "
                "PARTITION BY RANGE (received_at)"
            )
        refused = run_cli(
            "partitions", "maintain", "--url", url, "--table", "cli_arrival", *POLICY_ARGS
        )
        assert refused.returncode == 2 and "arrival time" in refused.stderr
        with engine.connect() as conn:
            count = conn.exec_driver_sql(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'cli_arrival'::regclass"
            ).scalar()
        assert count == 0
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS cli_partitioned, cli_arrival CASCADE")
        engine.dispose()


@pytest.mark.backend
@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_two_purge_processes_at_once(backend: str, tmp_path: Path) -> None:
    """Two ``sa-inbox purge`` processes on one table: no error, no row counted twice."""
    url = backend_url(backend, tmp_path)
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    inbox = Inbox(metadata, table_name="cli_purge")
    metadata.drop_all(engine)
    metadata.create_all(engine)
    rows = 200_000
    try:
        load_rows(backend, engine, "cli_purge", rows)
        args = ["purge", "--url", url, "--table", "cli_purge", "--max-redelivery", "2d"]
        args += ["--max-replay", "7d", "--batch-size", "2000"]
        outputs = [tmp_path / f"purge-{i}.json" for i in range(2)]
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", "sa_inbox.cli", *args, "--json", str(out)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for out in outputs
        ]
        for process in processes:
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr
        deleted = [json.loads(out.read_text())["rows"] for out in outputs]
        assert sum(deleted) == rows // 2, deleted
        with engine.connect() as conn:
            left = conn.execute(
                sa.select(sa.func.count()).where(inbox.table.c.message_id.startswith("old-"))
            ).scalar_one()
        assert left == 0
        assert _rows(engine, inbox.table) == rows // 2
    finally:
        metadata.drop_all(engine)
        engine.dispose()
