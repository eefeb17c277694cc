"""MySQL/MariaDB: a duplicate is told by its warning count alone where that is provably safe.

A single-row ``INSERT IGNORE`` that inserted nothing and raised exactly one warning skipped
the row for exactly one reason. On a table whose only row-skipping reason is a duplicate key
(no foreign key, no partitions, no INSERT trigger; on MySQL no CHECK), that reason is 1062,
so the claim returns False without ``SHOW WARNINGS``. These tests prove, on the live server,
which inputs and tables take that path and that every other one still reads the warnings.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox, InboxStore
from sa_inbox.dialects import MySQLClaim
from sa_inbox.exc import ClaimWarning
from sa_inbox.schema import key_type
from tests.conftest import backend_url

pytestmark = pytest.mark.backend

CONSUMER = "billing"


@pytest.fixture
def engine(tmp_path: object) -> Iterator[sa.Engine]:
    engine = sa.create_engine(backend_url("mysql", tmp_path))
    yield engine
    engine.dispose()


class Sent:
    """The SQL an engine sends, in order."""

    def __init__(self, engine: sa.Engine) -> None:
        self.sql: list[str] = []
        sa.event.listen(engine, "before_cursor_execute", self._record)

    def _record(self, conn: object, cursor: object, statement: str, *args: object) -> None:
        self.sql.append(statement)


@pytest.fixture
def inbox(engine: sa.Engine) -> Iterator[Inbox]:
    metadata = sa.MetaData()
    inbox = Inbox(metadata, table_name="dup_claims")
    metadata.drop_all(engine)
    metadata.create_all(engine)
    yield inbox
    metadata.drop_all(engine)


def _rows(engine: sa.Engine, table: sa.Table) -> list[tuple[str, str]]:
    query = sa.select(table.c.message_id, table.c.consumer_name).order_by(table.c.message_id)
    with engine.connect() as conn:
        return [(str(m), str(c)) for m, c in conn.execute(query)]


# Validated inputs at the column's limits: 255 characters, 4-byte UTF-8 (utf8mb4), mixed
# case and accents (the key columns are utf8mb4_bin), trailing characters that a PAD SPACE
# collation would compare equal if they were spaces (validation refuses those).
EDGE_IDS = [
    "a" * 255,
    "\U0001f600" * 255,
    "Pay-1",
    "pay-1",
    "pay-\u00e9",
    "pay-e\u0301",
    "\u00df" * 200 + "x",
]


def test_duplicates_of_validated_inputs_cost_one_statement(engine: sa.Engine, inbox: Inbox) -> None:
    """New ids: no warning. Their duplicates: one warning, nothing inserted, and False without
    ``SHOW WARNINGS``; each distinct id stored once, as sent (no truncation, no folding)."""
    with engine.begin() as conn:
        assert all(inbox.claim(conn, message_id, CONSUMER) for message_id in EDGE_IDS)
    sent = Sent(engine)
    with engine.begin() as conn:
        assert not any(inbox.claim(conn, message_id, CONSUMER) for message_id in EDGE_IDS)
        assert inbox.claim(conn, "\U0001f600" * 254, CONSUMER) is True  # a prefix is new
    claims = [s for s in sent.sql if s.startswith("INSERT IGNORE")]
    assert len(claims) == len(sent.sql) == len(EDGE_IDS) + 1  # no SHOW WARNINGS at all
    expected = sorted([(m, CONSUMER) for m in EDGE_IDS] + [("\U0001f600" * 254, CONSUMER)])
    assert _rows(engine, inbox.table) == expected


def test_the_one_warning_of_a_duplicate_is_1062(engine: sa.Engine, inbox: Inbox) -> None:
    """The server fact the rule rests on, read with SHOW WARNINGS: the duplicate's single
    warning is 1062, and a new row at the column's limits raises none."""
    statement = sa.dialects.mysql.insert(inbox.table).prefix_with("IGNORE")
    claim = MySQLClaim()
    with engine.begin() as conn:
        for message_id in EDGE_IDS:
            row = {"message_id": message_id, "consumer_name": CONSUMER}
            new = conn.execute(statement, row)
            assert (new.rowcount, claim.warning_count(conn, new)) == (1, 0)
            again = conn.execute(statement, row)
            assert (again.rowcount, claim.warning_count(conn, again)) == (0, 1)
            warnings = conn.exec_driver_sql("SHOW WARNINGS").all()
            assert [int(w[1]) for w in warnings] == [1062]


