"""The exact SQL of the inbox store's claim and receive per dialect, with no database.

Oracle has no server here: these are its proof (plus the live suite when
``SA_INBOX_TEST_ORACLE_URL`` is set).
"""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, oracle, postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from sa_inbox.dialects import backend_for, claim_dialect_for
from sa_inbox.dialects.mysql import MySQLStoreClaim
from sa_inbox.dialects.postgresql import PostgreSQLStoreClaim
from sa_inbox.exc import InvalidArgument, UnsupportedBackend
from sa_inbox.store import PROCESSING, InboxStore

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
PENDING_WHERE = (
    "WHERE inbox_store.consumer_name = {p} AND inbox_store.status = {p} "
    "AND inbox_store.available_at <= {p} ORDER BY inbox_store.received_at, inbox_store.id"
)


def sql(statement: Any, dialect: sa.Dialect) -> str:
    """The compiled statement with its line breaks folded (tokens unchanged)."""
    return " ".join(str(statement.compile(dialect=dialect)).split())


@pytest.fixture
def store() -> InboxStore:
    return InboxStore(sa.MetaData())


def queries(store: InboxStore, ordered: bool = False) -> Any:
    return store.candidates(visibility_timeout=30, max_attempts=5, now=NOW, ordered=ordered)


def test_postgresql_claims_in_one_update_returning(store: InboxStore) -> None:
    t = store.table
    _, pending = queries(store)
    values = {
        "status": PROCESSING,
        "claimed_at": NOW,
        "claimed_by": "w#1",
        "attempts": t.c.attempts + 1,
    }
    statement = PostgreSQLStoreClaim().claim_statement(t, pending, 10, values)
    assert sql(statement, postgresql.dialect()) == (
        "UPDATE inbox_store SET status=%(status)s::VARCHAR, "
        "claimed_at=%(claimed_at)s::TIMESTAMP WITH TIME ZONE, claimed_by=%(claimed_by)s::VARCHAR, "
        "attempts=(inbox_store.attempts + %(attempts_1)s::INTEGER) "
        "WHERE inbox_store.id IN (SELECT candidate.id FROM inbox_store AS candidate "
        "WHERE candidate.consumer_name = %(consumer_name_1)s::VARCHAR "
        "AND candidate.status = %(status_1)s::VARCHAR "
        "AND candidate.available_at <= %(available_at_1)s::TIMESTAMP WITH TIME ZONE "
        "ORDER BY candidate.received_at, candidate.id "
        "LIMIT %(param_1)s::INTEGER FOR UPDATE SKIP LOCKED) "
        "RETURNING inbox_store.id, inbox_store.consumer_name, inbox_store.message_id, "
        "inbox_store.aggregate_id, inbox_store.message_type, inbox_store.payload, "
        "inbox_store.status, inbox_store.received_at, inbox_store.available_at, "
        "inbox_store.claimed_at, inbox_store.claimed_by, inbox_store.attempts, "
        "inbox_store.last_error, inbox_store.processed_at"
    )


@pytest.mark.parametrize("dialect", [mysql.dialect(), mysql.dialect(is_mariadb=True)])
def test_mysql_and_mariadb_lock_with_limit_and_skip_locked(
    store: InboxStore, dialect: sa.Dialect
) -> None:
    _, pending = queries(store)
    lock = backend_for(dialect.name).store_claim.lock(pending(store.table), 10)
    assert sql(lock, dialect) == (
        "SELECT inbox_store.id FROM inbox_store "
        + PENDING_WHERE.format(p="%s")
        + " LIMIT %s FOR UPDATE SKIP LOCKED"
    )


def test_oracle_locks_without_fetch_first(store: InboxStore) -> None:
    abandoned, pending = queries(store)
    claim = backend_for("oracle").store_claim
    assert sql(claim.lock(pending(store.table), 10), oracle.dialect()) == (
        "SELECT inbox_store.id FROM inbox_store WHERE inbox_store.consumer_name = :consumer_name_1 "
        "AND inbox_store.status = :status_1 AND inbox_store.available_at <= :available_at_1 "
        "ORDER BY inbox_store.received_at, inbox_store.id FOR UPDATE SKIP LOCKED"
    )
    assert sql(claim.lock(abandoned(store.table), 10), oracle.dialect()) == (
        "SELECT inbox_store.id FROM inbox_store WHERE inbox_store.consumer_name = :consumer_name_1 "
        "AND inbox_store.status = :status_1 AND inbox_store.claimed_at < :claimed_at_1 "
        "AND inbox_store.attempts < :attempts_1 "
        "ORDER BY inbox_store.received_at, inbox_store.id FOR UPDATE SKIP LOCKED"
    )


