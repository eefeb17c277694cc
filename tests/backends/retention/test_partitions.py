"""PostgreSQL time partitions: deduplication across partitions, the refused arrival-time key,
and maintenance that never drops a partition overlapping the retention window."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from sa_inbox.exc import (
    AutocommitConnection,
    InvalidArgument,
    InvalidMessageId,
    UnsafePartitionKey,
    UnsupportedBackend,
)
from sa_inbox.retention import RetentionPolicy, database_now, purge
from sa_inbox.retention.partitions import (
    MaintenanceResult,
    PartitionedInbox,
    check_partition_key,
    check_partition_key_on_server,
    create_partition,
    drop_expired_partitions,
    ensure_partitions,
    list_partitions,
    maintain_partitions,
    partition_key_definition,
    partition_range,
    partitioned_processed_messages_table,
)
from sa_inbox.schema import processed_messages_table
from tests.conftest import backend_url

DAY = datetime.timedelta(days=1)
POLICY = RetentionPolicy(max_redelivery=DAY, max_replay=2 * DAY, margin=datetime.timedelta(hours=1))
TABLE = "retention_partitioned"


# -- the checks, without a database --------------------------------------------------------


def _hand_built(key: sa.Column[datetime.datetime], *, spec: str | None = None) -> sa.Table:
    return sa.Table(
        "hand_built",
        sa.MetaData(),
        sa.Column("message_id", sa.String(255), nullable=False),
        sa.Column("consumer_name", sa.String(255), nullable=False),
        key,
        sa.PrimaryKeyConstraint("message_id", "consumer_name", key.name),
        postgresql_partition_by=spec or f"RANGE ({key.name})",
    )


def test_the_builder_refuses_the_arrival_time_as_partition_key() -> None:
    with pytest.raises(UnsafePartitionKey, match="arrival time"):
        partitioned_processed_messages_table(sa.MetaData(), partition_key="received_at")


@pytest.mark.parametrize(
    ("key", "spec", "message"),
    [
        (sa.Column("received_at", sa.DateTime(True), nullable=False), None, "arrival time"),
        (
            sa.Column("arrived", sa.DateTime(True), nullable=False, server_default=sa.func.now()),
            None,
            "default",
        ),
        (
            sa.Column("arrived", sa.DateTime(True), nullable=False, default=datetime.datetime.now),
            None,
            "default",
        ),
        (sa.Column("event_time", sa.DateTime(True), nullable=True), None, "nullable"),
        (
            sa.Column("event_time", sa.DateTime(True), nullable=False),
            "LIST (event_time)",
            "RANGE on one column",
        ),
        (
            sa.Column("event_time", sa.DateTime(True), nullable=False),
            "RANGE (date_trunc('day', event_time))",
            "RANGE on one column",
        ),
    ],
)
def test_unsafe_partition_keys_are_refused(
    key: sa.Column[datetime.datetime], spec: str | None, message: str
) -> None:
    with pytest.raises(UnsafePartitionKey, match=message):
        check_partition_key(_hand_built(key, spec=spec))


def test_the_key_must_be_in_the_primary_key() -> None:
    table = sa.Table(
        "t",
        sa.MetaData(),
        sa.Column("message_id", sa.String(10), primary_key=True),
        sa.Column("consumer_name", sa.String(10), primary_key=True),
        sa.Column("event_time", sa.DateTime(True), nullable=False),
        postgresql_partition_by="RANGE (event_time)",
    )
    with pytest.raises(UnsafePartitionKey, match="lacks \\['event_time'\\]"):
        check_partition_key(table)


def test_the_safe_design() -> None:
    table = partitioned_processed_messages_table(sa.MetaData(), partition_key="produced_at")
    assert check_partition_key(table).name == "produced_at"
    assert [c.name for c in table.primary_key.columns] == [
        "message_id",
        "consumer_name",
        "produced_at",
    ]
    moment = datetime.datetime(2026, 11, 30, 17, 5, tzinfo=datetime.UTC)
    assert partition_range(moment, DAY) == (
        datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC),
        datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC),
    )


# -- on PostgreSQL ---------------------------------------------------------------------------


@pytest.fixture
def pg(tmp_path: object) -> Iterator[sa.Engine]:
    engine = sa.create_engine(backend_url("postgresql", tmp_path))
    yield engine
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}, arrival_partitioned CASCADE")
    engine.dispose()


@pytest.fixture
def table(pg: sa.Engine) -> sa.Table:
    metadata = sa.MetaData()
    table = partitioned_processed_messages_table(metadata, table_name=TABLE)
    metadata.drop_all(pg)
    metadata.create_all(pg)
    return table


def _now(engine: sa.Engine) -> datetime.datetime:
    with engine.connect() as conn:
        return database_now(conn)


def _rows(engine: sa.Engine, table: sa.Table) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


@pytest.mark.backend
def test_every_redelivery_across_partitions_is_a_duplicate(pg: sa.Engine, table: sa.Table) -> None:
    created = ensure_partitions(pg, table, policy=POLICY, ahead=2 * DAY)
    assert len(created) >= 5  # the window (3 days 1 hour) and two days ahead
    assert ensure_partitions(pg, table, policy=POLICY, ahead=2 * DAY) == []
    inbox = PartitionedInbox(table)
    now = _now(pg)
    # 600 messages whose own times spread over the whole window and a day ahead.
    messages = {
        f"m-{i}": now - POLICY.window + i * datetime.timedelta(minutes=9) for i in range(600)
    }
    assert max(messages.values()) > now + 0.5 * DAY

    for attempt in range(3):  # the first delivery, then two redeliveries, arriving later
        with pg.begin() as conn:
            claimed = [inbox.claim(conn, m, "billing", event_time=t) for m, t in messages.items()]
        assert all(claimed) if attempt == 0 else not any(claimed)
    assert _rows(pg, table) == 600
    with pg.connect() as conn:
        per_partition = conn.execute(
            sa.text(f"SELECT tableoid::regclass, count(*) FROM {TABLE} GROUP BY 1")
        ).all()
    assert len(per_partition) >= 4, "the messages really are spread over partitions"

    with pytest.raises(InvalidMessageId, match="timezone-aware"), pg.begin() as conn:
        inbox.claim(conn, "m-naive", "billing", event_time=datetime.datetime(2026, 1, 1))


@pytest.mark.backend
def test_a_claim_outside_every_partition_fails_and_writes_nothing(
    pg: sa.Engine, table: sa.Table
) -> None:
    ensure_partitions(pg, table, policy=POLICY, ahead=DAY)
    inbox = PartitionedInbox(table)
    far = _now(pg) + 30 * DAY
    with pytest.raises(IntegrityError, match="no partition"), pg.begin() as conn:
        inbox.claim(conn, "m-far", "billing", event_time=far)
    assert _rows(pg, table) == 0


@pytest.mark.backend
def test_a_claim_in_autocommit_is_refused_and_writes_nothing(
    pg: sa.Engine, table: sa.Table
) -> None:
    """The claim would commit on its own, apart from the business change."""
    ensure_partitions(pg, table, policy=POLICY, ahead=DAY)
    inbox = PartitionedInbox(table)
    now = _now(pg)
    with pg.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        with pytest.raises(AutocommitConnection):
            inbox.claim(conn, "m-1", "billing", event_time=now)
    autocommit = pg.execution_options(isolation_level="AUTOCOMMIT")
    with Session(autocommit) as session, pytest.raises(AutocommitConnection):
        inbox.claim(session, "m-1", "billing", event_time=now)
    assert _rows(pg, table) == 0


@pytest.mark.backend
def test_a_session_whose_binds_are_routed_by_table(pg: sa.Engine, table: sa.Table) -> None:
    """No default bind: the claim's connection is the one bound to the partitioned table,
    shared with the business change; through a scoped_session too."""
    ensure_partitions(pg, table, policy=POLICY, ahead=DAY)
    ledger = sa.Table(
        "partition_ledger",
        sa.MetaData(),
        sa.Column("message_id", sa.String(255), primary_key=True),
        sa.Column("amount", sa.Integer, nullable=False),
    )
    ledger.drop(pg, checkfirst=True)
    ledger.create(pg)
    inbox = PartitionedInbox(table)
    now = _now(pg)
    factory = sessionmaker(binds={table: pg, ledger: pg})
    scoped = scoped_session(factory)
    try:
        for message_id, session_of in [("m-1", factory), ("m-1", factory), ("m-2", scoped)]:
            session = session_of()
            with session.begin():
                if inbox.claim(session, message_id, "billing", event_time=now):
                    session.execute(ledger.insert().values(message_id=message_id, amount=10))
            session.close()
        scoped.remove()
        with pg.connect() as conn:
            assert conn.execute(sa.select(sa.func.sum(ledger.c.amount))).scalar_one() == 20
        assert _rows(pg, ledger) == 2
        assert _rows(pg, table) == 2
    finally:
        ledger.drop(pg)


@pytest.mark.backend
def test_a_claim_off_postgresql_is_refused(tmp_path: object) -> None:
    engine = sa.create_engine(backend_url("sqlite", tmp_path))
    metadata = sa.MetaData()
    table = partitioned_processed_messages_table(metadata)
    metadata.create_all(engine)
    now = datetime.datetime.now(datetime.UTC)
    with pytest.raises(UnsupportedBackend, match="PostgreSQL"), engine.begin() as conn:
        PartitionedInbox(table).claim(conn, "m-1", "billing", event_time=now)
    assert _rows(engine, table) == 0
    engine.dispose()


@pytest.mark.backend
def test_arrival_time_partitions_process_a_redelivery_twice_and_are_refused(
    pg: sa.Engine,
) -> None:
    """The refused design, built by hand: the same message lands in two partitions."""
    now = _now(pg)
    today, tomorrow = partition_range(now, DAY)
    yesterday = today - DAY
    with pg.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE arrival_partitioned (message_id varchar(255) NOT NULL, "
            "consumer_name varchar(255) NOT NULL, received_at timestamptz NOT NULL "
            "DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (message_id, consumer_name, received_at)) "
            "PARTITION BY RANGE (received_at)"
        )
        for lower in (yesterday, today):
            conn.exec_driver_sql(
                f"CREATE TABLE arrival_partitioned_{lower:%Y%m%d} PARTITION OF "
                f"arrival_partitioned FOR VALUES FROM ('{lower.isoformat()}') "
                f"TO ('{(lower + DAY).isoformat()}')"
            )
    table = sa.Table("arrival_partitioned", sa.MetaData(), autoload_with=pg)
    # The first delivery arrived yesterday; the broker redelivers it now.
    insert = "INSERT INTO arrival_partitioned VALUES ('m-1', 'billing', %s) ON CONFLICT DO NOTHING"
    with pg.begin() as conn:
        first = conn.exec_driver_sql(insert, (yesterday + datetime.timedelta(hours=12),))
        again = conn.exec_driver_sql(insert, (now,))
        assert (first.rowcount, again.rowcount) == (1, 1), "both deliveries were claimed"
    assert _rows(pg, table) == 2  # processed twice: the reason the design is refused

    with pg.connect() as conn:
        with pytest.raises(UnsafePartitionKey, match="arrival time"):
            check_partition_key_on_server(conn, table)
        before = list_partitions(conn, table)
    with pytest.raises(UnsafePartitionKey):
        maintain_partitions(pg, table, policy=POLICY)
    with pg.connect() as conn:
        assert list_partitions(conn, table) == before, "nothing created or dropped"

    # A default is the other sign of an arrival time, whatever the column's name.
    with pg.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE arrival_partitioned RENAME COLUMN received_at TO t")
        with pytest.raises(UnsafePartitionKey, match="default"):
            check_partition_key_on_server(conn, table)
    assert tomorrow > now


@pytest.mark.backend
def test_only_partitions_wholly_outside_the_window_are_dropped(
    pg: sa.Engine, table: sa.Table
) -> None:
    now = _now(pg)
    cutoff = now - POLICY.window
    boundary, _ = partition_range(cutoff, DAY)  # the partition holding the cut-off
    with pg.begin() as conn:
        for days in range(1, 6):
            create_partition(conn, table, boundary - days * DAY, DAY)
    ensure_partitions(pg, table, policy=POLICY, ahead=DAY)
    inbox = PartitionedInbox(table)
    with pg.begin() as conn:
        for days in range(1, 6):
            assert inbox.claim(conn, f"old-{days}", "billing", event_time=boundary - days * DAY)
        # In the boundary partition: one message just outside the window, one just inside.
        assert inbox.claim(conn, "edge-out", "billing", event_time=boundary)
        inside = cutoff + datetime.timedelta(minutes=5)
        assert inbox.claim(conn, "edge-in", "billing", event_time=inside)
        assert inbox.claim(conn, "new", "billing", event_time=now)
    with pg.connect() as conn:
        expected = [p.name for p in list_partitions(conn, table) if p.upper <= cutoff]
    assert len(expected) == 5

    dropped = drop_expired_partitions(pg, table, policy=POLICY)

    assert dropped == expected
    with pg.connect() as conn:
        remaining = list_partitions(conn, table)
    assert remaining[0].lower == boundary and remaining[0].upper > cutoff
    assert all(p.upper > now - POLICY.window for p in remaining)
    assert _rows(pg, table) == 3  # edge-out stays: its partition overlaps the window
    with pg.begin() as conn:
        assert not inbox.claim(conn, "edge-in", "billing", event_time=inside)
        assert not inbox.claim(conn, "edge-out", "billing", event_time=boundary)
    assert drop_expired_partitions(pg, table, policy=POLICY) == []


@pytest.mark.backend
def test_expired_partitions_are_dropped_one_per_transaction(pg: sa.Engine, table: sa.Table) -> None:
    """DROP TABLE of a partition locks the partitioned table (ACCESS EXCLUSIVE) until the
    commit, so claims wait behind the whole transaction: with an Engine, each partition is
    dropped and committed on its own; with a Connection, one transaction on it drops all."""
    boundary, _ = partition_range(_now(pg) - POLICY.window, DAY)

    def expired_partitions() -> None:
        with pg.begin() as conn:
            for days in range(1, 4):
                create_partition(conn, table, boundary - days * DAY, DAY)

    expired_partitions()
    events: list[str] = []

    def statement(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        if sql.startswith("DROP TABLE"):
            events.append("drop")

    sa.event.listen(pg, "before_cursor_execute", statement)
    sa.event.listen(pg, "commit", lambda conn: events.append("commit"))
    try:
        with pg.connect() as conn:
            assert len(drop_expired_partitions(conn, table, policy=POLICY)) == 3
        assert events == ["drop"] * 3 + ["commit"]
        expired_partitions()
        events.clear()
        assert len(drop_expired_partitions(pg, table, policy=POLICY)) == 3
    finally:
        sa.event.remove(pg, "before_cursor_execute", statement)
    assert events == ["drop", "commit"] * 3 + ["commit"]  # the last: nothing left to drop
    with pg.connect() as conn:
        assert all(p.upper > boundary for p in list_partitions(conn, table))


@pytest.mark.backend
def test_purge_of_a_partitioned_table_by_primary_key(pg: sa.Engine, table: sa.Table) -> None:
    ensure_partitions(pg, table, policy=POLICY, ahead=DAY)
    now = _now(pg)
    with pg.begin() as conn:
        conn.execute(
            table.insert(),
            [
                {
                    "message_id": f"m-{i}",
                    "consumer_name": "billing",
                    "event_time": now - i * datetime.timedelta(minutes=30),
                    "received_at": now - (POLICY.window + DAY if i % 3 == 0 else DAY),
                }
                for i in range(120)
            ],
        )
    assert purge(pg, older_than=POLICY, table=table, batch_size=7) == 40
    assert _rows(pg, table) == 80


@pytest.mark.backend
def test_two_maintainers_at_once_create_each_partition_once(pg: sa.Engine, table: sa.Table) -> None:
    barrier = threading.Barrier(2, timeout=30)
    results: list[object] = [None, None]

    def maintain(index: int) -> None:
        try:
            with pg.connect() as conn:  # a Connection bind, not in a transaction
                barrier.wait()
                results[index] = maintain_partitions(conn, table, policy=POLICY, ahead=3 * DAY)
        except BaseException as exc:  # asserted on below
            results[index] = exc

    threads = [threading.Thread(target=maintain, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert all(isinstance(r, MaintenanceResult) for r in results), results
    created = [name for r in results for name in r.created]  # type: ignore[union-attr]
    with pg.connect() as conn:
        existing = [p.name for p in list_partitions(conn, table)]
    assert sorted(created) == sorted(existing), "each partition created exactly once"
    assert len(existing) >= 6


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"interval": datetime.timedelta(seconds=30)}, "interval"),
        ({"interval": 3600}, "interval"),
        ({"ahead": -DAY}, "ahead"),
        ({"policy": DAY}, "policy"),
    ],
    ids=["interval under a minute", "interval a number", "ahead negative", "policy"],
)
@pytest.mark.parametrize("maintain", [ensure_partitions, maintain_partitions])
def test_a_schedule_it_cannot_use_is_refused_before_any_sql(
    maintain: Any, arguments: dict[str, Any], named: str
) -> None:
    unreachable = sa.create_engine("postgresql+psycopg://u@127.0.0.1:1/none")
    table = partitioned_processed_messages_table(sa.MetaData(), table_name=TABLE)
    with pytest.raises(InvalidArgument, match=f"^{named} must be"):
        maintain(unreachable, table, **{"policy": POLICY, **arguments})


@pytest.mark.backend
def test_maintenance_of_a_table_that_is_not_partitioned_says_so(pg: sa.Engine) -> None:
    metadata = sa.MetaData()
    plain = processed_messages_table(metadata, table_name=TABLE)
    metadata.drop_all(pg)
    metadata.create_all(pg)
    with pg.connect() as conn:
        assert partition_key_definition(conn, plain) is None
    with pytest.raises(UnsafePartitionKey, match=f"table {TABLE} is not partitioned"):
        maintain_partitions(pg, plain, policy=POLICY)
    with pg.connect() as conn:
        assert list_partitions(conn, plain) == []


@pytest.mark.backend
def test_the_partition_key_definition_of_a_partitioned_table(
    table: sa.Table, pg: sa.Engine
) -> None:
    with pg.connect() as conn:
        assert partition_key_definition(conn, table) == "RANGE (event_time)"
