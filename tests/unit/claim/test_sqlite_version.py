"""SQLite's library version is checked at the first claim."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox
from sa_inbox.exc import UnsupportedBackend


def test_old_sqlite_is_refused_before_any_insert(monkeypatch: pytest.MonkeyPatch) -> None:
    metadata = sa.MetaData()
    inbox = Inbox(metadata)
    engine = sa.create_engine("sqlite://")
    metadata.create_all(engine)
    monkeypatch.setattr(engine.dialect.dbapi, "sqlite_version_info", (3, 23, 1))
    with engine.begin() as conn:
        with pytest.raises(UnsupportedBackend, match=r"3\.23\.1.*3\.24\.0"):
            inbox.claim(conn, "m1", "c")
        assert conn.execute(sa.select(sa.func.count()).select_from(inbox.table)).scalar() == 0
    monkeypatch.undo()
    with engine.begin() as conn:
        assert inbox.claim(conn, "m1", "c") is True


def test_sqlite_without_returning_claims_batches_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metadata = sa.MetaData()
    inbox = Inbox(metadata)
    engine = sa.create_engine("sqlite://")
    metadata.create_all(engine)
    monkeypatch.setattr(engine.dialect.dbapi, "sqlite_version_info", (3, 34, 0))
    with engine.begin() as conn:
        assert inbox.claim(conn, "b", "c")
        assert inbox.claim_many(conn, ["a", "b", "c"], "c") == {"a", "c"}
