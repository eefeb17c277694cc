"""No path acks a message that was never applied, on every backend.

Each scenario runs the runner (:func:`sa_inbox.handle`) or the store's worker against the
real database and asserts on the business state (ledger rows, balances, inbox rows) and on
what reached the broker (acks, nacks), then redelivers the message to a correct handler to
prove it was not lost.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import ConfigurationError, InboxStore, Outcome, handle
from sa_inbox.consumers import owned_as
from sa_inbox.exc import (
    AsyncHandlerError,
    AsyncHandlerInSyncRunner,
    AutocommitConnection,
    HandlerEndedTransaction,
    InvalidHandler,
    InvalidSessionFactory,
    MissingTable,
)
from sa_inbox.store import DONE, PENDING, utc_now
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


class Broker:
    """Records acks and nacks of one delivery."""

    def __init__(self) -> None:
        self.acks = 0
        self.nacks = 0

    def ack(self) -> None:
        self.acks += 1

    def nack(self) -> None:
        self.nacks += 1


def paying(app: App, message_id: str = "m1") -> Callable[[Session], None]:
    """A handler paying 3.00 into account 1 for ``message_id``."""

    def pay(session: Session) -> None:
        app.apply_payment(session, message_id, 1, Decimal(3))

    return pay


def deliver(app: App, handler: Callable[[Session], object], message_id: str = "m1") -> Any:
    """One delivery through :func:`handle`; returns ``(result, broker)``."""
    broker = Broker()
    result = handle(
        app.Session,
        app.inbox,
        message_id,
        CONSUMER,
        handler,  # type: ignore[arg-type]
        ack=broker.ack,
        nack=broker.nack,
    )
    return result, broker


def assert_redelivery_applies(app: App, message_id: str = "m1") -> None:
    """The broker redelivers to a fixed handler (a new release, handed the consumer name):
    it now applies the payment exactly once."""

    def fixed(session: Session) -> None:
        app.apply_payment(session, message_id, 1, Decimal(3))

    assert app.inbox.consumers is not None
    app.inbox.consumers.hand_over(app.engine, CONSUMER, fixed)
    result, broker = deliver(app, fixed, message_id)
    assert result.outcome is Outcome.PROCESSED and (broker.acks, broker.nacks) == (1, 0)
    assert app.ledger_rows(message_id) == 1 and app.balance(1) == Decimal(3)
    assert app.inbox_rows() == 1


# -- 1. async handlers are refused -------------------------------------------------------


class Awaitable:
    """An awaitable that is not a coroutine (as a Future or a Task is)."""

    def __await__(self) -> Iterator[None]:
        yield None


def async_handlers(app: App) -> dict[str, Callable[[Session], object]]:
    async def coroutine_function(session: Session) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))

    class AsyncCallable:
        async def __call__(self, session: Session) -> None:
            app.apply_payment(session, "m1", 1, Decimal(3))

    return {
        "async def": coroutine_function,
        "partial of async def": functools.partial(coroutine_function),
        "async __call__": AsyncCallable(),
        # lambdas own no consumer name: named, so that the result is what is refused
        "lambda returning a coroutine": owned_as("t.coro", lambda s: coroutine_function(s)),
        "returning an awaitable": owned_as("t.awaitable", lambda session: Awaitable()),
    }


@pytest.mark.parametrize("kind", ["async def", "partial of async def", "async __call__"])
def test_async_handler_is_a_configuration_error_neither_acked_nor_nacked(
    app: App, kind: str
) -> None:
    handler = async_handlers(app)[kind]
    broker = Broker()
    with pytest.raises(AsyncHandlerInSyncRunner, match="coroutine function"):
        handle(app.Session, app.inbox, "m1", CONSUMER, handler, ack=broker.ack, nack=broker.nack)
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0
    assert_redelivery_applies(app)


@pytest.mark.parametrize("kind", ["lambda returning a coroutine", "returning an awaitable"])
def test_a_handler_returning_an_awaitable_is_refused_and_nacked(app: App, kind: str) -> None:
    handler = async_handlers(app)[kind]
    result, broker = deliver(app, handler)
    assert result.outcome is Outcome.FAILED and isinstance(result.error, AsyncHandlerError)
    assert not isinstance(result.error, ConfigurationError)
    assert (broker.acks, broker.nacks) == (0, 1)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0
    assert_redelivery_applies(app)


# -- 2. a handler may not end the transaction that holds the claim -----------------------


def committing_handlers(app: App) -> dict[str, Callable[[Session], None]]:
    def pay(session: Session) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))

    def session_commit(session: Session) -> None:
        pay(session)
        session.commit()

    def connection_commit(session: Session) -> None:
        pay(session)
        session.connection().commit()

    def transaction_commit(session: Session) -> None:
        pay(session)
        transaction = session.get_transaction()
        assert transaction is not None
        transaction.commit()

    def begin_block(session: Session) -> None:
        with session.begin():
            pay(session)

    def nested_session_commit(session: Session) -> None:
        with Session(bind=session.connection(), join_transaction_mode="control_fully") as inner:
            pay(inner)
            inner.commit()

    def caught_connection_commit(session: Session) -> None:
        pay(session)
        with contextlib.suppress(HandlerEndedTransaction):  # swallowed: still refused
            session.connection().commit()

    def caught_session_commit(session: Session) -> None:
        pay(session)
        with contextlib.suppress(HandlerEndedTransaction):  # swallowed: still refused
            session.commit()

    def rollback_then_write(session: Session) -> None:
        session.rollback()
        pay(session)

    def connection_rollback_then_write(session: Session) -> None:
        session.connection().rollback()
        pay(session)

    def nested_session_rollback(session: Session) -> None:
        pay(session)
        with Session(bind=session.connection()) as inner:
            inner.execute(sa.select(1))  # joins the outer transaction ("rollback_only")
            inner.rollback()

    return {
        name: handler
        for name, handler in locals().items()
        if callable(handler) and name != "pay" and name != "app"
    }


@pytest.mark.parametrize(
    "kind",
    [
        "session_commit",
        "connection_commit",
        "transaction_commit",
        "begin_block",
        "nested_session_commit",
        "caught_connection_commit",
        "caught_session_commit",
        "rollback_then_write",
        "connection_rollback_then_write",
        "nested_session_rollback",
    ],
)
def test_handler_ending_the_transaction_fails_and_loses_nothing(app: App, kind: str) -> None:
    handler = committing_handlers(app)[kind]
    result, broker = deliver(app, handler)
    assert result.outcome is Outcome.FAILED, result
    assert (broker.acks, broker.nacks) == (0, 1)
    # Nothing of the attempt committed: not the claim, not the payment.
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0 and app.balance(1) == 0
    # The pooled connection carries nothing over into the next transaction either.
    with app.engine.begin() as conn:
        conn.execute(app.accounts.update().where(app.accounts.c.id == 2).values(balance=1))
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0
    assert_redelivery_applies(app)


def test_connection_commit_refused_on_a_single_connection_pool(url: str) -> None:
    """The refused ``commit()`` rolls the driver's transaction back: the next checkout of the
    same pooled DBAPI connection cannot commit the claim by accident."""
    engine = sa.create_engine(url, pool_size=1, max_overflow=0)
    app = App(engine)
    app.reset()
    try:

        def handler(session: Session) -> None:
            app.apply_payment(session, "m1", 1, Decimal(3))
            with contextlib.suppress(HandlerEndedTransaction):  # swallowed: still refused
                session.connection().commit()

        result, broker = deliver(app, handler)
        assert result.outcome is Outcome.FAILED and broker.nacks == 1
        with engine.begin() as conn:  # the same DBAPI connection, from the pool
            conn.execute(app.accounts.update().where(app.accounts.c.id == 2).values(balance=1))
        assert app.inbox_rows() == 0 and app.ledger_rows() == 0
    finally:
        app.drop()
        engine.dispose()


# -- 3. driver-level autocommit is detected ------------------------------------------------


def driver_autocommit_engine(url: str) -> sa.Engine:
    """An engine whose driver connections commit every statement on their own."""
    if url.startswith("sqlite"):
        return sa.create_engine(url, connect_args={"isolation_level": None})
    if url.startswith(("postgresql", "mysql")):
        return sa.create_engine(url, connect_args={"autocommit": True})
    pytest.skip(f"no driver-level autocommit scenario for {url.split(':')[0]}")


@pytest.fixture
def autocommit_app(app: App, url: str) -> Iterator[App]:
    engine = driver_autocommit_engine(url)
    yield App(engine)
    engine.dispose()


def test_driver_autocommit_is_refused_by_the_claim(app: App, autocommit_app: App) -> None:
    with autocommit_app.engine.connect() as conn, pytest.raises(AutocommitConnection):
        app.inbox.claim(conn, "m1", CONSUMER)
    with autocommit_app.Session() as session, pytest.raises(AutocommitConnection):
        app.inbox.claim(session, "m1", CONSUMER)
    assert app.inbox_rows() == 0


def test_driver_autocommit_is_a_configuration_error_for_handle(
    app: App, autocommit_app: App
) -> None:
    broker = Broker()

    def fails(session: Session) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))
        raise RuntimeError("boom")

    with pytest.raises(AutocommitConnection):
        handle(
            autocommit_app.Session,
            app.inbox,
            "m1",
            CONSUMER,
            fails,
            ack=broker.ack,
            nack=broker.nack,
        )
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_transactional_sqlite_recipe_is_not_autocommit(tmp_path: object) -> None:
    """SQLAlchemy's documented pysqlite recipe (``isolation_level=None`` plus an explicit
    ``BEGIN``) is transactional: claims work and roll back with the transaction. (SQLite
    only: the recipe is pysqlite's, so this test takes no ``url`` parameter.)"""
    url = f"sqlite:///{tmp_path}/recipe.db"
    app = App(sa.create_engine(url))
    app.reset()
    engine = sa.create_engine(url, connect_args={"isolation_level": None})
    sa.event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN"))
    try:
        with engine.connect() as conn:
            with conn.begin() as transaction:
                assert app.inbox.claim(conn, "m1", CONSUMER) is True
                transaction.rollback()
            with conn.begin():
                assert app.inbox.claim(conn, "m2", CONSUMER) is True
        assert app.inbox_rows() == 1
    finally:
        engine.dispose()
        app.engine.dispose()


# -- 4. configuration errors are raised, never acked or nacked -----------------------------


def config_error_cases(app: App) -> dict[str, tuple[Any, Any, type[ConfigurationError]]]:
    def pay(session: Session) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))

    def two_arguments(session: Session, message: object) -> None:
        pay(session)

    autocommit = app.engine.execution_options(isolation_level="AUTOCOMMIT")
    return {
        "Session.begin as factory": (Session.begin, pay, InvalidSessionFactory),
        "sessionmaker.begin as factory": (app.Session.begin, pay, InvalidSessionFactory),
        "handler with the wrong signature": (app.Session, two_arguments, InvalidHandler),
        "handler not callable": (app.Session, "pay", InvalidHandler),
        "AUTOCOMMIT engine": (sessionmaker(autocommit), pay, AutocommitConnection),
    }


