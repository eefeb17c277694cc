"""The progress total of ``sa-inbox purge`` is the number of rows the purge deletes.

On an inbox store's table the purge deletes ``done`` rows by ``processed_at`` (and, with
``--store --dead-older-than``, ``dead`` rows by ``received_at``); the total it announces
must count exactly those, with or without ``--store``, on every backend.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox.store import DEAD, DONE, InboxStore, Incoming, utc_now
from tests.acceptance.test_cli_errors import run_cli

DAY = datetime.timedelta(days=1)
POLICY_ARGS = ["--max-redelivery", "1d", "--max-replay", "2d", "--margin", "1h"]
TABLE = "cli_total_store"


@pytest.fixture
def store(engine: sa.Engine) -> Iterator[InboxStore]:
    """A store whose 40 rows all arrived 10 days ago: 10 done 10 days ago (expired), 5 done
    an hour ago (inside the window), 4 dead, 21 pending."""
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name=TABLE)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    old = utc_now() - 10 * DAY
    table = store.table
    with engine.begin() as conn:
        store.receive_many(conn, [Incoming(f"m-{i:02d}", {}) for i in range(40)], now=old)
        ids = list(conn.execute(sa.select(table.c.id).order_by(table.c.id)).scalars())
        changes = [
            (ids[:10], {"status": DONE, "processed_at": old}),
            (ids[10:15], {"status": DONE, "processed_at": utc_now() - datetime.timedelta(hours=1)}),
            (ids[15:19], {"status": DEAD}),
        ]
        for chosen, values in changes:
            conn.execute(table.update().where(table.c.id.in_(chosen)).values(**values))
    yield store
    metadata.drop_all(engine)


def purge(url: str, tmp_path: Path, *args: str) -> tuple[int, int, int]:
    """Run ``sa-inbox purge``: (progress completed, progress total, rows in the JSON)."""
    out = tmp_path / "purge.json"
    done = run_cli("purge", "--url", url, "--table", TABLE, *POLICY_ARGS, *args, "--json", str(out))
    assert done.returncode == 0, done.stderr
    progress = re.search(rf"purging \S*{TABLE}\b.*?(\d+)/(\d+)", done.stderr)
    assert progress is not None, done.stderr
    return int(progress[1]), int(progress[2]), json.loads(out.read_text())["rows"]


@pytest.mark.parametrize(
    ("args", "deleted", "left"),
    [
        ([], 10, {"pending": 21, "processing": 0, "done": 5, "dead": 4}),
        (["--store"], 10, {"pending": 21, "processing": 0, "done": 5, "dead": 4}),
        (
            ["--store", "--dead-older-than", "5d"],
            14,
            {"pending": 21, "processing": 0, "done": 5, "dead": 0},
        ),
    ],
    ids=["table-only", "store", "store-and-dead"],
)
def test_the_progress_total_is_the_rows_deleted(
    url: str,
    engine: sa.Engine,
    store: InboxStore,
    tmp_path: Path,
    args: list[str],
    deleted: int,
    left: dict[str, int],
) -> None:
    completed, total, rows = purge(url, tmp_path, *args)
    assert (completed, total, rows) == (deleted, deleted, deleted)
    assert store.counts(engine) == left
