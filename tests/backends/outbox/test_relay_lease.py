"""The relay's lease (``RelayCore.lease``) on each database: the rows it leases, in ``id``
order, one per destination when ordered, under one lease token; and ``RelayCore.claim``, its
former name, kept for one release with a :class:`DeprecationWarning`."""

from __future__ import annotations

import uuid

import pytest

from sa_inbox.outbox.relay import RelayCore
from tests.backends.outbox.test_relay_streams import oapp, record
from tests.support.outbox_app import OutboxApp

__all__ = ["oapp"]  # fixtures

pytestmark = pytest.mark.backend


def test_an_ordered_lease_takes_the_first_row_of_each_destination(oapp: OutboxApp) -> None:
    first, second = (f"dest-{uuid.uuid4().hex}" for _ in range(2))
    a = record(oapp, first, 2)
    b = record(oapp, second, 1)
    core = RelayCore(oapp.engine, oapp.outbox, ordered=True)
    leased = core.lease()
    assert [m.message_id for m in leased] == [a[0], b[0]]
    assert len({m.claimed_by for m in leased}) == 1 and all(m.attempts == 1 for m in leased)
    rows = {r["message_id"]: r for r in oapp.outbox_rows()}
    assert [rows[i]["status"] for i in (*a, *b)] == ["processing", "pending", "processing"]
    assert rows[a[0]]["claimed_by"] == leased[0].claimed_by
    assert core.lease() == [], "the next row of a destination waits for the one in flight"
    assert core.release(leased) == 2
    assert {r["status"] for r in oapp.outbox_rows()} == {"pending"}
    assert {r["attempts"] for r in oapp.outbox_rows()} == {0}, "the lease's attempt taken back"


def test_claim_is_the_deprecated_name_of_lease(oapp: OutboxApp) -> None:
    sent = record(oapp, f"dest-{uuid.uuid4().hex}", 2)
    core = RelayCore(oapp.engine, oapp.outbox)
    with pytest.warns(DeprecationWarning, match=r"RelayCore\.claim\(\) is renamed lease\(\)"):
        leased = core.claim()
    assert [m.message_id for m in leased] == sent
    assert {r["status"] for r in oapp.outbox_rows()} == {"processing"}
    assert core.mark_dispatched(leased) == 2
    assert {r["status"] for r in oapp.outbox_rows()} == {"dispatched"}
