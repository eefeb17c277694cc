"""A batch claim on PostgreSQL binds each column as one array: one statement per chunk whose
text is the same whatever the batch's size (so the driver prepares it once), rows inserted in
id order, and the same claims as the ``VALUES`` form it replaces (a table whose columns need
a Python-side default keeps that form)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from sa_inbox import Inbox
from tests.conftest import backend_url

pytestmark = pytest.mark.backend


@pytest.fixture
def engine(tmp_path: object) -> Iterator[sa.Engine]:
    engine = sa.create_engine(backend_url("postgresql", tmp_path))
    yield engine
    engine.dispose()


def statements(engine: sa.Engine) -> list[str]:
    """Every statement sent through ``engine`` from now on."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(" ".join(statement.split()))

    event.listen(engine, "before_cursor_execute", record)
    return sent


def made(engine: sa.Engine, inbox: Inbox) -> Inbox:
    inbox.table.drop(engine, checkfirst=True)
    inbox.table.create(engine)
    return inbox


def test_a_batch_is_one_array_statement_of_one_text_whatever_its_size(engine: sa.Engine) -> None:
    inbox = made(engine, Inbox(sa.MetaData(), table_name="claim_arrays"))
    sent = statements(engine)
    quoted = ["it's", "a;b", "back\\slash", "ünï", "c"]
    with engine.begin() as conn:
        assert inbox.claim_many(conn, ["b", "a"], "billing") == {"a", "b"}
        assert inbox.claim_many(conn, ["a", *quoted], "billing") == set(quoted)
        assert inbox.claim_many(conn, ["b", "a"], "billing") == set()
    claims = [s for s in sent if s.startswith("INSERT")]
    assert len(claims) == 3 and len(set(claims)) == 1, claims
    assert "unnest(" in claims[0] and "WITH ORDINALITY" in claims[0]
    with engine.connect() as conn:
        rows = conn.execute(sa.select(inbox.table.c.message_id).order_by("message_id")).all()
    assert [r[0] for r in rows] == sorted(["a", "b", *quoted])
    inbox.table.drop(engine)


def test_rows_are_inserted_in_id_order(engine: sa.Engine) -> None:
    """The lock order of a batch: two batches with overlapping ids wait on each other
    instead of deadlocking."""
    metadata = sa.MetaData()
    inbox = made(engine, Inbox(metadata, table_name="claim_arrays_order"))
    order = sa.Table(
        "claim_arrays_seen",
        metadata,
        sa.Column("n", sa.Integer, sa.Identity()),
        sa.Column("id", sa.String),
    )
    order.drop(engine, checkfirst=True)
    order.create(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION claim_arrays_seen() RETURNS trigger AS $$ BEGIN "
            "INSERT INTO claim_arrays_seen (id) VALUES (NEW.message_id); RETURN NEW; END $$ "
            "LANGUAGE plpgsql"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER seen BEFORE INSERT ON claim_arrays_order "
            "FOR EACH ROW EXECUTE FUNCTION claim_arrays_seen()"
        )
    try:
        with engine.begin() as conn:
            inbox.claim_many(conn, ["m3", "m1", "m2", "m10"], "billing")
        with engine.connect() as conn:
            seen = conn.execute(sa.select(order.c.id).order_by(order.c.n)).scalars().all()
        assert seen == ["m1", "m10", "m2", "m3"]
    finally:
        inbox.table.drop(engine)
        order.drop(engine)
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP FUNCTION claim_arrays_seen()")


def test_a_table_with_a_python_default_keeps_the_values_form(engine: sa.Engine) -> None:
    metadata = sa.MetaData()
    inbox = Inbox(metadata, table_name="claim_arrays_default")
    inbox.table.append_column(sa.Column("source", sa.String(20), default=lambda: "python"))
    made(engine, inbox)
    sent = statements(engine)
    with engine.begin() as conn:
        assert inbox.claim_many(conn, ["x", "y"], "billing") == {"x", "y"}
        assert inbox.claim_many(conn, ["y", "z"], "billing") == {"z"}
    assert not any("unnest(" in s for s in sent)
    with engine.connect() as conn:
        sources = conn.execute(sa.select(inbox.table.c.source)).scalars().all()
    assert sources == ["python"] * 3
    inbox.table.drop(engine)
