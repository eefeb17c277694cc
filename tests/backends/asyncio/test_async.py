"""sa_inbox.asyncio on every async driver (aiosqlite, asyncpg, psycopg 3 async, aiomysql).

Each scenario is one ``asyncio.run()`` on a real server and asserts on the business state
read back through the sync driver.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import DuplicateMessage, InboxStore, Outcome, RetentionPolicy
from sa_inbox.asyncio import (
    AsyncInbox,
    AsyncInboxStore,
    AsyncWorker,
    handle,
    install,
    purge,
    register_claim,
)
from sa_inbox.exc import (
    HandlerEndedTransaction,
    InvalidBind,
    InvalidMessageId,
    InvalidSessionFactory,
    MissingTable,
)
from sa_inbox.store import Incoming, StoredMessage
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

T = TypeVar("T")


def run(url: str, scenario: Callable[[AsyncEngine], Awaitable[T]], **engine_kw: Any) -> T:
    """``scenario(engine)`` on a fresh AsyncEngine, disposed after."""

    async def main() -> T:
        engine = create_async_engine(url, **engine_kw)
        try:
            return await scenario(engine)
        finally:
            await engine.dispose()

    return asyncio.run(main())


async def pay(app: App, session: AsyncSession, message_id: str, amount: int = 3) -> None:
    """The business change, on the AsyncSession."""
    await session.execute(
        app.ledger.insert().values(message_id=message_id, account_id=1, amount=amount)
    )
    await session.execute(
        app.accounts.update()
        .where(app.accounts.c.id == 1)
        .values(balance=app.accounts.c.balance + amount)
    )


class Broker:
    def __init__(self) -> None:
        self.acks = 0
        self.nacks = 0

    async def ack(self) -> None:
        await asyncio.sleep(0)
        self.acks += 1

    def nack(self) -> None:  # a plain function is accepted too
        self.nacks += 1


# -- the claim ------------------------------------------------------------------------------


def test_claim_dedups_and_commits_with_the_change(app: App, async_url: str) -> None:
    inbox = AsyncInbox(app.inbox)

    async def scenario(engine: AsyncEngine) -> list[bool]:
        Session = async_sessionmaker(engine)
        seen = []
        for _ in range(2):
            async with Session.begin() as session:
                new = await inbox.claim(session, "m1", CONSUMER)
                seen.append(new)
                if new:
                    await pay(app, session, "m1")
        async with engine.connect() as conn, conn.begin():  # an AsyncConnection too
            seen.append(await inbox.claim(conn, "m1", CONSUMER))
            seen.append(await inbox.is_processed(conn, "m1", CONSUMER))
        return seen

    assert run(async_url, scenario) == [True, False, False, True]
    assert app.ledger_rows() == 1 and app.balance(1) == Decimal(3) and app.inbox_rows() == 1


def test_claim_batch_applies_each_id_once(app: App, async_url: str) -> None:
    inbox = AsyncInbox(app.inbox)
    poll = [Incoming("a", 1), Incoming("b", 2), Incoming("a", 1), Incoming("c", 3)]

    async def scenario(engine: AsyncEngine) -> tuple[list[str], set[str]]:
        Session = async_sessionmaker(engine)
        async with Session.begin() as session:
            await inbox.claim(session, "c", CONSUMER)
        async with Session.begin() as session:
            todo = await inbox.claim_batch(session, poll, CONSUMER)
            for message in todo:
                await pay(app, session, message.message_id)
        async with Session.begin() as session:
            again = await inbox.claim_many(session, ["a", "d", "d"], CONSUMER)
        return [m.message_id for m in todo], again

    todo, again = run(async_url, scenario)
    assert todo == ["a", "b"] and again == {"d"}
    assert app.ledger_rows() == 2 and app.ledger_rows("a") == 1 and app.inbox_rows() == 4


def test_bad_input_sends_nothing(app: App, async_url: str) -> None:
    inbox = AsyncInbox(app.inbox)

    async def scenario(engine: AsyncEngine) -> None:
        async with async_sessionmaker(engine).begin() as session:
            with pytest.raises(InvalidMessageId):
                await inbox.claim(session, " padded", CONSUMER)
            assert not session.sync_session.get_transaction().connections  # type: ignore[union-attr]
        with Session(app.engine) as sync_session, pytest.raises(InvalidBind):
            await inbox.claim(sync_session, "m1", CONSUMER)  # type: ignore[arg-type]
        async with async_sessionmaker(engine).begin() as session:
            # the other way round: the synchronous Inbox given the AsyncSession
            with pytest.raises(InvalidBind, match="use sa-inbox's asyncio API"):
                app.inbox.claim(session, "m1", CONSUMER)  # type: ignore[arg-type]
            assert not session.sync_session.get_transaction().connections  # type: ignore[union-attr]

    run(async_url, scenario)
    assert app.inbox_rows() == 0


def test_concurrent_duplicate_at_a_barrier(app: App, async_url: str) -> None:
    """Two tasks on two connections claim the same id at once: exactly one wins."""
    inbox = AsyncInbox(app.inbox)

    async def scenario(engine: AsyncEngine) -> list[bool]:
        barrier = asyncio.Barrier(2)

        async def one() -> bool:
            async with engine.connect() as conn, conn.begin():
                await conn.execute(sa.select(1))
                await barrier.wait()
                won = await inbox.claim(conn, "m1", CONSUMER)
                if won:
                    await pay(app, conn, "m1")  # type: ignore[arg-type]
                return won

        return list(await asyncio.gather(one(), one()))

    timeout = {"connect_args": {"timeout": 30}} if async_url.startswith("sqlite") else {}
    results = run(async_url, scenario, **timeout)
    assert sorted(results) == [False, True]
    assert app.ledger_rows() == 1 and app.inbox_rows() == 1


def test_many_tasks_make_their_first_claim_on_a_fresh_engine(app: App, async_url: str) -> None:
    """The first claim's per-engine checks hold no lock across SQL: 8 tasks at once finish
    (a lock held there blocked the event loop for good)."""
    inbox = AsyncInbox(app.inbox)

    async def scenario(engine: AsyncEngine) -> list[bool]:
        Session = async_sessionmaker(engine)

        async def one(i: int) -> bool:
            async with Session.begin() as session:
                return await inbox.claim(session, f"m{i}", CONSUMER)

        return list(await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(8))), 60))

    extra = {"connect_args": {"timeout": 30}} if async_url.startswith("sqlite") else {}
    assert run(async_url, scenario, **extra) == [True] * 8
    assert app.inbox_rows() == 8


# -- the runner -----------------------------------------------------------------------------


def test_handle_awaits_the_handler_then_acks(app: App, async_url: str) -> None:
    broker = Broker()

    async def scenario(engine: AsyncEngine) -> list[Outcome]:
        Session = async_sessionmaker(engine)
        outcomes = []
        for _ in range(2):
            result = await handle(
                Session,
                app.inbox,
                "m1",
                CONSUMER,
                functools.partial(pay, app, message_id="m1"),
                ack=broker.ack,
                nack=broker.nack,
            )
            outcomes.append(result.outcome)
        return outcomes

    assert run(async_url, scenario) == [Outcome.PROCESSED, Outcome.DUPLICATE]
    assert (broker.acks, broker.nacks) == (2, 0)
    assert app.ledger_rows() == 1 and app.balance(1) == Decimal(3)


def test_handle_refuses_a_commit_and_nacks(app: App, async_url: str) -> None:
    broker = Broker()

    async def commits(session: AsyncSession) -> None:
        await pay(app, session, "m1")
        await session.commit()

    async def scenario(engine: AsyncEngine) -> Any:
        return await handle(
            async_sessionmaker(engine),
            app.inbox,
            "m1",
            CONSUMER,
            commits,
            ack=broker.ack,
            nack=broker.nack,
        )

    result = run(async_url, scenario)
    assert result.outcome is Outcome.FAILED
    assert isinstance(result.error, HandlerEndedTransaction)
    assert (broker.acks, broker.nacks) == (0, 1)
    assert app.ledger_rows() == 0 and app.inbox_rows() == 0


@pytest.mark.parametrize("case", ["missing table", "sync sessionmaker", "begin as factory"])
def test_configuration_errors_are_raised_not_nacked(app: App, async_url: str, case: str) -> None:
    broker = Broker()
    if case == "missing table":
        app.inbox.table.drop(app.engine)

    async def scenario(engine: AsyncEngine) -> None:
        factory: Any = {
            "missing table": async_sessionmaker(engine),
            "sync sessionmaker": sessionmaker(app.engine),
            "begin as factory": async_sessionmaker(engine).begin,
        }[case]
        error = MissingTable if case == "missing table" else InvalidSessionFactory
        with pytest.raises(error):
            await handle(
                factory,
                app.inbox,
                "m1",
                CONSUMER,
                functools.partial(pay, app, message_id="m1"),
                ack=broker.ack,
                nack=broker.nack,
            )

    run(async_url, scenario)
    assert (broker.acks, broker.nacks) == (0, 0) and app.ledger_rows() == 0


# -- the session extension ------------------------------------------------------------------


def test_session_extension_on_an_async_sessionmaker(app: App, async_url: str) -> None:
    async def scenario(engine: AsyncEngine) -> None:
        Session = async_sessionmaker(engine)
        install(Session)
        install(Session)  # idempotent
        async with Session.begin() as session:
            register_claim(session, app.inbox, "m1", CONSUMER)
            await pay(app, session, "m1")
        with pytest.raises(DuplicateMessage):
            async with Session.begin() as session:
                register_claim(session, app.inbox, "m1", CONSUMER)
                await pay(app, session, "m1")
        other = async_sessionmaker(engine)  # not installed: refused, not silently skipped
        async with other.begin() as session:
            with pytest.raises(Exception, match="not installed"):
                register_claim(session, app.inbox, "m2", CONSUMER)

    run(async_url, scenario)
    assert app.ledger_rows() == 1 and app.inbox_rows() == 1


# -- the store and the AsyncWorker ------------------------------------------------------------


def test_async_worker_drains_the_store_exactly_once(app: App, async_url: str) -> None:
    store = InboxStore(app.metadata)
    store.table.create(app.engine)
    astore = AsyncInboxStore(store)
    seen: list[str] = []

    async def handler(session: AsyncSession, message: StoredMessage) -> None:
        seen.append(message.message_id)
        if message.message_id == "m3" and message.attempts == 1:
            raise RuntimeError("first attempt fails")
        await pay(app, session, message.message_id)
        await asyncio.sleep(0)

    async def scenario(engine: AsyncEngine) -> Any:
        Session = async_sessionmaker(engine)
        async with Session.begin() as session:
            new = await astore.receive_many(
                session,
                [Incoming(f"m{i}", {"i": i}) for i in range(20)] + [Incoming("m0", {})],
                consumer_name=CONSUMER,
            )
            assert len(new) == 20
        worker = AsyncWorker(
            astore.bind(engine),
            handler,
            consumer_name=CONSUMER,
            concurrency=4,
            batch_size=3,
            poll_interval=0.05,
            backoff=_backoff(),
        )
        summary = await worker.run(until_empty=True, max_seconds=60, handle_signals=False)
        return summary, await astore.counts(engine, CONSUMER)

    extra = {"connect_args": {"timeout": 30}} if async_url.startswith("sqlite") else {}
    summary, counts = run(async_url, scenario, **extra)
    assert summary.processed == 20 and summary.retried == 1 and summary.reason == "empty"
    assert counts["done"] == 20 and counts["pending"] == counts["processing"] == 0
    assert app.ledger_rows() == 20 and app.balance(1) == Decimal(60)
    assert sorted(seen) == sorted([f"m{i}" for i in range(20)] + ["m3"])
    store.table.drop(app.engine)


def test_async_worker_stops_on_a_missing_table(app: App, async_url: str) -> None:
    store = AsyncInboxStore(InboxStore(sa.MetaData(), table_name="async_never_created"))

    async def handler(session: AsyncSession, message: StoredMessage) -> None: ...

    async def scenario(engine: AsyncEngine) -> None:
        worker = AsyncWorker(store.bind(engine), handler, concurrency=2)
        with pytest.raises(MissingTable):
            await worker.run(until_empty=True, max_seconds=10, handle_signals=False)
        assert worker.summary.reason == "error"

    run(async_url, scenario)


def test_async_handler_refused_by_the_sync_worker_accepted_here(app: App) -> None:
    from sa_inbox import Worker
    from sa_inbox.exc import AsyncHandlerError

    async def handler(session: AsyncSession, message: StoredMessage) -> None: ...

    store = InboxStore(sa.MetaData())
    with pytest.raises(AsyncHandlerError):
        Worker(store.bind(app.engine), handler)  # type: ignore[arg-type]
    AsyncWorker(AsyncInboxStore(store).bind(create_async_engine("sqlite+aiosqlite://")), handler)


# -- retention ---------------------------------------------------------------------------------


def test_purge_on_an_async_engine(app: App, async_url: str) -> None:
    policy = RetentionPolicy(
        max_redelivery=datetime.timedelta(hours=1), max_replay=datetime.timedelta(days=1)
    )
    old = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    with app.engine.begin() as conn:
        conn.execute(
            app.inbox.table.insert(),
            [
                {"message_id": f"old{i}", "consumer_name": CONSUMER, "received_at": old}
                for i in range(5)
            ],
        )
        conn.execute(app.inbox.table.insert(), [{"message_id": "new", "consumer_name": CONSUMER}])

    async def scenario(engine: AsyncEngine) -> int:
        return await purge(engine, older_than=policy, table=app.inbox, batch_size=2, pause=0.01)

    assert run(async_url, scenario) == 5
    assert app.inbox_rows() == 1


def _backoff() -> Any:
    from sa_inbox import Backoff

    return Backoff(base=0.05, maximum=0.05)


def test_a_new_claim_is_one_statement(app: App, async_url: str) -> None:
    """The async drivers' probes (aiosqlite's transaction state, aiomysql's warning count)
    answer without a round trip: a warm new claim sends exactly its INSERT, and so does a
    duplicate (on aiomysql too: one warning and no row is the duplicate's 1062 on this
    table, see tests/backends/claim/test_mysql_duplicates.py)."""
    inbox = AsyncInbox(app.inbox)

    async def scenario(engine: AsyncEngine) -> list[list[str]]:
        Session = async_sessionmaker(engine)
        async with Session.begin() as session:  # the first claim's per-engine checks
            await inbox.claim(session, "warm", CONSUMER)
        sent: list[list[str]] = []
        sa.event.listen(
            engine.sync_engine,
            "before_cursor_execute",
            lambda conn, cursor, statement, *rest: sent[-1].append(statement.split()[0]),
        )
        for message_id in ("new", "new"):
            sent.append([])
            async with Session.begin() as session:
                await inbox.claim(session, message_id, CONSUMER)
        return sent

    new, duplicate = run(async_url, scenario)
    assert [s.upper() for s in new] in (["INSERT"], ["MERGE"])
    assert [s.upper() for s in duplicate] == [s.upper() for s in new]


def test_cancelling_the_async_worker_stops_its_tasks(app: App, async_url: str) -> None:
    """``asyncio.wait_for(worker.run(), …)`` timing out left the tasks claiming and rows
    stuck in processing; now they stop as for stop(), releasing what they had not started."""
    store = InboxStore(app.metadata)
    store.table.create(app.engine)
    astore = AsyncInboxStore(store)

    async def slow(session: AsyncSession, message: StoredMessage) -> None:
        await pay(app, session, message.message_id)
        await asyncio.sleep(0.05)

    async def scenario(engine: AsyncEngine) -> tuple[int, dict[str, int], int]:
        async with async_sessionmaker(engine).begin() as session:
            await astore.receive_many(
                session, [Incoming(f"m{i}", {}) for i in range(40)], consumer_name=CONSUMER
            )
        worker = AsyncWorker(
            astore.bind(engine), slow, consumer_name=CONSUMER, concurrency=2, batch_size=5
        )
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(worker.run(handle_signals=False), 0.5)
        done_at_cancel = (await astore.counts(engine, CONSUMER))["done"]
        await asyncio.sleep(0.5)  # nothing may run after the cancellation
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return done_at_cancel, await astore.counts(engine, CONSUMER), len(tasks)

    extra = {"connect_args": {"timeout": 30}} if async_url.startswith("sqlite") else {}
    done_at_cancel, counts, tasks = run(async_url, scenario, **extra)
    assert tasks == 0 and counts["processing"] == 0
    assert counts["done"] == done_at_cancel and counts["done"] + counts["pending"] == 40
    assert app.ledger_rows() == counts["done"]
    store.table.drop(app.engine)


def test_cancelling_past_the_shutdown_timeout_gives_back_unstarted_rows(
    app: App, async_url: str
) -> None:
    """Handlers outlasting the shutdown timeout when run() is cancelled: their messages in
    hand wait for the visibility timeout, the unstarted rest of each batch is pending again
    at once (it stayed processing)."""
    store = InboxStore(app.metadata)
    store.table.create(app.engine)
    astore = AsyncInboxStore(store)

    async def slow(session: AsyncSession, message: StoredMessage) -> None:
        await asyncio.sleep(2)

    async def scenario(engine: AsyncEngine) -> dict[str, int]:
        async with async_sessionmaker(engine).begin() as session:
            await astore.receive_many(
                session, [Incoming(f"m{i}", {}) for i in range(10)], consumer_name=CONSUMER
            )
        worker = AsyncWorker(
            astore.bind(engine), slow, consumer_name=CONSUMER, concurrency=2, batch_size=5
        )
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(worker.run(handle_signals=False, shutdown_timeout=0.2), 1.0)
        return await astore.counts(engine, CONSUMER)

    extra = {"connect_args": {"timeout": 30}} if async_url.startswith("sqlite") else {}
    counts = run(async_url, scenario, **extra)
    # At most one message in hand per task stays processing (before: whole batches).
    assert 1 <= counts["processing"] <= 2 and counts["done"] == 0
    assert counts["pending"] + counts["processing"] == 10
    store.table.drop(app.engine)
