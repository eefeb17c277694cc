"""The purge on a live Galera cluster: purgers on two nodes at once.

MySQL/MariaDB purgers take turns on ``GET_LOCK()``, which holds on one node only on Galera
(MariaDB KB, "MariaDB Galera Cluster - Known Limitations"): purgers on two nodes delete the
same oldest rows at once and one batch fails certification (1213) at COMMIT. The purge runs
such a batch again (it raised the 1213 to the caller before); between them the two delete
every expired row once, and nothing else.
"""

from __future__ import annotations

import datetime
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from sa_inbox import RetentionPolicy, purge
from tests.support.app import App
from tests.support.galera import GaleraCluster

pytestmark = pytest.mark.backend

EXPIRED = 20_000
KEPT = 100
POLICY = RetentionPolicy(
    max_redelivery=datetime.timedelta(days=7), max_replay=datetime.timedelta(days=7)
)


def load(app: App) -> None:
    """:data:`EXPIRED` claims from 2020 and :data:`KEPT` from now, through ``app``'s node."""
    table = app.inbox.table
    old = datetime.datetime(2020, 1, 1)
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    with app.engine.begin() as conn:
        for start in range(0, EXPIRED, 5000):
            rows = range(start, start + 5000)
            conn.execute(
                table.insert(),
                [{"message_id": f"m{i}", "consumer_name": "c", "received_at": old} for i in rows],
            )
        conn.execute(
            table.insert(),
            [
                {"message_id": f"k{i}", "consumer_name": "c", "received_at": now}
                for i in range(KEPT)
            ],
        )


def test_purgers_on_two_nodes_delete_every_expired_row_once(
    cluster: GaleraCluster, caplog: pytest.LogCaptureFixture
) -> None:
    load(cluster.apps[0])
    barrier = threading.Barrier(2)

    def purging(app: App) -> int:
        barrier.wait(timeout=30)
        return purge(app.engine, older_than=POLICY, table=app.inbox, batch_size=500)

    with caplog.at_level(logging.INFO, logger="sa_inbox"), ThreadPoolExecutor(2) as pool:
        deleted = list(pool.map(purging, cluster.apps[:2]))

    assert sum(deleted) == EXPIRED  # each row deleted (and counted) once, no error raised
    retries = [r for r in caplog.records if getattr(r, "event", None) == "inbox.purge.retry"]
    assert retries, "the two purgers never conflicted: nothing was proven"
    for check in cluster.checks:
        with check.engine.connect() as conn:
            table = check.inbox.table
            left = conn.execute(sa.select(table.c.message_id)).scalars().all()
        assert sorted(left) == sorted(f"k{i}" for i in range(KEPT))
