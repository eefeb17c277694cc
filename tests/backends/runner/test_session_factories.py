"""The session factories the runner refuses before any SQL, on every backend: one joined to
a transaction already begun, binds to two engines, a session already in a transaction, a
two-phase session, a sync factory given to the asyncio runner; and those it serves."""

from __future__ import annotations

import asyncio
import logging
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from sa_inbox import Inbox, Outcome, handle
from sa_inbox.exc import (
    InvalidArgument,
    InvalidBind,
    InvalidObject,
    InvalidSessionFactory,
    MissingTable,
    SplitTransaction,
)
from tests.backends.runner.test_guarantee import Broker
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


def pay(app: App, message_id: str = "m1") -> object:
    def apply(session: Session) -> None:  # a function: a lambda cannot own a consumer name
        app.apply_payment(session, message_id, 1, Decimal(3))

    return apply


def test_a_session_joined_to_a_callers_transaction_is_refused(app: App) -> None:
    """A sessionmaker bound to a Connection already in a transaction joins it: its commit
    would commit nothing, and the ack would come before anything is durable."""
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
    commit would leave the claim committed and the message lost."""
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
    """A sessionmaker with only ``binds=`` (no default bind) is served: the runner's own
    dialect look-up follows the binds (no UnboundExecutionError, no nack)."""
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
    not see: ``session.connection().commit()`` would commit the claim alone."""
    if url.startswith("sqlite"):
        pytest.skip("SQLite has no two-phase commit")
    broker = Broker()
    with pytest.raises(SplitTransaction, match="two-phase"):
        handle(sessionmaker(app.engine, twophase=True), app.inbox, "m1", CONSUMER, pay(app),
               ack=broker.ack, nack=broker.nack)  # fmt: skip
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def _configuration_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "inbox.configuration.error"]


def test_a_refused_session_factory_logs_the_configuration_error_once(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    broker = Broker()
    with caplog.at_level(logging.ERROR, logger="sa_inbox"), pytest.raises(InvalidBind):
        handle(
            sessionmaker(), app.inbox, "m1", CONSUMER, pay(app), ack=broker.ack, nack=broker.nack
        )
    [record] = _configuration_errors(caplog)
    assert record.levelno == logging.ERROR and getattr(record, "message_id", None) == "m1"
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_a_sync_factory_given_to_the_asyncio_runner_logs_the_configuration_error_once(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    sa_inbox_asyncio = pytest.importorskip("sa_inbox.asyncio")
    broker = Broker()

    async def apply(session: object) -> None:
        raise AssertionError("never called")

    with caplog.at_level(logging.ERROR, logger="sa_inbox"), pytest.raises(InvalidSessionFactory):
        asyncio.run(
            sa_inbox_asyncio.handle(
                app.Session, app.inbox, "m2", CONSUMER, apply, ack=broker.ack, nack=broker.nack
            )
        )
    [record] = _configuration_errors(caplog)
    assert getattr(record, "message_id", None) == "m2"
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


@pytest.mark.parametrize("settler", ["ack", "nack"])
def test_an_ack_or_nack_that_is_not_callable_is_refused_before_any_sql(
    app: App, settler: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A string where ``ack`` or ``nack`` belongs would fail only after the commit: refused
    first, as a configuration error, with nothing claimed or applied."""
    broker = Broker()
    settlers = {"ack": broker.ack, "nack": broker.nack, settler: "yes"}
    statements: list[str] = []
    sa.event.listen(app.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    with caplog.at_level(logging.ERROR, logger="sa_inbox"), pytest.raises(InvalidObject) as info:
        handle(app.Session, app.inbox, "m3", CONSUMER, pay(app, "m3"), **settlers)
    assert f"{settler} must be callable" in str(info.value)
    assert statements == []
    assert len(_configuration_errors(caplog)) == 1
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


@pytest.mark.parametrize("settler", ["ack", "nack"])
def test_the_asyncio_runner_refuses_an_ack_or_nack_that_is_not_callable(settler: str) -> None:
    sa_inbox_asyncio = pytest.importorskip("sa_inbox.asyncio")
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    engine = create_async_engine("sqlite+aiosqlite://")
    statements: list[str] = []
    sa.event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    broker = Broker()
    settlers = {"ack": broker.ack, "nack": broker.nack, settler: 1}

    async def apply(session: object) -> None:
        raise AssertionError("never called")

    inbox = sa_inbox_asyncio.AsyncInbox(Inbox(sa.MetaData()))
    with pytest.raises(InvalidObject, match=f"{settler} must be callable"):
        asyncio.run(
            sa_inbox_asyncio.handle(
                async_sessionmaker(engine), inbox, "m4", CONSUMER, apply, **settlers
            )
        )
    assert statements == [] and (broker.acks, broker.nacks) == (0, 0)


@pytest.mark.parametrize(
    ("keyword", "hint"),
    [
        ("max_retry", " (did you mean 'max_retries'?)"),
        ("payload_hsh", " (did you mean 'payload_hash'?)"),
        ("colour", ""),
    ],
)
def test_a_misspelled_keyword_names_the_runner_before_any_sql(
    app: App, keyword: str, hint: str
) -> None:
    """An unknown keyword is refused naming ``handle()`` (not the claim's own validation
    it is passed on to) and the closest name it takes."""
    broker = Broker()
    statements: list[str] = []
    sa.event.listen(app.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    wrong = {keyword: 3}
    with pytest.raises(InvalidArgument) as info:
        handle(
            app.Session, app.inbox, "m5", CONSUMER, pay(app, "m5"),
            ack=broker.ack, nack=broker.nack, **wrong,
        )  # fmt: skip
    assert (
        str(info.value) == f"sa_inbox.handle() got an unexpected keyword argument {keyword!r}{hint}"
    )
    assert statements == [] and (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_the_asyncio_runner_names_itself_for_a_misspelled_keyword() -> None:
    sa_inbox_asyncio = pytest.importorskip("sa_inbox.asyncio")
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    engine = create_async_engine("sqlite+aiosqlite://")
    statements: list[str] = []
    sa.event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    broker = Broker()

    async def apply(session: object) -> None:
        raise AssertionError("never called")

    inbox = sa_inbox_asyncio.AsyncInbox(Inbox(sa.MetaData()))
    wrong = {"max_retry": 1}
    with pytest.raises(InvalidArgument) as info:
        asyncio.run(
            sa_inbox_asyncio.handle(
                async_sessionmaker(engine),
                inbox,
                "m6",
                CONSUMER,
                apply,
                ack=broker.ack,
                nack=broker.nack,
                **wrong,
            )
        )
    assert str(info.value) == (
        "sa_inbox.asyncio.handle() got an unexpected keyword argument 'max_retry' "
        "(did you mean 'max_retries'?)"
    )
    assert statements == [] and (broker.acks, broker.nacks) == (0, 0)
