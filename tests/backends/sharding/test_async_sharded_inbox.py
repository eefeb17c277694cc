"""The asyncio face of the sharded inbox on the same two PostgreSQL servers (psycopg 3's
async driver): routing, the changed-key refusal on the same shard and, through the claim's
greenlet, on the other shard."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from sa_inbox import Outcome, Result
from sa_inbox.exc import InvalidShardMap, ShardKeyChanged, SyncAsyncMismatch, WrongShard
from sa_inbox.sharding.asyncio import AsyncShardedInbox
from tests.support.app import CONSUMER, App

pytestmark = [pytest.mark.backend, pytest.mark.slow]

AMOUNT = Decimal("10.00")


@pytest.fixture
def apps(shard_engines: dict[str, sa.Engine]) -> Iterator[dict[str, App]]:
    apps = {name: App(engine) for name, engine in shard_engines.items()}
    for app in apps.values():
        app.reset()
    yield apps
    for app in apps.values():
        app.drop()


def test_async_routing_and_refusals(apps: dict[str, App], shard_urls: dict[str, str]) -> None:
    async def scenario() -> list[Result]:
        engines = {name: create_async_engine(url) for name, url in shard_urls.items()}
        try:
            router = AsyncShardedInbox(
                apps["a"].inbox,
                {"a": engines["a"], "b": async_sessionmaker(engines["b"])},
                check_other_shards=True,
            )
            keys = {
                s: [f"t-{i}" for i in range(200) if router.shard_for(f"t-{i}") == s] for s in "ab"
            }
            acked: list[str] = []

            async def deliver(key: str, message_id: str) -> Result:
                app = apps[router.shard_for(key)]

                async def pay(session: AsyncSession) -> None:
                    await app.apply_payment_async(session, message_id, 1, AMOUNT)

                async def ack() -> None:
                    acked.append(message_id)

                return await router.handle(
                    key, message_id, CONSUMER, pay, ack=ack, nack=lambda: None
                )

            results = [
                await deliver(keys["a"][0], "m-1"),  # processed on a
                await deliver(keys["a"][0], "m-1"),  # duplicate
                await deliver(keys["a"][1], "m-1"),  # another key of a: refused
                await deliver(keys["b"][0], "m-1"),  # a key of b: found on a, refused
                await deliver(keys["b"][0], "m-2"),  # processed on b
            ]
            assert await router.is_processed("m-2", CONSUMER, shard_key=keys["b"][0])
            async with router.session_factory(keys["b"][0])() as session, session.begin():
                with pytest.raises(WrongShard):
                    await router.claim(session, "m-3", CONSUMER, shard_key=keys["a"][0])
            assert acked == ["m-1", "m-1", "m-2"]
            return results
        finally:
            for engine in engines.values():
                await engine.dispose()

    results = asyncio.run(scenario())
    assert [r.outcome for r in results] == [
        Outcome.PROCESSED,
        Outcome.DUPLICATE,
        Outcome.FAILED,
        Outcome.FAILED,
        Outcome.PROCESSED,
    ]
    assert isinstance(results[2].error, ShardKeyChanged) and results[2].error.found_on == "a"
    assert isinstance(results[3].error, ShardKeyChanged) and results[3].error.found_on == "a"
    assert [(app.ledger_rows(), app.balance(1), app.inbox_rows()) for app in apps.values()] == [
        (1, AMOUNT, 1),
        (1, AMOUNT, 1),
    ]


def test_async_shard_map_errors(apps: dict[str, App]) -> None:
    with pytest.raises(SyncAsyncMismatch, match="use ShardedInbox"):
        AsyncShardedInbox(apps["a"].inbox, {"a": apps["a"].engine})
    with pytest.raises(InvalidShardMap, match="bound to an AsyncEngine"):
        AsyncShardedInbox(apps["a"].inbox, {"a": async_sessionmaker()})
    with pytest.raises(InvalidShardMap, match="mapping"):
        AsyncShardedInbox(apps["a"].inbox, [])  # type: ignore[arg-type]