@pytest.mark.parametrize(
    "case",
    [
        "Session.begin as factory",
        "sessionmaker.begin as factory",
        "handler with the wrong signature",
        "handler not callable",
        "AUTOCOMMIT engine",
    ],
)
def test_configuration_error_is_raised_not_nacked(app: App, case: str) -> None:
    factory, handler, error = config_error_cases(app)[case]
    broker = Broker()
    with pytest.raises(error):
        handle(factory, app.inbox, "m1", CONSUMER, handler, ack=broker.ack, nack=broker.nack)
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_missing_inbox_table_is_raised_not_nacked(app: App) -> None:
    app.inbox.table.drop(app.engine)
    broker = Broker()
    with pytest.raises(MissingTable) as raised:
        handle(
            app.Session,
            app.inbox,
            "m1",
            CONSUMER,
            paying(app),
            ack=broker.ack,
            nack=broker.nack,
        )
    assert isinstance(raised.value.__cause__, sa.exc.DBAPIError)
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.ledger_rows() == 0


def test_missing_business_table_is_raised_not_nacked(app: App) -> None:
    app.ledger.drop(app.engine)
    broker = Broker()
    with pytest.raises(MissingTable):
        handle(
            app.Session,
            app.inbox,
            "m1",
            CONSUMER,
            paying(app),
            ack=broker.ack,
            nack=broker.nack,
        )
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.balance(1) == 0


