"""The portable SAVEPOINT path as an unknown backend gets it: no error-code classifier."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from sa_inbox.dialects import SavepointClaim
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


def test_duplicate_recognised_by_the_row_and_transaction_stays_usable(app: App) -> None:
    claim = SavepointClaim(None)
    statement = claim.insert_or_skip(app.inbox.table)
    with app.engine.begin() as conn:
        row = app.inbox.validate("m1", CONSUMER)
        assert claim.claim_one(conn, app.inbox.table, statement, row) is True
        assert claim.claim_one(conn, app.inbox.table, statement, row) is False
        assert claim.claim_one(conn, app.inbox.table, statement, app.inbox.validate("m2", CONSUMER))
    assert app.inbox_rows() == 2


def test_other_integrity_errors_are_not_duplicates(engine: sa.Engine) -> None:
    """A NOT NULL violation must raise, never be taken for a duplicate."""
    metadata = sa.MetaData()
    table = sa.Table(
        "inbox_strict",
        metadata,
        sa.Column("message_id", sa.String(50), primary_key=True),
        sa.Column("consumer_name", sa.String(50), primary_key=True),
        sa.Column("received_at", sa.DateTime, server_default=sa.text("CURRENT_TIMESTAMP")),
        sa.Column("message_type", sa.String(50), nullable=False),
    )
    metadata.drop_all(engine)
    metadata.create_all(engine)
    claim = SavepointClaim(None)
    try:
        with engine.begin() as conn:
            row = {"message_id": "m1", "consumer_name": CONSUMER, "message_type": None}
            with pytest.raises(sa.exc.DBAPIError):
                claim.claim_one(conn, table, claim.insert_or_skip(table), row)
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() == 0
    finally:
        metadata.drop_all(engine)
