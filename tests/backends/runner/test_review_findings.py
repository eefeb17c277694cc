"""Ways a new-user review (issue 9's closing review) found to ack a message that was not
applied, or to nack a configuration error; each failed before its fix, on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from sa_inbox import Outcome, handle, install, register_claim
from sa_inbox.exc import InvalidHandler, InvalidSessionFactory, MissingTable, SplitTransaction
from tests.backends.runner.test_guarantee import Broker, assert_redelivery_applies, deliver
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


def pay(app: App, message_id: str = "m1") -> object:
    return lambda session: app.apply_payment(session, message_id, 1, Decimal(3))


def test_a_duplicate_raised_inside_the_handler_is_a_failure_not_a_duplicate(app: App) -> None:
    """A handler that also registers the runner's claim through the session extension got
    DUPLICATE + ack with nothing committed: the message was lost."""
    install(app.Session)

    def shared_code(session: Session) -> None:
        register_claim(session, app.inbox, "m1", CONSUMER)
        app.apply_payment(session, "m1", 1, Decimal(3))

    result, broker = deliver(app, shared_code)
    assert result.outcome is Outcome.FAILED and (broker.acks, broker.nacks) == (0, 1)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0
    assert_redelivery_applies(app)


def test_a_session_joined_to_a_callers_transaction_is_refused(app: App) -> None:
    """A sessionmaker bound to a Connection already in a transaction joins it: its commit
    commits nothing, and the ack came before anything was durable."""
    broker = Broker()
    with app.engine.connect() as conn:
        conn.execute(sa.select(1))  # the caller's transaction has begun
        # refused before any SQL (the owner check's transaction of its own included)
        with pytest.raises(InvalidSessionFactory, match="joined a transaction already begun"):
            handle(
                sessionmaker(bind=conn), app.inbox, "m1", CONSUMER, pay(app),
                ack=broker.ack, nack=broker.nack,
            )  # fmt: skip
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0
    assert app.inbox.consumers is not None
    assert app.inbox.consumers.owner(app.engine, CONSUMER) is None


def test_a_joined_session_on_a_one_connection_pool_commits_nothing_of_the_callers() -> None:
    """SQLite's in-memory database: one DBAPI connection per thread (SingletonThreadPool),
    so the owner check's own transaction would run on the caller's connection and commit
    the caller's work with it; it is refused before, and the caller's rollback holds."""
    engine = sa.create_engine("sqlite://")
    app = App(engine)
    app.reset()
    broker = Broker()
    try:
        with engine.connect() as conn:
            outer = conn.begin()
            conn.execute(app.accounts.insert().values(id=9, balance=Decimal(0)))
            with pytest.raises(InvalidSessionFactory):
                handle(
                    sessionmaker(bind=conn, join_transaction_mode="create_savepoint"),
                    app.inbox, "m1", CONSUMER, pay(app), ack=broker.ack, nack=broker.nack,
                )  # fmt: skip
            outer.rollback()
        with engine.connect() as conn:
            accounts = conn.scalar(sa.select(sa.func.count()).select_from(app.accounts))
        assert accounts == 3  # the caller's row rolled back with its transaction
        assert app.inbox_rows() == 0 and app.ledger_rows() == 0
        assert (broker.acks, broker.nacks) == (0, 0)
    finally:
        engine.dispose()


def test_a_session_on_a_connection_without_a_transaction_commits(app: App) -> None:
    with app.engine.connect() as conn:
        result, broker = None, Broker()
        result = handle(
            sessionmaker(bind=conn), app.inbox, "m1", CONSUMER, pay(app),
            ack=broker.ack, nack=broker.nack,
        )  # fmt: skip
    assert result.outcome is Outcome.PROCESSED and broker.acks == 1
    assert app.inbox_rows() == 1 and app.ledger_rows() == 1


def test_binds_to_two_engines_are_refused(app: App, url: str) -> None:
    """The claim and the change on two engines commit one after the other: a failing second
    commit left the claim committed and the message lost."""
    other = sa.create_engine(url)
    broker = Broker()
    try:
        factory = sessionmaker(binds={app.inbox.table: app.engine, app.ledger: other,
                                      app.accounts: other})  # fmt: skip
        with pytest.raises(SplitTransaction):
            handle(factory, app.inbox, "m1", CONSUMER, pay(app), ack=broker.ack, nack=broker.nack)
    finally:
        other.dispose()
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_binds_to_one_engine_work(app: App) -> None:
    """A sessionmaker with only ``binds=`` (no default bind) was nacked for every message
    (UnboundExecutionError from the runner's own dialect look-up)."""
    factory = sessionmaker(
        binds={app.inbox.table: app.engine, app.ledger: app.engine, app.accounts: app.engine}
    )
    broker = Broker()
    result = handle(factory, app.inbox, "m1", CONSUMER, pay(app), ack=broker.ack, nack=broker.nack)
    assert result.outcome is Outcome.PROCESSED and broker.acks == 1
    assert app.inbox_rows() == 1 and app.ledger_rows() == 1
    app.ledger.drop(app.engine)
    with pytest.raises(MissingTable):
        handle(factory, app.inbox, "m2", CONSUMER, pay(app, "m2"), ack=broker.ack,
               nack=broker.nack)  # fmt: skip


def test_a_session_with_a_transaction_in_progress_is_refused(app: App) -> None:
    scoped = scoped_session(app.Session)
    broker = Broker()
    try:
        scoped().execute(sa.select(1))  # the thread's session has begun a transaction
        with pytest.raises(InvalidSessionFactory, match="already in progress"):
            handle(scoped, app.inbox, "m1", CONSUMER, pay(app), ack=broker.ack,
                   nack=broker.nack)  # fmt: skip
    finally:
        scoped.remove()
    assert (broker.acks, broker.nacks) == (0, 0) and app.inbox_rows() == 0


@pytest.fixture
def generators(app: App) -> Iterator[dict[str, object]]:
    def generator(session: Session) -> Iterator[None]:
        app.apply_payment(session, "m1", 1, Decimal(3))
        yield

    def returns_a_generator(session: Session) -> object:
        return generator(session)

    yield {"generator function": generator, "returns a generator": returns_a_generator}


@pytest.mark.parametrize("kind", ["generator function", "returns a generator"])
def test_a_generator_handler_is_refused(app: App, generators: dict[str, object], kind: str) -> None:
    """Its body never ran, yet the claim committed and the message was acked."""
    broker = Broker()
    with pytest.raises(InvalidHandler, match="generator"):
        handle(app.Session, app.inbox, "m1", CONSUMER, generators[kind],  # type: ignore[arg-type]
               ack=broker.ack, nack=broker.nack)  # fmt: skip
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_an_async_generator_handler_is_refused_by_the_asyncio_runner(app: App, url: str) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

    from sa_inbox.asyncio import handle as async_handle

    drivers = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg",
               "mysql": "mysql+aiomysql"}  # fmt: skip
    parsed = sa.make_url(url)
    async_url = parsed.set(drivername=drivers[parsed.get_backend_name()])

    async def generator(session: AsyncSession) -> object:
        await session.execute(sa.select(1))
        yield None

    async def scenario() -> None:
        engine = create_async_engine(async_url)
        try:
            with pytest.raises(InvalidHandler, match="generator"):
                await async_handle(async_sessionmaker(engine), app.inbox, "m1", CONSUMER,
                                   generator, ack=lambda: None, nack=lambda: None)  # fmt: skip
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert app.inbox_rows() == 0


