"""A failed handler cannot damage the connection it leaves behind, on every async driver.

Each scenario runs on a pool of ONE connection (``pool_size=1, max_overflow=0``), so the
messages after the failed one get the very connection its handler used: the failed message
is FAILED (nacked) or a failed attempt, with the handler's own error; then 100 good
messages are all processed, the ledger holds exactly their 100 rows and the claims table
(or the store) their 100 claims, and a second connection can take an exclusive lock on both
tables at once (nothing is left holding one).

Before, ``await asyncio.gather(session.execute(stmt), boom())`` left the ``execute`` running
while the runner rolled back: asyncpg refused the ``ROLLBACK`` ("another operation is in
progress"), SQLAlchemy's adapter forgot its transaction while the server kept it open, and
the connection went back to the pool inside it, holding its locks; every next message
FAILED with "cannot use Connection.transaction() in a manually started transaction".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from sa_inbox import InboxStore, Outcome, Result, pool_guard
from sa_inbox._compat import await_only
from sa_inbox.asyncio import AsyncInboxStore, AsyncWorker, handle
from sa_inbox.guard import enlisted_connections
from sa_inbox.store import Incoming, StoredMessage
from tests.backends.asyncio.test_async import run
from tests.support.app import CONSUMER, App
from tests.support.locks import assert_no_lock_held
from tests.support.pool import ONE_CONNECTION, count_connects
from tests.support.sleep import sleep_sql

pytestmark = pytest.mark.backend

#: Good messages delivered after the failed one.
GOOD = 100
#: The seconds another task's statement runs (it must still be running when the handler
#: fails: the test asserts it).
STATEMENT_SECONDS = 0.5
#: Seconds a delivery may take before the test calls it hung (a rollback waiting for ever).
HUNG_AFTER = 60.0

AsyncHandler = Callable[[AsyncSession], Awaitable[None]]


def one_connection(async_url: str) -> dict[str, Any]:
    """Engine keywords for a pool of exactly one connection."""
    extra = dict(ONE_CONNECTION)
    if async_url.startswith("sqlite"):
        extra["connect_args"] = {"timeout": 30}
    return extra


async def boom() -> None:
    raise LookupError("the lookup failed")


async def statement_sent(session: AsyncSession) -> None:
    """Return once the driver of the session's connection reports a statement running."""
    connections = enlisted_connections(session.sync_session)
    while not pool_guard.statement_running(connections):
        await asyncio.sleep(0.005)


async def boom_once_sent(session: AsyncSession) -> None:
    await asyncio.wait_for(statement_sent(session), HUNG_AFTER)
    await boom()


#: How the gather's statement is left: ``write``, a ledger row sent with ``boom()`` (the
#: race of the report: whether the row is still on the wire when boom raises depends on
#: the driver); ``in_flight``, a statement that runs :data:`STATEMENT_SECONDS`, and boom
#: raises once the driver reports it running.
GATHERS = ["write", "in_flight"]


def gather_half_done(app: App, engine: AsyncEngine, kind: str) -> AsyncHandler:
    """``gather(session.execute(...), boom())``: gather raises boom's error and leaves the
    execute running (asyncio docs, "Running Tasks Concurrently")."""
    bad_row, _ = app.payment("bad", 1, Decimal(1))
    slow = sa.text(sleep_sql(engine, STATEMENT_SECONDS))

    async def handler(session: AsyncSession) -> None:
        if kind == "write":
            await asyncio.gather(session.execute(bad_row), boom())
        else:
            await session.execute(bad_row)
            await asyncio.gather(session.execute(slow), boom_once_sent(session))

    return handler


async def deliver(Session: Any, app: App, message_id: str, handler: AsyncHandler) -> Result:
    """One delivery through ``sa_inbox.asyncio.handle``, refused if it hangs."""
    return await asyncio.wait_for(
        handle(Session, app.inbox, message_id, CONSUMER, handler, ack=_noop, nack=_noop),
        HUNG_AFTER,
    )


async def _noop() -> None:
    return None


