"""``received_at`` keeps microseconds: two claims committed within one second have distinct,
ordered times (on MySQL/MariaDB the column is ``DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6)``;
a plain ``DATETIME`` would give both the same second)."""

from __future__ import annotations

import datetime

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox

pytestmark = pytest.mark.backend


def test_two_claims_within_one_second_have_distinct_ordered_times(engine: sa.Engine) -> None:
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite's CURRENT_TIMESTAMP has whole seconds (SQLite docs, Date And Time)")
    metadata = sa.MetaData()
    inbox = Inbox(metadata, table_name="received_at_inbox", consumers=False)
    metadata.drop_all(engine, checkfirst=True)
    metadata.create_all(engine)
    try:
        for message_id in ("m-1", "m-2", "m-3"):  # one transaction each
            with engine.begin() as conn:
                assert inbox.claim(conn, message_id, "billing")
        with engine.connect() as conn:
            times = list(
                conn.scalars(
                    sa.select(inbox.table.c.received_at).order_by(inbox.table.c.message_id)
                )
            )
        assert times == sorted(times) and len(set(times)) == 3
        assert times[-1] - times[0] < datetime.timedelta(seconds=1)
        if engine.dialect.name in ("mysql", "mariadb"):
            (column,) = [
                c
                for c in sa.inspect(engine).get_columns("received_at_inbox")
                if c["name"] == "received_at"
            ]
            assert column["type"].fsp == 6
    finally:
        metadata.drop_all(engine)