def test_the_asyncio_factory_error_says_one_thing(app: App) -> None:
    from sa_inbox.asyncio import handle as async_handle

    async def scenario() -> str:
        with pytest.raises(InvalidSessionFactory) as raised:
            await async_handle(app.Session, app.inbox, "m1", CONSUMER, pay(app),  # type: ignore[arg-type]
                               ack=lambda: None, nack=lambda: None)  # fmt: skip
        return str(raised.value)

    message = asyncio.run(scenario())
    assert "not an AsyncSession" in message and message.count("session factory") == 1
    assert "pass a sessionmaker" not in message and "<locals>" not in message


def test_a_two_phase_session_is_refused(app: App, url: str) -> None:
    """Two-phase connections commit through PREPARE / COMMIT PREPARED events the guard does
    not see: ``session.connection().commit()`` went through (claim committed alone)."""
    if url.startswith("sqlite"):
        pytest.skip("SQLite has no two-phase commit")
    broker = Broker()
    with pytest.raises(SplitTransaction, match="two-phase"):
        handle(sessionmaker(app.engine, twophase=True), app.inbox, "m1", CONSUMER, pay(app),
               ack=broker.ack, nack=broker.nack)  # fmt: skip
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_the_guard_never_disturbs_other_threads_commits(app: App) -> None:
    """Each new sessionmaker is a new Session class; the guard listened on it at its first
    handle() while other threads' commits (here through the session extension, as the README
    shows) were firing the same event, and those commits failed ('deque mutated during
    iteration'). Its listeners are now installed once, at import."""
    import itertools
    import threading

    errors: list[BaseException] = []
    counter = itertools.count()
    for iteration in range(40):
        factory = sessionmaker(app.engine)  # a new Session class
        install(factory)
        stop = threading.Event()

        def commit_own_sessions(
            factory: sessionmaker[Session] = factory, stop: threading.Event = stop
        ) -> None:
            while not stop.is_set():
                try:
                    with factory.begin() as session:
                        register_claim(session, app.inbox, f"own-{next(counter)}", "other")
                except BaseException as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=commit_own_sessions) for _ in range(3)]
        for thread in threads:
            thread.start()
        try:
            result, _ = deliver_with(app, factory, f"m{iteration}")
            assert result.outcome is Outcome.PROCESSED
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    contention = ("locked", "deadlock", "Deadlock")  # the databases' own, retried by users
    assert [e for e in errors if not any(word in str(e) for word in contention)] == []
    assert app.ledger_rows() == 40


def deliver_with(app: App, factory: sessionmaker[Session], message_id: str) -> tuple[Any, Broker]:
    broker = Broker()
    result = handle(factory, app.inbox, message_id, CONSUMER, pay(app, message_id),
                    ack=broker.ack, nack=broker.nack)  # fmt: skip
    return result, broker
