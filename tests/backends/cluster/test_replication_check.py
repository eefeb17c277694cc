"""``sa-inbox stats --check`` on a real PostgreSQL primary + standby (``scripts/servers.sh``
``pg-sync`` / ``pg-async``), in a subprocess as a probe runs it: 15 when the primary's
standby is asynchronous, 14 when ``synchronous_standby_names`` asks for a standby that is
not connected (and on a standby that inherited it), 0 with a synchronous standby and on the
server ``pg-promote`` promoted (it clears the inherited setting). A probe role without
``pg_read_all_stats`` sees the standbys' rows with NULL details: it still gets 15 when
``synchronous_standby_names`` is empty, and with a synchronous standby the output says the
check could not be completed instead of "no warnings".

Needs PostgreSQL 15 (``scripts/servers.sh install``). About 10 s for both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox
from sa_inbox.stats import WARNING_CODES
from tests.support.pgha import process_alive, replicated_servers

pytestmark = [pytest.mark.backend, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
TABLE = "replication_check_inbox"
SYNC_MISSING, ASYNC = WARNING_CODES["sync-standby-missing"], WARNING_CODES["async-standbys"]
UNCHECKED = WARNING_CODES["replication-unchecked"]


def stats(url: str, flag: str) -> subprocess.CompletedProcess[str]:
    """``sa-inbox stats --url URL FLAG`` in a subprocess, on the inbox table only."""
    command = [sys.executable, "-m", "sa_inbox.cli", "stats", "--url", url, "--table", TABLE]
    return subprocess.run(
        [*command, "--store-table", "", flag],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )


def check(url: str) -> tuple[int, str]:
    """``sa-inbox stats --check`` on ``url``: its exit status and output."""
    done = stats(url, "--check")
    return done.returncode, done.stdout + done.stderr


def check_json(url: str) -> dict[str, Any]:
    """The ``--json`` document of ``sa-inbox stats`` on ``url``."""
    done = stats(url, "--json")
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def create_inbox(primary_url: str, standby_url: str) -> None:
    """The inbox table on the primary, and wait until the standby has replayed it."""
    metadata = sa.MetaData()
    Inbox(metadata, table_name=TABLE)
    primary, standby = sa.create_engine(primary_url), sa.create_engine(standby_url)
    try:
        metadata.create_all(primary)
        deadline = time.monotonic() + 30
        while not sa.inspect(standby).has_table(TABLE):
            assert time.monotonic() < deadline, "the standby never replayed the table"
            time.sleep(0.05)
    finally:
        primary.dispose()
        standby.dispose()


def alter_system(url: str, setting: str, value: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f"ALTER SYSTEM SET {setting} = '{value}'"))
            conn.execute(sa.text("SELECT pg_reload_conf()"))
        deadline = time.monotonic() + 10
        while True:  # pg_reload_conf() only signals: wait for new sessions to see it
            with engine.connect() as conn:
                if conn.execute(sa.text(f"SHOW {setting}")).scalar_one() == value:
                    return
            assert time.monotonic() < deadline, f"{setting} never became {value!r}"
            time.sleep(0.05)
    finally:
        engine.dispose()


def probe_role(primary_url: str) -> str:
    """A login role on the primary with SELECT on the inbox table and nothing else (no
    ``pg_read_all_stats``); its URL."""
    engine = sa.create_engine(primary_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("CREATE ROLE inbox_probe LOGIN")
            conn.exec_driver_sql(f"GRANT SELECT ON {TABLE} TO inbox_probe")
            member = conn.exec_driver_sql(
                "SELECT pg_has_role('inbox_probe', 'pg_read_all_stats', 'USAGE')"
            ).scalar_one()
            assert member is False
    finally:
        engine.dispose()
    url: str = (
        sa.make_url(primary_url)
        .set(username="inbox_probe", password=None)
        .render_as_string(hide_password=False)
    )
    return url


def hidden_standbys(url: str) -> list[dict[str, Any]]:
    """The standbys as ``url``'s role sees them, asserted hidden (state and sync_state
    NULL; the application_name comes from ``pg_stat_activity``, visible to all)."""
    standbys: list[dict[str, Any]] = check_json(url)["replication"]["standbys"]
    assert [(s["state"], s["sync_state"]) for s in standbys] == [(None, None)]
    return standbys


def test_asynchronous_standby_exits_15_on_the_primary_only() -> None:
    with replicated_servers("async") as servers:
        create_inbox(servers.primary_url, servers.standby_url)
        code, text = check(servers.primary_url)
        assert code == ASYNC == 15, text
        assert "async-standbys" in text and "none synchronous" in text
        replication = check_json(servers.primary_url)["replication"]
        assert replication["in_recovery"] is False
        assert [s["sync_state"] for s in replication["standbys"]] == ["async"]
        code, text = check(servers.standby_url)
        assert code == 0, text
        # The probe role cannot read sync_state, but synchronous_standby_names = '' alone
        # proves the standby asynchronous.
        probe = probe_role(servers.primary_url)
        hidden_standbys(probe)
        code, text = check(probe)
        assert code == ASYNC, text
        assert "none synchronous" in text and "could not be completed" not in text


def test_synchronous_standby_is_healthy_and_a_missing_one_exits_14() -> None:
    with replicated_servers("sync") as servers:
        create_inbox(servers.primary_url, servers.standby_url)
        pids = servers.postmaster_pids()
        assert len(pids) == 2 and all(map(process_alive, pids))
        code, text = check(servers.primary_url)
        assert code == 0, text
        replication = check_json(servers.primary_url)["replication"]
        assert [s["sync_state"] for s in replication["standbys"]] == ["sync"]
        # The probe role cannot tell whether the standby is synchronous: said, not all-clear.
        probe = probe_role(servers.primary_url)
        hidden_standbys(probe)
        code, text = check(probe)
        assert code == UNCHECKED == 16, text
        assert "could not be completed" in text and "pg_read_all_stats" in text, text
        assert "no warnings" not in text, text
        kinds = [w["kind"] for w in check_json(probe)["warnings"]]
        assert (
            kinds == ["replication-unchecked"] and not check_json(servers.primary_url)["warnings"]
        )
        # The standby inherited synchronous_standby_names = '*' from the base backup.
        code, text = check(servers.standby_url)
        assert code == SYNC_MISSING == 14, text
        assert "once promoted" in text
        # Promoted by servers.sh, which clears it: healthy, no standby, no waiting.
        servers.freeze()
        servers.kill()
        servers.promote()
        code, text = check(servers.standby_url)
        assert code == 0, text
        # A synchronous standby named but never connected: every COMMIT would wait.
        alter_system(servers.standby_url, "synchronous_standby_names", "nobody")
        code, text = check(servers.standby_url)
        assert code == SYNC_MISSING, text
        assert "0 connected" in text
    # servers.sh stop leaves nothing running (the primary was killed, the standby promoted).
    assert not any(map(process_alive, pids))