def test_oracle_ordered_claim_checks_the_aggregate(store: InboxStore) -> None:
    _, pending = queries(store, ordered=True)
    lock = backend_for("oracle").store_claim.lock(pending(store.table), 10)
    assert sql(lock, oracle.dialect()) == (
        "SELECT inbox_store.id FROM inbox_store WHERE inbox_store.consumer_name = :consumer_name_1 "
        "AND inbox_store.status = :status_1 AND inbox_store.available_at <= :available_at_1 "
        "AND NOT (EXISTS (SELECT earlier.id FROM inbox_store earlier "
        "WHERE earlier.consumer_name = inbox_store.consumer_name "
        "AND earlier.aggregate_id = inbox_store.aggregate_id AND earlier.id != inbox_store.id "
        "AND (earlier.status = :status_2 OR earlier.status = :status_3 "
        "AND (earlier.received_at < inbox_store.received_at "
        "OR earlier.received_at = inbox_store.received_at AND earlier.id < inbox_store.id)))) "
        "ORDER BY inbox_store.received_at, inbox_store.id FOR UPDATE SKIP LOCKED"
    )


def test_sqlite_relies_on_begin_immediate(store: InboxStore) -> None:
    _, pending = queries(store)
    lock = backend_for("sqlite").store_claim.lock(pending(store.table), 10)
    assert sql(lock, sqlite.dialect()) == (
        "SELECT inbox_store.id FROM inbox_store "
        + PENDING_WHERE.format(p="?")
        + " LIMIT ? OFFSET ?"
    )


def test_oracle_receive_is_a_merge_on_the_unique_key(store: InboxStore) -> None:
    columns = [
        "message_id",
        "consumer_name",
        "aggregate_id",
        "message_type",
        "payload",
        "status",
        "received_at",
        "available_at",
        "attempts",
    ]
    statement = claim_dialect_for("oracle").insert_or_skip(store.table)
    source = ", ".join(f":{c} AS {c}" for c in columns)
    assert sql(statement, oracle.dialect()) == (
        f"MERGE INTO inbox_store t USING (SELECT {source} FROM dual) s "
        "ON (t.message_id = s.message_id AND t.consumer_name = s.consumer_name) "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(columns)}) "
        f"VALUES ({', '.join('s.' + c for c in columns)})"
    )


def test_ddl_names_and_types_on_oracle(store: InboxStore) -> None:
    ddl = sql(CreateTable(store.table), oracle.dialect())
    for fragment in (
        "id NUMBER(19) GENERATED BY DEFAULT AS IDENTITY",
        "payload CLOB NOT NULL",
        "received_at TIMESTAMP NOT NULL",
        "attempts INTEGER DEFAULT 0 NOT NULL",
        "CONSTRAINT uq_inbox_store_message UNIQUE (message_id, consumer_name)",
        "CONSTRAINT ck_inbox_store_status CHECK "
        "(status IN ('pending', 'processing', 'done', 'dead'))",
    ):
        assert fragment in ddl
    indexes = sorted(sql(CreateIndex(ix), oracle.dialect()) for ix in store.table.indexes)
    assert indexes == [
        "CREATE INDEX ix_inbox_store_aggregate ON inbox_store "
        "(consumer_name, aggregate_id, status)",
        "CREATE INDEX ix_inbox_store_claim ON inbox_store (consumer_name, status, received_at, id)",
        "CREATE INDEX ix_inbox_store_purge ON inbox_store (status, processed_at)",
    ]


def test_mysql_timestamps_keep_microseconds(store: InboxStore) -> None:
    ddl = sql(CreateTable(store.table), mysql.dialect())
    assert "received_at DATETIME(6) NOT NULL" in ddl
    assert "payload JSON NOT NULL" in ddl


def fake_connection(version: tuple[int, ...], mariadb: bool = False) -> Any:
    return SimpleNamespace(dialect=SimpleNamespace(server_version_info=version, is_mariadb=mariadb))


@pytest.mark.parametrize(
    ("claim", "version", "mariadb", "ok"),
    [
        (PostgreSQLStoreClaim(), (9, 4, 26), False, False),
        (PostgreSQLStoreClaim(), (9, 5, 0), False, True),
        (MySQLStoreClaim(), (8, 0, 0), False, False),
        (MySQLStoreClaim(), (8, 0, 1), False, True),
        (MySQLStoreClaim(), (10, 5, 22), True, False),
        (MySQLStoreClaim(), (10, 6, 0), True, True),
        (MySQLStoreClaim(), (10, 11, 6), True, True),
    ],
)
def test_skip_locked_version_gate(
    claim: Any, version: tuple[int, ...], mariadb: bool, ok: bool
) -> None:
    connection = fake_connection(version, mariadb)
    if ok:
        claim.check_backend(connection)
    else:
        with pytest.raises(UnsupportedBackend, match="SKIP LOCKED"):
            claim.check_backend(connection)


def test_unknown_backend_has_no_store_claim() -> None:
    with pytest.raises(UnsupportedBackend, match="mssql"):
        _ = backend_for("mssql").store_claim


def test_bad_claim_arguments_are_refused_before_sql(store: InboxStore) -> None:
    with pytest.raises(InvalidArgument):
        store.candidates(visibility_timeout=0, max_attempts=5)
    with pytest.raises(InvalidArgument):
        store.candidates(visibility_timeout=5, max_attempts=0)
    with pytest.raises(InvalidArgument):
        store.candidates(visibility_timeout=5, max_attempts=5, now=datetime.datetime(2026, 1, 1))