def test_a_business_error_is_still_a_message_failure(app: App) -> None:
    """Only configuration errors escape: an ordinary integrity error is nacked."""

    def duplicate_ledger_id(session: Session) -> None:
        session.execute(app.ledger.insert().values(id=1, message_id="x", account_id=1, amount=1))
        session.execute(app.ledger.insert().values(id=1, message_id="y", account_id=1, amount=1))

    result, broker = deliver(app, duplicate_ledger_id)
    assert result.outcome is Outcome.FAILED and isinstance(result.error, sa.exc.IntegrityError)
    assert (broker.acks, broker.nacks) == (0, 1)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


# -- the store's worker: the same refusals, as failed attempts ---------------------------


@pytest.fixture
def app_store(app: App) -> Iterator[tuple[App, InboxStore]]:
    store = InboxStore(app.metadata)
    store.table.create(app.engine)
    yield app, store
    store.table.drop(app.engine)


def stored_row(app: App, store: InboxStore) -> Any:
    with app.engine.connect() as conn:
        return conn.execute(sa.select(store.table)).mappings().one()


def claim_one(app: App, store: InboxStore) -> Any:
    with app.Session.begin() as session:
        store.receive(session, "m1", {"amount": 3}, consumer_name=CONSUMER)
    (message,) = store.lease(
        app.engine,
        consumer_name=CONSUMER,
        claimed_by="t#1",
        limit=1,
        visibility_timeout=60,
        max_attempts=5,
        ordered=False,
    )
    return message