def test_receive_duplicate_is_one_statement(engine: sa.Engine) -> None:
    """The store's receive (payload, timestamps, CHECK on status) takes the same path."""
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name="dup_store")
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            assert store.receive(conn, "\U0001f600" * 255, {"n": "\U0001f600"}) is True
        sent = Sent(engine)
        with engine.begin() as conn:
            assert store.receive(conn, "\U0001f600" * 255, {"n": 2}) is False
        assert len(sent.sql) == 1 and sent.sql[0].startswith("INSERT IGNORE")
        assert store.counts(engine)["pending"] == 1
    finally:
        metadata.drop_all(engine)


def _claims_table(metadata: sa.MetaData, name: str, *extra: sa.SchemaItem) -> sa.Table:
    return sa.Table(
        name,
        metadata,
        sa.Column("message_id", key_type(255), primary_key=True),
        sa.Column("consumer_name", key_type(255), primary_key=True),
        sa.Column("received_at", sa.DateTime(), server_default=sa.func.now(), nullable=False),
        *extra,
        mysql_engine="InnoDB",
    )


def test_a_foreign_key_skip_is_never_taken_for_a_duplicate(engine: sa.Engine) -> None:
    """With a foreign key, IGNORE skips a row failing it with one warning (1452), the count
    of a duplicate: the table check sees the key, so the warnings are read and it raises."""
    metadata = sa.MetaData()
    consumers = sa.Table(
        "dup_consumers", metadata, sa.Column("name", key_type(255), primary_key=True)
    )
    fk = sa.ForeignKeyConstraint(["consumer_name"], [consumers.c.name])
    inbox = Inbox.for_table(_claims_table(metadata, "dup_fk_claims", fk))
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            conn.execute(consumers.insert(), {"name": CONSUMER})
            assert inbox.claim(conn, "m-1", CONSUMER) is True
            sent = Sent(engine)
            assert inbox.claim(conn, "m-1", CONSUMER) is False  # a duplicate, read to be sure
            assert sent.sql[1:] == ["SHOW WARNINGS"]
            with pytest.raises(ClaimWarning) as info:
                inbox.claim(conn, "m-2", "no-such-consumer")
        assert [code for _, code, _ in info.value.warnings] == [1452]
        assert _rows(engine, inbox.table) == [("m-1", CONSUMER)]
    finally:
        metadata.drop_all(engine)


def test_a_partition_skip_is_never_taken_for_a_duplicate(engine: sa.Engine) -> None:
    """A row that no partition takes is skipped with one warning (1526) under IGNORE: the
    table check sees the partitions, so the warnings are read and it raises."""
    metadata = sa.MetaData()
    table = _claims_table(metadata, "dup_part_claims")
    metadata.drop_all(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE dup_part_claims (message_id VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,"
            " consumer_name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,"
            " received_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,"
            " PRIMARY KEY (message_id, consumer_name)) CHARACTER SET utf8mb4"
            " PARTITION BY LIST COLUMNS (consumer_name) (PARTITION p VALUES IN ('billing'))"
        )
    inbox = Inbox.for_table(table)
    try:
        with engine.begin() as conn:
            assert inbox.claim(conn, "m-1", CONSUMER) is True
            with pytest.raises(ClaimWarning) as info:
                inbox.claim(conn, "m-1", "shipping")
        assert [code for _, code, _ in info.value.warnings] == [1526]
        assert _rows(engine, table) == [("m-1", CONSUMER)]  # the skipped row is not there
    finally:
        metadata.drop_all(engine)


def test_an_insert_trigger_keeps_the_warnings_read(engine: sa.Engine, inbox: Inbox) -> None:
    metadata = sa.MetaData()
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TRIGGER dup_claims_audit BEFORE INSERT ON dup_claims FOR EACH ROW SET @n = 1"
        )
    trigger_inbox = Inbox(metadata, table_name="dup_claims")  # a fresh one-time check
    with engine.begin() as conn:
        assert trigger_inbox.claim(conn, "m-1", CONSUMER) is True
        sent = Sent(engine)
        assert trigger_inbox.claim(conn, "m-1", CONSUMER) is False
    assert sent.sql[1:] == ["SHOW WARNINGS"]
    assert _rows(engine, inbox.table) == [("m-1", CONSUMER)]


