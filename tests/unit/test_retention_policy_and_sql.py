"""The retention policy's rules and the exact purge SQL per dialect (no database)."""

from __future__ import annotations

import datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, oracle, postgresql, sqlite
from sqlalchemy.exc import CompileError

from sa_inbox import Inbox, InboxError
from sa_inbox.dialects import (
    MySQLPurge,
    OraclePurge,
    PostgreSQLPurge,
    PurgeDialect,
    SQLitePurge,
    purge_dialect_for,
)
from sa_inbox.dialects.mysql import DeleteOrderedLimit, purge_lock_name
from sa_inbox.exc import InvalidArgument, RetentionWindowTooShort
from sa_inbox.retention import PurgeTarget, RetentionPolicy, resolve_window

DAY = datetime.timedelta(days=1)
HOUR = datetime.timedelta(hours=1)
T = "inbox_processed_messages"


def test_window_is_redelivery_plus_replay_plus_margin() -> None:
    policy = RetentionPolicy(max_redelivery=2 * DAY, max_replay=7 * DAY, margin=HOUR)
    assert policy.window == 9 * DAY + HOUR
    no_replay = RetentionPolicy(max_redelivery=DAY, max_replay=datetime.timedelta(0))
    assert no_replay.window == DAY + HOUR  # default margin: 1 h
    assert policy.check(policy.window) == policy.window
    assert policy.check(30 * DAY) == 30 * DAY
    assert resolve_window(policy, None) == policy.window
    assert resolve_window(10 * DAY, policy) == 10 * DAY


@pytest.mark.parametrize(
    "older_than",
    [
        datetime.timedelta(0),
        9 * DAY,  # inside max_redelivery + max_replay + margin
        9 * DAY + HOUR - datetime.timedelta(microseconds=1),
    ],
)
def test_a_window_inside_the_policy_is_refused(older_than: datetime.timedelta) -> None:
    policy = RetentionPolicy(max_redelivery=2 * DAY, max_replay=7 * DAY, margin=HOUR)
    with pytest.raises(RetentionWindowTooShort) as info:
        resolve_window(older_than, policy)
    assert isinstance(info.value, InboxError) and isinstance(info.value, ValueError)
    assert info.value.older_than == older_than and info.value.minimum == 9 * DAY + HOUR


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"max_redelivery": datetime.timedelta(0), "max_replay": DAY},
            "max_redelivery must be positive",
        ),
        (
            {"max_redelivery": 3600, "max_replay": DAY},
            "max_redelivery must be a datetime.timedelta",
        ),
        ({"max_redelivery": DAY, "max_replay": -DAY}, "max_replay must not be negative"),
        (
            {"max_redelivery": DAY, "max_replay": DAY, "margin": "1h"},
            "margin must be a datetime.timedelta",
        ),
    ],
)
def test_malformed_policies_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        RetentionPolicy(**kwargs)  # type: ignore[arg-type]


def test_the_replay_limit_has_no_default_and_is_keyword_only() -> None:
    # A forgotten replay limit would purge rows a replay still needs: it must be stated.
    with pytest.raises(TypeError, match="max_replay"):
        RetentionPolicy(max_redelivery=DAY)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        RetentionPolicy(DAY, 7 * DAY)  # type: ignore[call-arg]
    assert RetentionPolicy(DAY, max_replay=7 * DAY).window == 8 * DAY + HOUR


def test_a_bare_timedelta_needs_a_policy() -> None:
    with pytest.raises(InvalidArgument, match="needs policy="):
        resolve_window(30 * DAY, None)