@pytest.mark.parametrize("kind", ["async def", "connection commit"])
def test_worker_handler_refused_is_a_failed_attempt(
    app_store: tuple[App, InboxStore], kind: str
) -> None:
    app, store = app_store
    message = claim_one(app, store)

    async def async_handler(session: Session, message: object) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))

    def committing(session: Session, message: object) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))
        session.connection().commit()

    handler = async_handler if kind == "async def" else committing
    expected = AsyncHandlerError if kind == "async def" else HandlerEndedTransaction
    with pytest.raises(expected):
        store.complete(app.engine, message, handler)
    row = stored_row(app, store)
    assert row["status"] != DONE and app.ledger_rows() == 0 and app.balance(1) == 0


def test_store_complete_on_driver_autocommit_is_refused(
    app_store: tuple[App, InboxStore], url: str
) -> None:
    app, store = app_store
    message = claim_one(app, store)
    engine = driver_autocommit_engine(url)
    try:
        with pytest.raises(AutocommitConnection):
            store.complete(
                engine,
                message,
                lambda session, message: app.apply_payment(session, "m1", 1, Decimal(3)),
            )
    finally:
        engine.dispose()
    # ``done`` was never written on its own, ahead of the handler.
    row = stored_row(app, store)
    assert row["status"] != DONE and app.ledger_rows() == 0


def test_store_missing_table_is_a_configuration_error(app: App) -> None:
    store = InboxStore(sa.MetaData(), table_name="never_created_store")
    with pytest.raises(MissingTable):
        store.lease(
            app.engine,
            consumer_name=CONSUMER,
            claimed_by="t#1",
            limit=1,
            visibility_timeout=60,
            max_attempts=5,
            ordered=False,
        )


def test_worker_refusal_leaves_the_row_retryable(app_store: tuple[App, InboxStore]) -> None:
    """After a refused attempt is recorded, the next claim processes the message once."""
    app, store = app_store
    message = claim_one(app, store)
    with pytest.raises(HandlerEndedTransaction):
        store.complete(app.engine, message, lambda session, m: session.commit())
    assert store.fail(app.engine, message, "refused", retry_at=utc_now()) is True
    assert stored_row(app, store)["status"] == PENDING
    (again,) = store.lease(
        app.engine,
        consumer_name=CONSUMER,
        claimed_by="t#2",
        limit=1,
        visibility_timeout=60,
        max_attempts=5,
        ordered=False,
    )
    assert again.attempts == 2
    pay = lambda session, m: app.apply_payment(session, "m1", 1, Decimal(3))  # noqa: E731
    assert store.complete(app.engine, again, pay) is True
    assert stored_row(app, store)["status"] == DONE
    assert app.ledger_rows() == 1 and app.balance(1) == Decimal(3)


def test_nack_log_line_names_the_message(app: App, caplog: pytest.LogCaptureFixture) -> None:
    """The plain-text log line of a nack names the message, the consumer and the error."""

    def fails(session: Session) -> None:
        raise RuntimeError("card declined")

    with caplog.at_level("WARNING", logger="sa_inbox.runner"):
        result, broker = deliver(app, fails, "pay-42")
    assert result.outcome is Outcome.FAILED and broker.nacks == 1
    (record,) = [r for r in caplog.records if r.name == "sa_inbox.runner"]
    text = record.getMessage()
    assert "pay-42" in text and CONSUMER in text and "RuntimeError: card declined" in text


def test_sessions_and_connections_no_guard_holds_commit_as_usual(app: App) -> None:
    """The guard listens once per Session class and Engine; for everything it does not
    hold (the application's own sessions and connections) its listeners do nothing."""
    result, _ = deliver(app, paying(app))
    assert result.outcome is Outcome.PROCESSED
    with app.Session() as session:  # the same session class and engine, no guard
        app.apply_payment(session, "own-1", 2, Decimal(5))
        session.commit()
    with app.engine.connect() as conn:
        app.apply_payment(conn, "own-2", 2, Decimal(5))
        conn.commit()
    assert app.balance(2) == Decimal(10) and app.ledger_rows() == 3