def test_an_unknown_warning_count_reads_the_warnings(engine: sa.Engine, inbox: Inbox) -> None:
    """A driver that does not report the count: every warning path reads SHOW WARNINGS."""

    class Blind(MySQLClaim):
        def warning_count(self, conn: sa.Connection, result: object) -> int | None:
            return None

    blind = Blind()
    statement = blind.insert_or_skip(inbox.table)
    row = {"message_id": "m-1", "consumer_name": CONSUMER}
    with engine.begin() as conn:
        assert blind.check_table(conn, inbox.table)
        sent = Sent(engine)
        assert blind.claim_one(conn, inbox.table, statement, row) is True
        assert blind.claim_one(conn, inbox.table, statement, row) is False
    assert [s for s in sent.sql if s == "SHOW WARNINGS"] == ["SHOW WARNINGS"] * 2


def test_a_batch_of_duplicates_costs_one_statement(engine: sa.Engine, inbox: Inbox) -> None:
    """MariaDB's ``INSERT IGNORE … RETURNING``: as many warnings as rows skipped are the
    duplicates' 1062s, not read; the new ids are exactly those returned."""
    with engine.begin() as conn:
        assert inbox.claim_many(conn, EDGE_IDS[:3], CONSUMER) == set(EDGE_IDS[:3])
    sent = Sent(engine)
    with engine.begin() as conn:
        assert inbox.claim_many(conn, EDGE_IDS, CONSUMER) == set(EDGE_IDS[3:])
        assert inbox.claim_many(conn, EDGE_IDS, CONSUMER) == set()
    assert len(sent.sql) == 2 and all("RETURNING" in s for s in sent.sql)
    assert _rows(engine, inbox.table) == sorted((m, CONSUMER) for m in EDGE_IDS)


def test_a_batch_with_another_warning_reads_them(engine: sa.Engine) -> None:
    """A batch into a column shorter than the Inbox believes: one row truncated (inserted,
    warning 1265/1406) and one duplicate (skipped, 1062) make two warnings for one skipped
    row, so the warnings are read and the batch raises."""
    short = sa.MetaData()
    Inbox(short, table_name="dup_short", message_id_length=10)  # the table as it really is
    short.drop_all(engine)
    short.create_all(engine)
    inbox = Inbox(sa.MetaData(), table_name="dup_short")  # believes 255 characters
    try:
        with engine.begin() as conn:
            assert inbox.claim_many(conn, ["m-1"], CONSUMER) == {"m-1"}
        sent = Sent(engine)
        with pytest.raises(ClaimWarning) as info, engine.begin() as conn:
            inbox.claim_many(conn, ["m-1", "0123456789-long"], CONSUMER)
        assert sent.sql[-1] == "SHOW WARNINGS"
        # ClaimWarning carries the warnings other than 1062: the truncation only.
        assert [code for _, code, _ in info.value.warnings] in ([1265], [1406])
        assert _rows(engine, inbox.table) == [("m-1", CONSUMER)]  # rolled back
    finally:
        short.drop_all(engine)


def test_a_batch_with_a_foreign_key_skip_raises(engine: sa.Engine) -> None:
    """On a table with a foreign key, a batch's skipped row may be a key failure (1452):
    the warnings are read even when they number the skipped rows."""
    metadata = sa.MetaData()
    consumers = sa.Table(
        "dup_consumers", metadata, sa.Column("name", key_type(255), primary_key=True)
    )
    fk = sa.ForeignKeyConstraint(["consumer_name"], [consumers.c.name])
    inbox = Inbox.for_table(_claims_table(metadata, "dup_fk_claims", fk))
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            conn.execute(consumers.insert(), {"name": CONSUMER})
            assert inbox.claim_many(conn, ["m-1"], CONSUMER) == {"m-1"}
            with pytest.raises(ClaimWarning) as info:
                inbox.claim_many(conn, ["m-2"], "no-such-consumer")
        assert [code for _, code, _ in info.value.warnings] == [1452]
        assert _rows(engine, inbox.table) == [("m-1", CONSUMER)]
    finally:
        metadata.drop_all(engine)