def test_a_target_needs_its_time_column() -> None:
    table = sa.Table("t", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    with pytest.raises(InvalidArgument, match="no column 'received_at'"):
        PurgeTarget(table)


# -- the exact SQL --------------------------------------------------------------------


def _batch(name: str, dialect: sa.Dialect, **kw: bool) -> str:
    table = Inbox(sa.MetaData()).table
    target = PurgeTarget(table)
    expired = target.expired(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    statement = purge_dialect_for(name).delete_batch(table, expired, target.order_by, 5000, **kw)
    return " ".join(str(statement.compile(dialect=dialect)).split())


def test_registry_picks_each_backend() -> None:
    assert isinstance(purge_dialect_for("postgresql"), PostgreSQLPurge)
    assert isinstance(purge_dialect_for("mysql"), MySQLPurge)
    assert isinstance(purge_dialect_for("mariadb"), MySQLPurge)
    assert isinstance(purge_dialect_for("oracle"), OraclePurge)
    assert isinstance(purge_dialect_for("sqlite"), SQLitePurge)
    assert type(purge_dialect_for("mssql")) is PurgeDialect


def test_postgresql_ctid_batch_with_skip_locked() -> None:
    assert _batch("postgresql", postgresql.dialect()) == (
        f"DELETE FROM {T} WHERE ctid = ANY (array((SELECT ctid FROM {T} "
        f"WHERE {T}.received_at < %(cutoff)s::TIMESTAMP WITH TIME ZONE "
        f"ORDER BY {T}.received_at LIMIT %(param_1)s::INTEGER FOR UPDATE SKIP LOCKED)))"
    )


def test_postgresql_partitioned_table_batches_by_primary_key() -> None:
    assert _batch("postgresql", postgresql.dialect(), partitioned=True) == (
        f"DELETE FROM {T} WHERE ({T}.message_id, {T}.consumer_name) IN "
        f"(SELECT {T}.message_id, {T}.consumer_name FROM {T} "
        f"WHERE {T}.received_at < %(cutoff)s::TIMESTAMP WITH TIME ZONE "
        f"ORDER BY {T}.received_at LIMIT %(param_1)s::INTEGER FOR UPDATE SKIP LOCKED)"
    )


@pytest.mark.parametrize("mariadb", [False, True])
def test_mysql_single_table_delete_order_by_limit(mariadb: bool) -> None:
    assert _batch("mysql", mysql.dialect(is_mariadb=mariadb)) == (
        f"DELETE FROM {T} WHERE {T}.received_at < %s ORDER BY {T}.received_at LIMIT 5000"
    )


def test_oracle_rownum_batch() -> None:
    assert _batch("oracle", oracle.dialect()) == (
        f"DELETE FROM {T} WHERE {T}.received_at < :cutoff AND ROWNUM <= :batch_size"
    )


def test_sqlite_primary_key_subquery() -> None:
    assert _batch("sqlite", sqlite.dialect()) == (
        f"DELETE FROM {T} WHERE ({T}.message_id, {T}.consumer_name) IN "
        f"(SELECT {T}.message_id, {T}.consumer_name FROM {T} WHERE {T}.received_at < ? "
        f"ORDER BY {T}.received_at LIMIT ? OFFSET ?)"
    )


def test_store_condition_is_inside_the_limited_statement() -> None:
    table = Inbox(sa.MetaData()).table
    target = PurgeTarget(table, condition=table.c.consumer_name == "billing")
    expired = target.expired(datetime.datetime(2026, 1, 1))
    statement = MySQLPurge().delete_batch(table, expired, target.order_by, 10)
    assert " ".join(str(statement.compile(dialect=mysql.dialect())).split()) == (
        f"DELETE FROM {T} WHERE {T}.received_at < %s AND {T}.consumer_name = %s "
        f"ORDER BY {T}.received_at LIMIT 10"
    )


def test_delete_ordered_limit_elsewhere_and_bad_limits() -> None:
    table = Inbox(sa.MetaData()).table
    statement = DeleteOrderedLimit(table, table.c.received_at.is_(None), table.c.received_at, 1)
    with pytest.raises(CompileError, match="MySQL only"):
        statement.compile(dialect=postgresql.dialect())
    for limit in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="positive int"):
            DeleteOrderedLimit(table, table.c.received_at.is_(None), table.c.received_at, limit)  # type: ignore[arg-type]


def test_mysql_lock_name_fits_64_characters() -> None:
    short = Inbox(sa.MetaData()).table
    assert purge_lock_name(short) == f"sa_inbox.purge.{T}"
    long = Inbox(sa.MetaData(), table_name="x" * 60, schema="s" * 40).table
    assert len(purge_lock_name(long)) <= 64
    other = Inbox(sa.MetaData(), table_name="x" * 60, schema="t" * 40).table
    assert purge_lock_name(long) != purge_lock_name(other)
