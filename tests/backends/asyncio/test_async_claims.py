"""Input checks and MySQL's key and warning rules through the async drivers.

Bad ids are refused before anything is sent (the sync suite's ``BAD_IDS``, on every async
driver). Through aiomysql: a column shorter than the Inbox believes raises
:class:`~sa_inbox.exc.ClaimWarning` (the warning count is read behind SQLAlchemy's adapted
cursor), a case-insensitive key collation is refused, and ids differing by case or accent
stay distinct.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from sa_inbox import Inbox
from sa_inbox.asyncio import AsyncInbox
from sa_inbox.exc import ClaimWarning, InvalidMessageId, UnsupportedBackend
from tests.backends.asyncio.test_async import run
from tests.backends.claim.test_claim import BAD_IDS
from tests.conftest import ASYNC_DRIVERS as DRIVERS
from tests.conftest import backend_url
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


def test_bad_ids_are_refused_with_nothing_sent(app: App, async_url: str) -> None:
    inbox = AsyncInbox(app.inbox)

    async def scenario(engine: AsyncEngine) -> None:
        async with engine.connect() as conn:
            for bad in BAD_IDS:
                calls: list[Any] = [
                    inbox.claim(conn, bad, CONSUMER),
                    inbox.claim(conn, "ok", bad),
                    inbox.claim_many(conn, ["ok-1", bad], CONSUMER),
                    inbox.claim_batch(conn, ["ok-1", bad], CONSUMER, key=lambda m: m),
                ]
                for call in calls:
                    with pytest.raises(InvalidMessageId):
                        await call
            with pytest.raises(InvalidMessageId):
                await inbox.claim_many(conn, "abc", CONSUMER)
            assert not conn.in_transaction(), "no SQL may be sent for invalid input"

    run(async_url, scenario)
    assert app.inbox_rows() == 0


def test_ids_differing_by_case_accent_or_length_stay_distinct(app: App, async_url: str) -> None:
    """The key columns compare bytes on every driver (MySQL's default collations would merge
    these); a 256-character id is refused, never truncated onto a 255-character one."""
    inbox = AsyncInbox(app.inbox)
    ids = ["Pay-1", "pay-1", "PAY-1", "café-1", "cafe-1", "cafe\u0301-1", "straße-1", "支払い-1"]
    stem = "x" * 255

    async def scenario(engine: AsyncEngine) -> None:
        async with engine.begin() as conn:
            assert [await inbox.claim(conn, i, CONSUMER) for i in ids] == [True] * len(ids)
            assert await inbox.claim_many(conn, ids, CONSUMER) == set()
            assert await inbox.claim(conn, stem, CONSUMER) is True
            with pytest.raises(InvalidMessageId, match="256 characters"):
                await inbox.claim(conn, stem + "a", CONSUMER)
        async with engine.connect() as conn:
            stored = set((await conn.execute(sa.select(app.inbox.table.c.message_id))).scalars())
        assert stored == {*ids, stem}

    run(async_url, scenario)
    assert app.inbox_rows() == len(ids) + 1


# -- MySQL / MariaDB through aiomysql ---------------------------------------------------------


@pytest.fixture
def aiomysql_url(tmp_path: object) -> str:
    url = sa.make_url(backend_url("mysql", tmp_path))
    return url.set(drivername=DRIVERS["aiomysql"][1]).render_as_string(hide_password=False)


@pytest.fixture
def mysql_engine(tmp_path: object) -> Iterator[sa.Engine]:
    """The same database through the sync driver, to make tables and read them back."""
    engine = sa.create_engine(backend_url("mysql", tmp_path))
    yield engine
    engine.dispose()


def test_truncation_warning_raises_and_distinct_ids_never_collide(
    aiomysql_url: str, mysql_engine: sa.Engine
) -> None:
    """As the sync test: IGNORE would truncate into a shorter column; ClaimWarning instead."""
    short = sa.MetaData()
    Inbox(short, table_name="inbox_short", message_id_length=10)  # the table as it really is
    short.drop_all(mysql_engine)
    short.create_all(mysql_engine)
    inbox = AsyncInbox(Inbox(sa.MetaData(), table_name="inbox_short"))  # believes 255

    async def scenario(engine: AsyncEngine) -> list[set[int]]:
        codes = []
        for message_id in ("0123456789-first", "0123456789-second"):
            with pytest.raises(ClaimWarning) as info:
                async with engine.begin() as conn:
                    await inbox.claim(conn, message_id, CONSUMER)
            codes.append({code for _, code, _ in info.value.warnings})
        return codes

    try:
        assert all(codes & {1265, 1406} for codes in run(aiomysql_url, scenario))
        with mysql_engine.connect() as conn:
            count = conn.execute(sa.text("SELECT COUNT(*) FROM inbox_short")).scalar_one()
        assert count == 0, "the caller's rollback leaves nothing behind"
    finally:
        short.drop_all(mysql_engine)


def test_case_insensitive_key_collation_is_refused(
    aiomysql_url: str, mysql_engine: sa.Engine
) -> None:
    """As the sync test: a hand-made table in the server's default collation would merge
    Pay-1 and pay-1; refused until its key columns are utf8mb4_bin."""
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

    async def claim_both(engine: AsyncEngine, inbox: AsyncInbox) -> list[bool]:
        async with engine.begin() as conn:
            return [await inbox.claim(conn, i, CONSUMER) for i in ("Pay-1", "pay-1")]

    async def refused(engine: AsyncEngine) -> None:
        with pytest.raises(UnsupportedBackend, match="utf8mb4_bin"):
            await claim_both(engine, AsyncInbox(Inbox.for_table(table)))

    try:
        run(aiomysql_url, refused)
        with mysql_engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() == 0
        with mysql_engine.begin() as conn:
            conn.exec_driver_sql(
                "ALTER TABLE inbox_ci MODIFY message_id VARCHAR(255) CHARACTER SET utf8mb4 "
                "COLLATE utf8mb4_bin NOT NULL, MODIFY consumer_name VARCHAR(255) "
                "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
            )
        inbox = AsyncInbox(Inbox.for_table(table))  # a fresh inbox: checks the table anew
        assert run(aiomysql_url, lambda engine: claim_both(engine, inbox)) == [True, True]
    finally:
        metadata.drop_all(mysql_engine)
