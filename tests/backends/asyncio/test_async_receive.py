"""``AsyncInboxStore.receive`` / ``receive_many`` on every async driver: one statement per new
message and per duplicate (aiomysql included: no ``SHOW WARNINGS``), the payload stored
exactly, a poll's duplicates and bad input with nothing sent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from sa_inbox import InboxStore
from sa_inbox.asyncio import AsyncInboxStore
from sa_inbox.exc import InvalidArgument, InvalidMessageId
from sa_inbox.store import Incoming
from tests.backends.store.test_store_receive_payload import PAYLOADS
from tests.support.app import App

pytestmark = pytest.mark.backend

TABLE = "async_receive_store"


async def _scenario(engine: AsyncEngine, store: AsyncInboxStore) -> dict[str, Any]:
    sent: list[str] = []
    sa.event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    async with engine.begin() as conn:  # warm: the one-time checks
        assert await store.receive(conn, "warm", {}) is True
    out: dict[str, Any] = {}
    for label, expected in (("new", True), ("duplicate", False)):
        sent.clear()
        async with engine.begin() as conn:
            assert await store.receive(conn, "m-1", {"n": 1}) is expected
        out[label] = [s for s in sent if s.strip().upper() not in ("BEGIN", "COMMIT")]
    async with engine.begin() as conn:
        for i, payload in enumerate(PAYLOADS):
            assert await store.receive(conn, f"one-{i}", payload) is True
        poll = [Incoming(f"many-{i}", p) for i, p in enumerate(PAYLOADS)]
        poll += [Incoming("m-1", {"n": "again"}), Incoming("many-0", {"n": "copy"})]
        out["new_in_poll"] = await store.receive_many(conn, poll)
    sent.clear()
    async with engine.begin() as conn:
        for bad, error in (
            (Incoming("", {}), InvalidMessageId),
            (Incoming("nan", float("nan")), InvalidArgument),
        ):
            with pytest.raises(error):
                await store.receive_many(conn, [Incoming("ok", {}), bad])
            with pytest.raises(error):
                await store.receive(conn, bad.message_id, bad.payload)
    out["sent_for_bad_input"] = [s for s in sent if TABLE in s]
    return out


def test_async_receive_on_every_driver(app: App, async_url: str) -> None:
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name=TABLE)
    metadata.create_all(app.engine)
    try:

        async def main() -> dict[str, Any]:
            engine = create_async_engine(async_url)
            try:
                return await _scenario(engine, AsyncInboxStore(store))
            finally:
                await engine.dispose()

        out = asyncio.run(main())
        # One statement per receive, new or duplicate, on every driver (the transaction's
        # own BEGIN/COMMIT left out).
        assert len(out["new"]) == 1 and TABLE in out["new"][0]
        assert out["duplicate"] == out["new"]
        assert out["new_in_poll"] == {f"many-{i}" for i in range(len(PAYLOADS))}
        assert out["sent_for_bad_input"] == []
        t = store.table
        with app.engine.connect() as conn:
            stored = {str(m): p for m, p in conn.execute(sa.select(t.c.message_id, t.c.payload))}
        assert stored["m-1"] == {"n": 1}
        for i, payload in enumerate(PAYLOADS):
            assert stored[f"one-{i}"] == payload and stored[f"many-{i}"] == payload
        assert len(stored) == 2 + 2 * len(PAYLOADS)
    finally:
        metadata.drop_all(app.engine)
