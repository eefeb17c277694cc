"""The misuse matrix's cases for the sharded inbox (:mod:`sa_inbox.sharding`): one shard, the
case's own database, through the synchronous router and its asyncio face."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from sa_inbox.sharding import ShardedInbox
from sa_inbox.sharding.asyncio import AsyncShardedInbox

from .cases import acks, case
from .env import AMOUNT, CONSUMER, Env

#: The shard key of every delivery (one shard: every key routes to it).
KEY = "tenant-1"


def _router(env: Env) -> ShardedInbox:
    return ShardedInbox(env.app.inbox, {"a": env.app.engine})


def _async_router(env: Env) -> AsyncShardedInbox:
    return AsyncShardedInbox(env.app.inbox, {"a": env.aengine})


def _binds_bytes(env: Env) -> None:
    """Skip a case that claims on aiomysql: every sharded claim stores its shard key's
    digest in ``payload_hash`` (bytes), which aiomysql 0.3 cannot bind with PyMySQL 2.2
    (``pymysql.converters.escape_bytes_prefixed`` became a string: ``TypeError: 'str'
    object is not callable``; the outbox's body works around it, the inbox table's
    ``payload_hash`` does not yet)."""
    if env.aengine.dialect.driver == "aiomysql":
        pytest.skip("aiomysql cannot bind payload_hash's bytes with PyMySQL 2.2")


for _wrong in ("AsyncInbox", "AsyncEngine"):

    @case("ShardedInbox()", _wrong)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        inbox = env.wrong(wrong) if wrong == "AsyncInbox" else env.app.inbox
        engine = env.wrong(wrong) if wrong == "AsyncEngine" else env.app.engine
        router = ShardedInbox(inbox, {"a": engine})
        router.handle(KEY, mid, CONSUMER, functools.partial(_pay, env, mid), **acks(env))


@case("ShardedInbox.claim", "AsyncSession")
async def _(env: Env, mid: str) -> None:
    router = _router(env)
    async with env.ASession.begin() as session:
        if router.claim(session, mid, CONSUMER, shard_key=KEY):  # type: ignore[arg-type]
            await env.app.apply_payment_async(session, mid, 1, AMOUNT)


@case("ShardInbox.claim", "AsyncSession")
async def _(env: Env, mid: str) -> None:
    shard = _router(env).shard_inbox("a")
    async with env.ASession.begin() as session:
        if shard.claim(session, mid, CONSUMER):  # type: ignore[arg-type]
            await env.app.apply_payment_async(session, mid, 1, AMOUNT)


@case("ShardedInbox.handle", "async def handler")
def _(env: Env, mid: str) -> None:
    async def pay(session: Session) -> None:
        env.app.apply_payment(session, mid, 1, AMOUNT)

    _router(env).handle(KEY, mid, CONSUMER, pay, **acks(env))


@case("AsyncShardedInbox()", "Engine")
async def _(env: Env, mid: str) -> None:
    router = AsyncShardedInbox(env.app.inbox, {"a": env.wrong("Engine")})
    await router.handle(KEY, mid, CONSUMER, functools.partial(_apay, env, mid), **acks(env))


@case("AsyncShardedInbox()", "AsyncInbox", expect="once")
async def _(env: Env, mid: str) -> None:
    _binds_bytes(env)
    router = AsyncShardedInbox(env.wrong("AsyncInbox"), {"a": env.aengine})  # unwrapped
    await router.handle(KEY, mid, CONSUMER, functools.partial(_apay, env, mid), **acks(env))


@case("AsyncShardedInbox.claim", "Session")
def _(env: Env, mid: str) -> None:
    # the mistake: the asyncio router in synchronous code; ``if coroutine:`` is true
    router = _async_router(env)
    with env.app.Session.begin() as session:
        if router.claim(session, mid, CONSUMER, shard_key=KEY):  # type: ignore[arg-type]
            env.app.apply_payment(session, mid, 1, AMOUNT)


@case("AsyncShardedInbox.is_processed", "synchronous code")
def _(env: Env, mid: str) -> None:
    router = _async_router(env)
    if router.is_processed(mid, CONSUMER, shard_key=KEY):
        return  # the mistake: always taken, every message skipped as processed
    with env.app.Session.begin() as session:
        if env.app.inbox.claim(session, mid, CONSUMER):
            env.app.apply_payment(session, mid, 1, AMOUNT)


@case("AsyncShardedInbox.handle", "plain def handler", expect="once")
async def _(env: Env, mid: str) -> None:
    def pay(session: AsyncSession) -> Any:  # returns the coroutine: awaited by the runner
        return env.app.apply_payment_async(session, mid, 1, AMOUNT)

    _binds_bytes(env)
    await _async_router(env).handle(KEY, mid, CONSUMER, pay, **acks(env))


def _pay(env: Env, mid: str, session: Session) -> None:
    env.app.apply_payment(session, mid, 1, AMOUNT)


async def _apay(env: Env, mid: str, session: AsyncSession) -> None:
    await env.app.apply_payment_async(session, mid, 1, AMOUNT)
