"""The misuse matrix's cases for the modules around the claim: readiness, the owners of
consumer names, the session extension's queries, retention (the purge's targets and time
partitions), statistics and the table factories.

Most of these entry points are called before or beside the delivery (at start, by a
scheduler, by a health check): each case calls the entry point with the wrong object, then
delivers the message as usual. A refusal raises before anything is committed, so the
delivery never runs.
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase

import sa_inbox
import sa_inbox.asyncio
from sa_inbox import readiness, runner, stats
from sa_inbox import session as extension
from sa_inbox.collision import collisions_table
from sa_inbox.consumers import consumers_table
from sa_inbox.retention import count_expired, partitions, purge_target, purge_target_of
from sa_inbox.store import inbox_store_table

from .cases import acks, case, claim_and_pay, policy
from .env import AMOUNT, CONSUMER, Env


def _pay(env: Env, mid: str) -> Any:
    return functools.partial(env.app.apply_payment, message_id=mid, account_id=1, amount=AMOUNT)


# -- readiness ----------------------------------------------------------------------------


@case("sa_inbox.readiness.check_ready", "async_sessionmaker")
def _(env: Env, mid: str) -> None:
    readiness.check_ready(env.wrong("async_sessionmaker"), [env.app.inbox.table], entry="start")
    claim_and_pay(env, mid)


@case("sa_inbox.readiness.check_ready_async", "sessionmaker")
async def _(env: Env, mid: str) -> None:
    await readiness.check_ready_async(env.wrong("sessionmaker"), [env.app.inbox.table], entry="s")
    await _claim_and_pay_async(env, mid)


@case("sa_inbox.readiness.check_owner", "async_sessionmaker")
def _(env: Env, mid: str) -> None:
    handler = _pay(env, mid)
    readiness.check_owner(env.wrong("async_sessionmaker"), env.app.inbox, CONSUMER, handler)
    sa_inbox.handle(env.app.Session, env.app.inbox, mid, CONSUMER, handler, **acks(env))


@case("sa_inbox.readiness.inbox_tables", "AsyncInbox", expect="once")
async def _(env: Env, mid: str) -> None:
    tables = readiness.inbox_tables(env.wrong("AsyncInbox"))  # unwrapped: unambiguous
    async with env.ASession() as session:
        await session.run_sync(readiness.probe_tables, tables)
    await _claim_and_pay_async(env, mid)


@case("sa_inbox.readiness.probe_tables", "AsyncSession")
async def _(env: Env, mid: str) -> None:
    async with env.ASession() as session:
        readiness.probe_tables(session, [env.app.inbox.table])  # type: ignore[arg-type]
    await _claim_and_pay_async(env, mid)


@case("sa_inbox.runner.new_session", "async_sessionmaker")
def _(env: Env, mid: str) -> None:
    with runner.new_session(env.wrong("async_sessionmaker")) as session, session.begin():
        if env.app.inbox.claim(session, mid, CONSUMER):
            env.app.apply_payment(session, mid, 1, AMOUNT)


# -- the owners of consumer names -----------------------------------------------------------

for _method in ("ensure", "owner"):

    @case(f"Consumers.{_method}", "AsyncEngine")
    def _(env: Env, mid: str, method: str = _method) -> None:
        handler = _pay(env, mid)
        consumers = env.app.inbox.consumers
        assert consumers is not None
        if method == "ensure":
            consumers.ensure(env.wrong("AsyncEngine"), CONSUMER, handler)
        else:
            consumers.owner(env.wrong("AsyncEngine"), CONSUMER)
        sa_inbox.handle(env.app.Session, env.app.inbox, mid, CONSUMER, handler, **acks(env))


# -- the session extension's queries -------------------------------------------------------


for _entry in ("sa_inbox.session.installed", "sa_inbox.session.pending_claims"):

    @case(_entry, "AsyncSession", expect="once")
    async def _(env: Env, mid: str, entry: str = _entry) -> None:
        sa_inbox.asyncio.install(env.ASession)
        try:
            async with env.ASession.begin() as session:
                sa_inbox.asyncio.register_claim(session, env.app.inbox, mid, CONSUMER)
                if entry.endswith("installed"):
                    assert extension.installed(session)  # type: ignore[arg-type]
                else:
                    assert extension.pending_claims(session) == [(mid, CONSUMER)]  # type: ignore[arg-type]
                await env.app.apply_payment_async(session, mid, 1, AMOUNT)
        except sa_inbox.DuplicateMessage:
            pass


@case("sa_inbox.session.uninstall", "async_sessionmaker")
async def _(env: Env, mid: str) -> None:
    sa_inbox.asyncio.install(env.ASession)
    extension.uninstall(env.ASession)  # type: ignore[arg-type]
    async with env.ASession.begin() as session:
        await session.execute(sa.select(1))  # the user believes the extension gone
        await _claim_and_pay_in(env, session, mid)


# -- retention ------------------------------------------------------------------------------


@case("sa_inbox.retention.count_expired", "AsyncEngine")
def _(env: Env, mid: str) -> None:
    target = purge_target_of(env.app.inbox)
    count_expired(env.wrong("AsyncEngine"), target, datetime.timedelta(days=1))
    claim_and_pay(env, mid)


@case("sa_inbox.retention.purge_target", "AsyncEngine")
def _(env: Env, mid: str) -> None:
    target = purge_target_of(env.app.inbox)
    purge_target(env.wrong("AsyncEngine"), target, policy().window)
    claim_and_pay(env, mid)


@case("sa_inbox.retention.purge_target_of", "AsyncInbox")
def _(env: Env, mid: str) -> None:
    target = purge_target_of(env.wrong("AsyncInbox"))
    purge_target(env.app.engine, target, policy().window)
    claim_and_pay(env, mid)


def _partitioned(env: Env) -> sa.Table:
    return partitions.partitioned_processed_messages_table(sa.MetaData())


_MAINTENANCE = {
    "sa_inbox.retention.partitions.ensure_partitions": partitions.ensure_partitions,
    "sa_inbox.retention.partitions.drop_expired_partitions": partitions.drop_expired_partitions,
    "sa_inbox.retention.partitions.maintain_partitions": partitions.maintain_partitions,
}

for _entry in _MAINTENANCE:

    @case(_entry, "AsyncEngine")
    def _(env: Env, mid: str, entry: str = _entry) -> None:
        _MAINTENANCE[entry](env.wrong("AsyncEngine"), _partitioned(env), policy=policy())
        claim_and_pay(env, mid)


_ON_CONNECTION = {
    "sa_inbox.retention.partitions.list_partitions": partitions.list_partitions,
    "sa_inbox.retention.partitions.partition_key_definition": partitions.partition_key_definition,
    "sa_inbox.retention.partitions.check_partition_key_on_server": (
        partitions.check_partition_key_on_server
    ),
    "sa_inbox.retention.partitions.create_partition": lambda conn, table: (
        partitions.create_partition(conn, table, datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC))
    ),
}

for _entry in _ON_CONNECTION:

    @case(_entry, "AsyncConnection")
    async def _(env: Env, mid: str, entry: str = _entry) -> None:
        async with env.aengine.connect() as conn:
            _ON_CONNECTION[entry](conn, _partitioned(env))
        await _claim_and_pay_async(env, mid)


@case("sa_inbox.retention.partitions.check_partition_key", "Inbox")
def _(env: Env, mid: str) -> None:
    partitions.check_partition_key(env.wrong("Inbox"))
    claim_and_pay(env, mid)


@case("PartitionedInbox()", "Inbox")
def _(env: Env, mid: str) -> None:
    inbox = partitions.PartitionedInbox(env.wrong("Inbox"))
    with env.app.Session.begin() as session:
        now = datetime.datetime.now(datetime.UTC)
        if inbox.claim(session, mid, CONSUMER, event_time=now):
            env.app.apply_payment(session, mid, 1, AMOUNT)


@case("PartitionedInbox.claim", "AsyncSession")
async def _(env: Env, mid: str) -> None:
    inbox = partitions.PartitionedInbox(_partitioned(env))
    async with env.ASession.begin() as session:
        now = datetime.datetime.now(datetime.UTC)
        if inbox.claim(session, mid, CONSUMER, event_time=now):  # type: ignore[arg-type]
            await env.app.apply_payment_async(session, mid, 1, AMOUNT)


# -- statistics --------------------------------------------------------------------------------


@case("sa_inbox.stats.collect", "AsyncEngine")
def _(env: Env, mid: str) -> None:
    stats.collect(env.wrong("AsyncEngine"))
    claim_and_pay(env, mid)


@case("Sampler()", "AsyncEngine")
def _(env: Env, mid: str) -> None:
    stats.Sampler(env.wrong("AsyncEngine")).sample()
    claim_and_pay(env, mid)


@case("InboxCollector()", "AsyncEngine")
def _(env: Env, mid: str) -> None:
    from tests.conftest import importorskip

    prometheus = importorskip("sa_inbox.hooks.prometheus", "prometheus")
    prometheus.InboxCollector(env.wrong("AsyncEngine")).sample()
    claim_and_pay(env, mid)


# -- the table factories: a declarative Base for its MetaData ---------------------------------


class _Base(DeclarativeBase):
    pass


_FACTORIES = {
    "sa_inbox.collision.collisions_table": collisions_table,
    "sa_inbox.consumers.consumers_table": consumers_table,
    "sa_inbox.store.inbox_store_table": inbox_store_table,
    "sa_inbox.retention.partitions.partitioned_processed_messages_table": (
        partitions.partitioned_processed_messages_table
    ),
}

for _entry in _FACTORIES:

    @case(_entry, "a declarative Base")
    def _(env: Env, mid: str, entry: str = _entry) -> None:
        _FACTORIES[entry](_Base)
        claim_and_pay(env, mid)


# -- helpers ----------------------------------------------------------------------------------


async def _claim_and_pay_async(env: Env, mid: str) -> None:
    async with env.ASession.begin() as session:
        await _claim_and_pay_in(env, session, mid)


async def _claim_and_pay_in(env: Env, session: AsyncSession, mid: str) -> None:
    if await sa_inbox.asyncio.AsyncInbox(env.app.inbox).claim(session, mid, CONSUMER):
        await env.app.apply_payment_async(session, mid, 1, AMOUNT)


__all__: list[str] = []
