"""Which statements a store claim sends, per backend: PostgreSQL's single ``UPDATE …
RETURNING`` (its ``StoreClaimDialect.claim_statement``), the three-statement form
(``SELECT`` ids, ``UPDATE``, ``SELECT`` rows) elsewhere."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox.dialects import backend_for
from sa_inbox.store import PROCESSING
from tests.support.store_app import StoreApp, make_engine

pytestmark = pytest.mark.backend


@pytest.fixture
def store_app(url: str) -> Iterator[StoreApp]:
    engine = make_engine(url)
    app = StoreApp(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


def test_claim_sends_the_backends_statements(store_app: StoreApp) -> None:
    engine, store = store_app.engine, store_app.store
    table = store.table
    now = datetime.datetime.now(datetime.UTC)
    with engine.begin() as conn:
        for n in range(3):
            store.receive(conn, f"m-{n}", {"n": n}, now=now + datetime.timedelta(seconds=n))
    later = now + datetime.timedelta(seconds=10)
    _, pending = store.candidates(visibility_timeout=30, max_attempts=5, now=later, ordered=False)
    dialect = backend_for(engine.dialect.name).store_claim
    values = {"status": PROCESSING, "claimed_by": "w", "attempts": table.c.attempts + 1}
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.split()[0].upper() in ("SELECT", "UPDATE"):
            sent.append(statement.split()[0].upper())

    with engine.begin() as conn:
        dialect.begin_write(conn)
        sa.event.listen(conn, "before_cursor_execute", record)
        rows = dialect.claim(conn, table, pending, 2, values)
    assert sorted(row["message_id"] for row in rows) == ["m-0", "m-1"]
    assert {row["status"] for row in rows} == {PROCESSING}
    if engine.dialect.name == "postgresql":
        assert sent == ["UPDATE"]
    else:
        assert sent == ["SELECT", "UPDATE", "SELECT"]
