"""MySQL/MariaDB specifics: INSERT IGNORE warnings, FOUND_ROWS, the no-RETURNING path."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox
from sa_inbox.dialects import MySQLClaim
from sa_inbox.exc import ClaimWarning, UnsupportedBackend
from tests.conftest import backend_url
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


@pytest.fixture
def mysql_engine(tmp_path: object) -> Iterator[sa.Engine]:
    engine = sa.create_engine(backend_url("mysql", tmp_path))
    yield engine
    engine.dispose()


@pytest.fixture
def mysql_app(mysql_engine: sa.Engine) -> Iterator[App]:
    app = App(mysql_engine)
    app.reset()
    yield app
    app.drop()


def test_engine_runs_with_found_rows(mysql_engine: sa.Engine) -> None:
    """The rowcount semantics below are proven under SQLAlchemy's CLIENT.FOUND_ROWS flag."""
    from pymysql.constants import CLIENT

    _, kwargs = mysql_engine.dialect.create_connect_args(mysql_engine.url)
    assert kwargs["client_flag"] & CLIENT.FOUND_ROWS


def test_insert_ignore_rowcount_under_found_rows(mysql_app: App) -> None:
    table = mysql_app.inbox.table
    with mysql_app.engine.begin() as conn:
        assert mysql_app.inbox.claim(conn, "m1", CONSUMER) is True
        assert mysql_app.inbox.claim(conn, "m1", CONSUMER) is False
        # Why not ON DUPLICATE KEY UPDATE: under FOUND_ROWS a duplicate reports 1, like a
        # new row, so rowcount cannot tell them apart.
        upsert = sa.dialects.mysql.insert(table).values(message_id="m1", consumer_name=CONSUMER)
        upsert = upsert.on_duplicate_key_update(message_id=upsert.inserted.message_id)
        assert conn.execute(upsert).rowcount == 1
    assert mysql_app.inbox_rows() == 1


def test_truncation_warning_raises_and_distinct_ids_never_collide(mysql_engine: sa.Engine) -> None:
    """A column shorter than the Inbox believes: IGNORE would truncate; we raise instead."""
    short = sa.MetaData()
    Inbox(short, table_name="inbox_short", message_id_length=10)  # the table as it really is
    short.drop_all(mysql_engine)
    short.create_all(mysql_engine)
    inbox = Inbox(sa.MetaData(), table_name="inbox_short")  # believes 255 characters
    try:
        for message_id in ("0123456789-first", "0123456789-second"):
            with pytest.raises(ClaimWarning) as info, mysql_engine.begin() as conn:
                inbox.claim(conn, message_id, CONSUMER)
            assert {code for _, code, _ in info.value.warnings} & {1265, 1406}
        with mysql_engine.connect() as conn:
            count = conn.execute(sa.text("SELECT COUNT(*) FROM inbox_short")).scalar_one()
        assert count == 0, "the caller's rollback leaves nothing behind"
    finally:
        short.drop_all(mysql_engine)


def test_no_warnings_read_without_warnings(mysql_app: App) -> None:
    statements: list[str] = []

    @sa.event.listens_for(mysql_app.engine, "before_cursor_execute")
    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    with mysql_app.engine.begin() as conn:
        mysql_app.inbox.claim(conn, "m1", CONSUMER)
        # Duplicates: as many warnings as skipped rows, on a table that skips rows only on
        # a duplicate key, are 1062s without reading them (tests/backends/claim/
        # test_mysql_duplicates.py), for one claim and for a batch.
        mysql_app.inbox.claim(conn, "m1", CONSUMER)
        mysql_app.inbox.claim_many(conn, ["m2", "m3"], CONSUMER)
        mysql_app.inbox.claim_many(conn, ["m3", "m4"], CONSUMER)
    claims = [s for s in statements if s.startswith("INSERT IGNORE")]
    assert len(claims) == 4
    assert len(statements) == 5 and "information_schema" in statements[0]  # one-time check


def test_batch_without_returning_one_statement_per_id(
    mysql_app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MySQL 8 path (no RETURNING), run on MariaDB with RETURNING turned off."""
    monkeypatch.setattr(MySQLClaim, "supports_returning", lambda self, conn: False)
    with mysql_app.engine.begin() as conn:
        assert mysql_app.inbox.claim(conn, "b", CONSUMER)
        assert mysql_app.inbox.claim_many(conn, ["c", "a", "b", "c"], CONSUMER) == {"a", "c"}
    assert mysql_app.inbox_rows() == 3


def test_mariadb_batch_uses_returning(mysql_engine: sa.Engine) -> None:
    with mysql_engine.connect() as conn:
        if not conn.dialect.is_mariadb:  # type: ignore[attr-defined]
            assert os.environ.get("CI") != "true", "CI runs MariaDB"
            pytest.skip("MySQL has no INSERT … RETURNING")
        assert MySQLClaim().supports_returning(conn)


def test_for_table_refuses_a_case_insensitive_key_collation(mysql_engine: sa.Engine) -> None:
    """A hand-made table in the server's default collation would merge Pay-1 and pay-1."""
    metadata = sa.MetaData()
    table = sa.Table(
        "inbox_ci",
        metadata,
        sa.Column("message_id", sa.String(255), primary_key=True),
        sa.Column("consumer_name", sa.String(255), primary_key=True),
        sa.Column("received_at", sa.DateTime, server_default=sa.text("CURRENT_TIMESTAMP")),
    )
    metadata.drop_all(mysql_engine)
    metadata.create_all(mysql_engine)
    try:
        inbox = Inbox.for_table(table)
        with mysql_engine.begin() as conn, pytest.raises(UnsupportedBackend, match="utf8mb4_bin"):
            inbox.claim(conn, "Pay-1", CONSUMER)
        with mysql_engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() == 0
        with mysql_engine.begin() as conn:
            conn.exec_driver_sql(
                "ALTER TABLE inbox_ci MODIFY message_id VARCHAR(255) CHARACTER SET utf8mb4 "
                "COLLATE utf8mb4_bin NOT NULL, MODIFY consumer_name VARCHAR(255) "
                "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
            )
        with mysql_engine.begin() as conn:
            assert inbox.claim(conn, "Pay-1", CONSUMER) is True
            assert inbox.claim(conn, "pay-1", CONSUMER) is True
    finally:
        metadata.drop_all(mysql_engine)
