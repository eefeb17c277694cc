"""Purge of the inbox store on real servers: old ``done`` rows go, everything else stays."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from sa_inbox.exc import InboxError, InvalidBind, InvalidTableType, RetentionWindowTooShort
from sa_inbox.retention import Batch, RetentionPolicy, purge, purge_store
from sa_inbox.store import DEAD, DONE, PENDING, PROCESSING, InboxStore, Incoming, utc_now

pytestmark = pytest.mark.backend

POLICY = RetentionPolicy(
    max_redelivery=datetime.timedelta(days=1),
    max_replay=datetime.timedelta(days=3),
    margin=datetime.timedelta(hours=1),
)
DAY = datetime.timedelta(days=1)
#: (status, age) of each group of rows; the age sets processed_at (done) or received_at.
GROUPS = {
    "done-old": (DONE, 6 * DAY),
    "done-edge": (DONE, POLICY.window - datetime.timedelta(minutes=5)),
    "done-new": (DONE, DAY),
    "dead-old": (DEAD, 40 * DAY),
    "dead-new": (DEAD, 6 * DAY),
    "pending-old": (PENDING, 40 * DAY),
    "processing-old": (PROCESSING, 40 * DAY),
}
PER_GROUP = 120


@pytest.fixture
def store(engine: sa.Engine) -> Iterator[InboxStore]:
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name="retention_store")
    metadata.drop_all(engine)
    metadata.create_all(engine)
    now = utc_now()
    for group, (status, age) in GROUPS.items():
        messages = [Incoming(f"{group}-{i}", {"n": i}) for i in range(PER_GROUP)]
        with engine.begin() as conn:
            received_at = now - age - DAY if status == DONE else now - age
            assert len(store.receive_many(conn, messages, now=received_at)) == PER_GROUP
            table = store.table
            values: dict[str, object] = {"status": status}
            if status == DONE:
                values["processed_at"] = now - age
            conn.execute(
                table.update().where(table.c.message_id.startswith(f"{group}-")).values(values)
            )
    yield store
    metadata.drop_all(engine)


def _count(engine: sa.Engine, store: InboxStore, group: str) -> int:
    table = store.table
    query = sa.select(sa.func.count()).where(table.c.message_id.startswith(f"{group}-"))
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def test_only_old_done_rows_go_and_dead_rows_have_their_own_window(
    engine: sa.Engine, store: InboxStore
) -> None:
    batches: list[Batch] = []
    result = purge_store(engine, store, older_than=POLICY, batch_size=50, on_batch=batches.append)
    assert (result.done, result.dead, result.total) == (PER_GROUP, 0, PER_GROUP)
    assert all(batch.rows <= 50 for batch in batches) and len(batches) == 3
    remaining = {group: _count(engine, store, group) for group in GROUPS}
    assert remaining == {group: 0 if group == "done-old" else PER_GROUP for group in GROUPS}

    # A redelivery of a done message just inside the window is still a duplicate.
    with engine.begin() as conn:
        assert not store.receive(conn, "done-edge-0", {"n": 0})
        assert store.receive(conn, "done-old-0", {"n": 0})  # purged: stored again as new

    result = purge_store(engine, store, older_than=POLICY, dead_older_than=30 * DAY)
    assert (result.done, result.dead) == (0, PER_GROUP)
    assert _count(engine, store, "dead-old") == 0
    assert _count(engine, store, "dead-new") == PER_GROUP
    assert _count(engine, store, "pending-old") == PER_GROUP
    assert _count(engine, store, "processing-old") == PER_GROUP
    assert store.counts(engine)[PENDING] == PER_GROUP + 1  # pending-old and done-old-0 again


def test_a_dead_window_inside_the_policy_is_refused(engine: sa.Engine, store: InboxStore) -> None:
    with pytest.raises(RetentionWindowTooShort):
        purge_store(engine, store, older_than=POLICY, dead_older_than=DAY)
    with pytest.raises(RetentionWindowTooShort):
        purge_store(engine, store, older_than=DAY, policy=POLICY)
    assert sum(store.counts(engine).values()) == len(GROUPS) * PER_GROUP


@pytest.mark.parametrize("form", ["store", "table", "reflected"])
def test_purge_takes_the_store_and_deletes_only_its_old_done_rows(
    engine: sa.Engine, store: InboxStore, form: str
) -> None:
    """``purge(table=store)`` (or the store's table, even reflected) applies the store's
    rules: old ``done`` rows by ``processed_at``; never pending, processing or dead rows,
    however old their ``received_at``."""
    table: InboxStore | sa.Table = {
        "store": lambda: store,
        "table": lambda: store.table,
        "reflected": lambda: sa.Table(store.table.name, sa.MetaData(), autoload_with=engine),
    }[form]()
    before = {group: _count(engine, store, group) for group in GROUPS}
    assert before == dict.fromkeys(GROUPS, PER_GROUP)

    assert purge(engine, older_than=POLICY, table=table, batch_size=50) == PER_GROUP

    after = {group: _count(engine, store, group) for group in GROUPS}
    assert after == {group: 0 if group == "done-old" else PER_GROUP for group in GROUPS}
    assert purge(engine, older_than=POLICY, table=table) == 0


@pytest.mark.parametrize(
    "bad", [object(), "inbox_store", sa.MetaData(), sa.select(sa.literal(1)).subquery()]
)
def test_a_wrong_purge_target_is_a_typed_error_and_deletes_nothing(
    engine: sa.Engine, store: InboxStore, bad: object
) -> None:
    with pytest.raises(InvalidTableType, match="table must be") as raised:
        purge(engine, older_than=POLICY, table=bad)  # type: ignore[arg-type]
    assert isinstance(raised.value, InboxError) and isinstance(raised.value, TypeError)
    with pytest.raises(InvalidTableType, match="store must be"):
        purge_store(engine, bad, older_than=POLICY)  # type: ignore[arg-type]
    with pytest.raises(InvalidBind, match="bind must be"):
        purge(bad, older_than=POLICY, table=store)  # type: ignore[arg-type]
    with pytest.raises(InvalidBind, match="bind must be"):
        purge_store(bad, store, older_than=POLICY)  # type: ignore[arg-type]
    assert sum(store.counts(engine).values()) == len(GROUPS) * PER_GROUP


def test_purge_is_at_the_top_level_and_purge_store_in_retention() -> None:
    import sa_inbox
    import sa_inbox.retention

    assert sa_inbox.purge is purge and sa_inbox.retention.purge_store is purge_store
    assert "purge" in sa_inbox.__all__
    assert {"purge", "purge_store", "StorePurgeResult"} <= set(sa_inbox.retention.__all__)