@pytest.mark.parametrize(
    ("dialect", "ids"),
    [
        (postgresql.dialect(), "inbox_store.id = ANY (%(ids)s::BIGINT[])"),
        (mysql.dialect(), "inbox_store.id IN (__[POSTCOMPILE_ids])"),
        (sqlite.dialect(), "inbox_store.id IN (__[POSTCOMPILE_ids])"),
    ],
)
def test_the_batch_marks_done_with_one_statement_built_once(
    store: InboxStore, dialect: sa.Dialect, ids: str
) -> None:
    """The batch's done-marking UPDATE is built once per backend; on PostgreSQL the batch's
    ids are one array parameter, so its text does not depend on the batch's size."""
    backend = backend_for(dialect.name).store_claim
    statement = store._done_statement(backend)
    assert store._done_statement(backend) is statement
    text = sql(statement, dialect)
    assert ids in text
    assert "claimed_by" in text and "status" in text


@pytest.mark.parametrize("name", ["postgresql", "mysql", "sqlite", "oracle"])
@pytest.mark.parametrize("ordered", [False, True])
def test_the_lease_plans_are_built_once_and_compile(
    store: InboxStore, name: str, ordered: bool
) -> None:
    """The store's claim statements are built once per backend and kind of claim, their
    values bound at each claim; without RETURNING the locking SELECT reads the message's
    columns and nothing is read back; Oracle's has no row limit (ORA-02014)."""
    dialect = {
        "postgresql": postgresql.dialect(),
        "mysql": mysql.dialect(),
        "sqlite": sqlite.dialect(),
        "oracle": oracle.dialect(),
    }[name]
    backend = backend_for(name).store_claim
    plans = store._lease_plans(backend, False, ordered)
    assert store._lease_plans(backend, False, ordered) is plans
    assert store._lease_plans(backend, True, ordered) is not plans
    for plan in (plans.abandoned, plans.pending):
        if name == "postgresql":
            assert plan.single is not None and plan.lock is None
            text = sql(plan.single, dialect)
            assert "LIMIT %(claim_limit)s::INTEGER FOR UPDATE SKIP LOCKED" in text
            assert text.endswith(
                "RETURNING inbox_store.id, inbox_store.message_id, inbox_store.consumer_name, "
                "inbox_store.payload, inbox_store.aggregate_id, inbox_store.message_type, "
                "inbox_store.attempts, inbox_store.received_at, inbox_store.claimed_by"
            )
            continue
        assert plan.single is None and plan.read_back is None
        assert plan.lock is not None and plan.update is not None
        lock = sql(plan.lock, dialect)
        columns = "inbox_store.id, inbox_store.message_id"
        assert lock.startswith((f"SELECT {columns}", f"SELECT STRAIGHT_JOIN {columns}"))
        assert ("SKIP LOCKED" in lock) is (name != "sqlite")
        assert "claimed_by" in sql(plan.update, dialect)
        # MySQL/MariaDB lock the rows of a plain read's window by primary key, and scan
        # with a locking read only past rows others hold; an ordered claim scans
        assert (
            (plan.window is not None)
            is (plan.scan is not None)
            is (name == "mysql" and not ordered)
        )
        if plan.window is None:
            assert ("LIMIT" in lock) is (name != "oracle")
            continue
        assert plan.scan is not None
        window, scan = sql(plan.window, dialect), sql(plan.scan, dialect)
        listed = "FROM (SELECT candidate.id AS id FROM inbox_store AS candidate WHERE "
        assert window.startswith(f"SELECT count(*) AS count_1 {listed}")
        assert "FOR UPDATE" not in window and window.endswith("LIMIT %s) AS claim_window")
        assert lock.startswith(f"SELECT STRAIGHT_JOIN {columns}")
        assert listed in lock and "candidate.received_at, candidate.id LIMIT %s)" in lock
        assert "candidate.status = %s" in lock and "inbox_store.status = %s" in lock
        assert (
            ") AS claim_window INNER JOIN inbox_store FORCE INDEX (PRIMARY) "
            "ON inbox_store.id = claim_window.id WHERE inbox_store."
        ) in lock
        assert lock.endswith("LIMIT %s FOR UPDATE SKIP LOCKED")
        assert "inbox_store.id NOT IN (__[POSTCOMPILE_held])" in scan
        assert scan.endswith("LIMIT %s FOR UPDATE SKIP LOCKED")
        assert "FORCE INDEX" not in scan
        # the window again, without the rows the lock took
        assert plan.rest is not None
        rest = sql(plan.rest, dialect)
        not_ours = " AND (inbox_store.id NOT IN (__[POSTCOMPILE_held]))"
        assert not_ours in rest and rest.replace(not_ours, "") == lock
        for text in (window, lock, scan, rest):  # each reads the candidate condition
            assert "inbox_store.status = %s" in text or "candidate.status = %s" in text
            assert ("NOT (EXISTS" in text) is ordered