async def deliver_good(Session: Any, app: App) -> Counter[Outcome]:
    """The :data:`GOOD` messages ``m0`` … ``m99``, each paying 1 into account 1."""
    outcomes: Counter[Outcome] = Counter()
    for i in range(GOOD):
        message_id = f"m{i}"

        async def pay(session: AsyncSession, message_id: str = message_id) -> None:
            await app.apply_payment_async(session, message_id, 1, Decimal(1))

        outcomes[(await deliver(Session, app, message_id, pay)).outcome] += 1
    return outcomes


def assert_only_the_good_messages(app: App, *tables: sa.Table) -> None:
    with app.engine.connect() as conn:
        ids = conn.execute(sa.select(app.ledger.c.message_id)).scalars().all()
    assert sorted(ids) == sorted(f"m{i}" for i in range(GOOD))
    assert app.balance(1) == GOOD
    assert_no_lock_held(app.engine, app.ledger, *tables)


def invalidations(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The driver states of the connections :mod:`sa_inbox.pool_guard` invalidated."""
    return [r.state for r in caplog.records if r.name == pool_guard.__name__]  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", GATHERS)
def test_a_gather_left_half_done_leaves_a_clean_connection(
    app: App, async_url: str, kind: str
) -> None:
    """A statement of the gather still running is let finish (it is rolled back with the
    rest), then the connection is rolled back and kept: with ``in_flight`` the pool never
    opens a second one. (With ``write``, boom may raise while the execute's task is between
    two awaits, not yet running its statement: it is cancelled there, and SQLAlchemy
    invalidates a connection whose operation was cancelled.)"""

    async def scenario(engine: AsyncEngine) -> tuple[Result, Counter[Outcome], int]:
        opened = count_connects(engine)
        Session = async_sessionmaker(engine)
        failed = await deliver(Session, app, "bad", gather_half_done(app, engine, kind))
        return failed, await deliver_good(Session, app), len(opened)

    failed, outcomes, connects = run(async_url, scenario, **one_connection(async_url))
    assert failed.outcome is Outcome.FAILED
    assert isinstance(failed.error, LookupError), failed.error  # the handler's own error
    assert outcomes == Counter({Outcome.PROCESSED: GOOD})
    assert connects == 1 or kind == "write", connects
    assert app.inbox_rows() == GOOD
    assert_only_the_good_messages(app, app.inbox.table)


@pytest.mark.parametrize("kind", GATHERS)
@pytest.mark.parametrize("transaction", ["message", "batch"])
def test_the_async_worker_after_a_gather_left_half_done(
    app: App, async_url: str, transaction: str, kind: str
) -> None:
    store = InboxStore(app.metadata)
    store.table.create(app.engine)
    astore = AsyncInboxStore(store)

    async def scenario(engine: AsyncEngine) -> tuple[Any, dict[str, int]]:
        half_done = gather_half_done(app, engine, kind)

        async def handler(session: AsyncSession, message: StoredMessage) -> None:
            if message.message_id == "bad":
                await half_done(session)
            else:
                await app.apply_payment_async(session, message.message_id, 1, Decimal(1))

        async with async_sessionmaker(engine).begin() as session:
            incoming = [Incoming("bad", {})] + [Incoming(f"m{i}", {}) for i in range(GOOD)]
            await astore.receive_many(session, incoming, consumer_name=CONSUMER)
        worker = AsyncWorker(
            astore.bind(engine),
            handler,
            consumer_name=CONSUMER,
            transaction=transaction,
            batch_size=10,
            max_attempts=1,
            poll_interval=0.05,
        )
        summary = await asyncio.wait_for(
            worker.run(until_empty=True, handle_signals=False), HUNG_AFTER
        )
        return summary, await astore.counts(engine, CONSUMER)

    summary, counts = run(async_url, scenario, **one_connection(async_url))
    assert counts["done"] == GOOD and counts["dead"] == 1, counts
    assert summary.processed == GOOD and summary.reason == "empty", summary
    assert_only_the_good_messages(app, store.table)
    store.table.drop(app.engine)


class Executor:
    """A task of the application's, started before any delivery, that runs statements
    handed to it: a handler that uses it leaves a statement in flight that sa-inbox did
    not start and cannot cancel."""

    def __init__(self, sleep_sql: str) -> None:
        self.sleep_sql = sleep_sql
        self.jobs: asyncio.Queue[tuple[AsyncSession, asyncio.Event]] = asyncio.Queue()
        self.task = asyncio.create_task(self._serve())

    async def _serve(self) -> None:
        while True:
            session, started = await self.jobs.get()
            started.set()
            with contextlib.suppress(Exception):  # its connection was invalidated under it
                await session.execute(sa.text(self.sleep_sql))

    def handler(self, app: App) -> AsyncHandler:
        """Writes the bad row, hands a statement to the executor, fails while it runs."""

        async def handler(session: AsyncSession) -> None:
            await app.apply_payment_async(session, "bad", 1, Decimal(1))
            started = asyncio.Event()
            self.jobs.put_nowait((session, started))
            await started.wait()
            await asyncio.wait_for(statement_sent(session), HUNG_AFTER)
            raise LookupError("the lookup failed")

        return handler

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def test_a_statement_another_task_runs_ends_before_the_rollback(app: App, async_url: str) -> None:
    """The transaction waits for the executor's statement (it is rolled back with it), so
    the connection is rolled back and kept, not invalidated."""

    async def scenario(engine: AsyncEngine) -> tuple[Result, Counter[Outcome], int]:
        opened = count_connects(engine)
        executor = Executor(sleep_sql(engine, STATEMENT_SECONDS))
        try:
            Session = async_sessionmaker(engine)
            failed = await deliver(Session, app, "bad", executor.handler(app))
            return failed, await deliver_good(Session, app), len(opened)
        finally:
            await executor.close()

    failed, outcomes, connects = run(async_url, scenario, **one_connection(async_url))
    assert failed.outcome is Outcome.FAILED
    assert isinstance(failed.error, LookupError), failed.error
    assert outcomes == Counter({Outcome.PROCESSED: GOOD})
    assert connects == 1
    assert app.inbox_rows() == GOOD
    assert_only_the_good_messages(app, app.inbox.table)


def test_a_statement_outlasting_the_wait_invalidates_the_connection(
    app: App, async_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Past ``BUSY_WAIT_SECONDS`` the busy connection is invalidated before the rollback
    (asyncpg cancels the statement and closes; aiomysql closes its stream). Not run on
    psycopg, whose socket stays registered with the loop by the statement's waiter (the
    next connection, given the same descriptor, can fail once), nor on aiosqlite, whose
    closed connection keeps the database's write lock until the statement's cursor is
    gone (sqlite3's ``close`` of a connection with a statement left: a zombie)."""
    if sa.make_url(async_url).drivername not in ("postgresql+asyncpg", "mysql+aiomysql"):
        pytest.skip("closing a connection under a running statement: see the docstring")
    monkeypatch.setattr(pool_guard, "BUSY_WAIT_SECONDS", 0.05)

    async def scenario(engine: AsyncEngine) -> tuple[Result, Counter[Outcome]]:
        executor = Executor(sleep_sql(engine, 10 * STATEMENT_SECONDS))
        try:
            Session = async_sessionmaker(engine)
            failed = await deliver(Session, app, "bad", executor.handler(app))
            return failed, await deliver_good(Session, app)
        finally:
            await executor.close()

    with caplog.at_level(logging.WARNING, logger=pool_guard.__name__):
        failed, outcomes = run(async_url, scenario, **one_connection(async_url))
    assert failed.outcome is Outcome.FAILED
    assert isinstance(failed.error, LookupError), failed.error
    assert invalidations(caplog) == ["busy"]
    assert outcomes == Counter({Outcome.PROCESSED: GOOD})
    assert app.inbox_rows() == GOOD
    assert_only_the_good_messages(app, app.inbox.table)


def test_a_copy_left_open_on_psycopg_invalidates_the_connection(
    app: App, async_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A psycopg ``COPY`` left open holds the connection's lock: before, the runner's
    rollback waited on it for ever. Now the driver reports the command in progress
    (``PQTRANS_ACTIVE``) and the connection is invalidated instead."""
    if sa.make_url(async_url).drivername != "postgresql+psycopg":
        pytest.skip("a COPY left open: psycopg's")
    monkeypatch.setattr(pool_guard, "BUSY_WAIT_SECONDS", 0.05)

    async def copy_left_open(session: AsyncSession) -> None:
        await app.apply_payment_async(session, "bad", 1, Decimal(1))
        raw = await (await session.connection()).get_raw_connection()
        copy = raw.driver_connection.cursor().copy(
            "COPY ledger (message_id, account_id, amount) FROM STDIN"
        )  # kept, as the handler's local, by the error's traceback: freed, it ends the COPY
        writer = await copy.__aenter__()
        await writer.write_row(("bad", 1, 1))
        raise LookupError("the lookup failed")

    async def scenario(engine: AsyncEngine) -> tuple[Result, Counter[Outcome]]:
        Session = async_sessionmaker(engine)
        failed = await deliver(Session, app, "bad", copy_left_open)
        return failed, await deliver_good(Session, app)

    with caplog.at_level(logging.WARNING, logger=pool_guard.__name__):
        failed, outcomes = run(async_url, scenario, **one_connection(async_url))
    assert failed.outcome is Outcome.FAILED
    assert isinstance(failed.error, LookupError), failed.error
    assert invalidations(caplog) == ["busy"]
    assert outcomes == Counter({Outcome.PROCESSED: GOOD})
    assert_only_the_good_messages(app, app.inbox.table)


#: A ledger row written in a transaction the driver began behind SQLAlchemy's back.
BEHIND = "INSERT INTO ledger (message_id, account_id, amount) VALUES ('behind', 1, 1)"


async def begin_behind_sqlalchemys_back(driver: Any, drivername: str) -> None:
    """``BEGIN`` and a ledger row, sent on the driver's own connection."""
    if drivername == "mysql+aiomysql":
        await driver.begin()
        async with driver.cursor() as cursor:
            await cursor.execute(BEHIND)
    elif drivername == "sqlite+aiosqlite":
        await driver.execute("BEGIN")
        await driver.execute(BEHIND)
    else:  # asyncpg, psycopg: the simple query protocol takes both statements
        await driver.execute(f"BEGIN; {BEHIND}")


def test_a_transaction_the_pool_does_not_know_is_not_pooled(
    app: App, async_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The check at checkin: SQLAlchemy's asyncpg adapter tracks its transaction itself, so
    the pool's rollback on return skips one begun on the driver directly, and before, the
    connection went back to the pool inside it (holding its locks; the next checkout failed
    "cannot use Connection.transaction() in a manually started transaction"). Now its
    driver is asked when it returns, and it is invalidated. The other drivers' rollback on
    return ends such a transaction: their connection is kept."""
    drivername = sa.make_url(async_url).drivername

    async def scenario(engine: AsyncEngine) -> int:
        opened = count_connects(engine)
        async with engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection

            def behind(sync_conn: sa.Connection) -> None:
                with pool_guard.released_clean(lambda: (sync_conn,)):
                    await_only(begin_behind_sqlalchemys_back(driver, drivername))

            await conn.run_sync(behind)
        async with engine.begin() as conn:  # the pool's next checkout
            await app.apply_payment_async(conn, "m0", 1, Decimal(1))
        return len(opened)

    with caplog.at_level(logging.WARNING, logger=pool_guard.__name__):
        connects = run(async_url, scenario, **one_connection(async_url))
    invalidated = drivername == "postgresql+asyncpg"
    assert invalidations(caplog) == (["in a transaction"] if invalidated else [])
    assert connects == (2 if invalidated else 1)
    assert app.ledger_rows("behind") == 0 and app.ledger_rows("m0") == 1
    assert_no_lock_held(app.engine, app.ledger)
