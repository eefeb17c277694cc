"""The session extension and the handler runner on every backend."""

from __future__ import annotations

from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from sa_inbox import DuplicateMessage, InboxError, Outcome, handle, install, register_claim
from sa_inbox.exc import AutocommitConnection, ConfigurationError, UnsafeTransaction
from sa_inbox.session import pending_claims, uninstall
from tests.support.app import CONSUMER, App, hand_over

pytestmark = pytest.mark.backend


class Base(DeclarativeBase):
    pass


class LedgerEntry(Base):
    __tablename__ = "orm_ledger"
    id: Mapped[int] = mapped_column(primary_key=True)
    message_id: Mapped[str] = mapped_column(sa.String(255))
    amount: Mapped[Decimal] = mapped_column(sa.Numeric(14, 2))


@pytest.fixture
def orm_app(app: App) -> App:
    Base.metadata.drop_all(app.engine)
    Base.metadata.create_all(app.engine)
    install(app.Session)
    yield app  # type: ignore[misc]
    Base.metadata.drop_all(app.engine)


def orm_rows(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(LedgerEntry)).scalar_one())


def test_claim_is_emitted_first_at_flush(orm_app: App) -> None:
    statements: list[str] = []
    sa.event.listen(
        orm_app.engine, "before_cursor_execute", lambda *a: statements.append(a[2]), named=False
    )
    with orm_app.Session.begin() as session:
        session.add(LedgerEntry(id=1, message_id="m1", amount=Decimal(5)))
        register_claim(session, orm_app.inbox, "m1", CONSUMER)
        assert pending_claims(session) == [("m1", CONSUMER)]
    writes = [s for s in statements if s.lstrip().upper().startswith(("INSERT", "MERGE"))]
    assert orm_app.inbox.table.name in writes[0] and "orm_ledger" in writes[1]
    assert orm_rows(orm_app) == 1


def test_duplicate_aborts_the_flush_and_writes_nothing(orm_app: App) -> None:
    with orm_app.Session.begin() as session:
        register_claim(session, orm_app.inbox, "m1", CONSUMER)
        session.add(LedgerEntry(id=1, message_id="m1", amount=Decimal(5)))
    with pytest.raises(DuplicateMessage) as info, orm_app.Session.begin() as session:
        register_claim(session, orm_app.inbox, "m1", CONSUMER)
        session.add(LedgerEntry(id=2, message_id="m1", amount=Decimal(5)))
    assert (info.value.message_id, info.value.consumer_name) == ("m1", CONSUMER)
    assert orm_rows(orm_app) == 1


def deliver_core(app: App) -> None:
    with app.Session.begin() as session:
        register_claim(session, app.inbox, "m1", CONSUMER)
        app.apply_payment(session, "m1", 1, Decimal(7))  # Core DML through the session


def test_claim_is_emitted_before_core_dml_through_the_session(orm_app: App) -> None:
    deliver_core(orm_app)
    with pytest.raises(DuplicateMessage):
        deliver_core(orm_app)
    assert orm_app.ledger_rows() == 1
    assert orm_app.balance(1) == Decimal(7)


def test_claim_without_business_rows_is_emitted_at_commit(orm_app: App) -> None:
    with orm_app.Session.begin() as session:
        register_claim(session, orm_app.inbox, "m1", CONSUMER)
    assert orm_app.inbox_rows() == 1
    with pytest.raises(DuplicateMessage), orm_app.Session.begin() as session:
        register_claim(session, orm_app.inbox, "m1", CONSUMER)


def test_rollback_discards_pending_claims(orm_app: App) -> None:
    with orm_app.Session() as session:
        with pytest.raises(InboxError, match="begun transaction"):
            register_claim(session, orm_app.inbox, "m1", CONSUMER)
        session.begin()
        register_claim(session, orm_app.inbox, "m1", CONSUMER)
        session.rollback()
        assert pending_claims(session) == []
        session.commit()
    assert orm_app.inbox_rows() == 0


def test_not_installed_is_an_error(app: App) -> None:
    plain = sessionmaker(app.engine)
    with plain() as session, pytest.raises(ConfigurationError, match="not installed"):
        register_claim(session, app.inbox, "m1", CONSUMER)
    install(plain)
    uninstall(plain)
    with plain() as session, pytest.raises(ConfigurationError, match="not installed"):
        register_claim(session, app.inbox, "m1", CONSUMER)


def test_install_on_a_single_session(app: App) -> None:
    with Session(app.engine) as session:
        install(session)
        with session.begin():
            register_claim(session, app.inbox, "m1", CONSUMER)
    assert app.inbox_rows() == 1


# -- the handler runner --------------------------------------------------------------------


class Broker:
    """Records acks and nacks of one delivery."""

    def __init__(self) -> None:
        self.acks = 0
        self.nacks = 0

    def ack(self) -> None:
        self.acks += 1

    def nack(self) -> None:
        self.nacks += 1


def test_handle_processes_once_and_acks_duplicates(app: App) -> None:
    calls = 0

    def handler(session: Session) -> None:
        nonlocal calls
        calls += 1
        app.apply_payment(session, "m1", 1, Decimal(3))

    first, second = Broker(), Broker()
    result = handle(app.Session, app.inbox, "m1", CONSUMER, handler, ack=first.ack, nack=first.nack)
    assert result.outcome is Outcome.PROCESSED and (first.acks, first.nacks) == (1, 0)
    result = handle(
        app.Session, app.inbox, "m1", CONSUMER, handler, ack=second.ack, nack=second.nack
    )
    assert result.outcome is Outcome.DUPLICATE and (second.acks, second.nacks) == (1, 0)
    assert calls == 1
    assert app.ledger_rows() == 1 and app.balance(1) == Decimal(3)


def test_handle_failure_nacks_and_records_nothing(app: App) -> None:
    def failing(session: Session) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))
        raise ValueError("downstream said no")

    broker = Broker()
    result = handle(
        app.Session, app.inbox, "m1", CONSUMER, failing, ack=broker.ack, nack=broker.nack
    )
    assert result.outcome is Outcome.FAILED and isinstance(result.error, ValueError)
    assert (broker.acks, broker.nacks) == (0, 1)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0 and app.balance(1) == 0

    def working(session: Session) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))

    hand_over(app.inbox, app.engine, working)
    result = handle(
        app.Session, app.inbox, "m1", CONSUMER, working, ack=broker.ack, nack=broker.nack
    )
    assert result.outcome is Outcome.PROCESSED
    assert app.ledger_rows() == 1 and app.balance(1) == Decimal(3)


def test_handle_acks_only_after_commit(app: App) -> None:
    seen: list[int] = []

    def ack() -> None:
        seen.append(app.ledger_rows())  # read from another connection: committed state

    def handler(session: Session) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))

    handle(app.Session, app.inbox, "m1", CONSUMER, handler, ack=ack, nack=lambda: None)
    assert seen == [1]


def test_install_on_a_session_class(app: App) -> None:
    class AppSession(Session):
        pass

    install(AppSession)
    try:
        with AppSession(app.engine) as session, session.begin():
            register_claim(session, app.inbox, "m1", CONSUMER)
        assert app.inbox_rows() == 1
    finally:
        uninstall(AppSession)
    with AppSession(app.engine) as session, pytest.raises(InboxError, match="not installed"):
        register_claim(session, app.inbox, "m2", CONSUMER)


# -- savepoints, repeated registration, a caught duplicate -------------------------------


def _sqlite_savepoints(engine: sa.Engine) -> None:
    """SQLAlchemy's documented recipe for SAVEPOINT on pysqlite ("Serializable isolation /
    Savepoints / Transactional DDL"): the driver must not manage transactions itself."""
    if engine.dialect.name != "sqlite":
        return

    @sa.event.listens_for(engine, "connect")
    def connect(dbapi_connection: object, record: object) -> None:
        dbapi_connection.isolation_level = None  # type: ignore[attr-defined]

    @sa.event.listens_for(engine, "begin")
    def begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    engine.dispose()


def pay_with_savepoint(app: App, message_id: str, *, flush_in_savepoint: bool) -> None:
    with app.Session.begin() as session:
        register_claim(session, app.inbox, message_id, CONSUMER)
        with pytest.raises(ValueError), session.begin_nested():
            if flush_in_savepoint:
                session.add(LedgerEntry(id=None, message_id=message_id, amount=Decimal(1)))
                session.flush()  # the claim is emitted here, inside the savepoint
            raise ValueError("a failed optional step")
        session.add(LedgerEntry(message_id=message_id, amount=Decimal(5)))


@pytest.mark.parametrize("flush_in_savepoint", [False, True])
def test_savepoint_rollback_never_loses_the_claim(orm_app: App, flush_in_savepoint: bool) -> None:
    _sqlite_savepoints(orm_app.engine)
    pay_with_savepoint(orm_app, "m1", flush_in_savepoint=flush_in_savepoint)
    assert orm_app.inbox_rows() == 1 and orm_rows(orm_app) == 1
    with pytest.raises(DuplicateMessage):
        pay_with_savepoint(orm_app, "m1", flush_in_savepoint=flush_in_savepoint)
    assert orm_app.inbox_rows() == 1 and orm_rows(orm_app) == 1


def test_registering_twice_in_one_transaction_claims_once(orm_app: App) -> None:
    with orm_app.Session.begin() as session:
        register_claim(session, orm_app.inbox, "m1", CONSUMER)
        session.add(LedgerEntry(message_id="m1", amount=Decimal(5)))
        session.flush()
        register_claim(session, orm_app.inbox, "m1", CONSUMER)  # e.g. a retried step
        assert pending_claims(session) == []
    assert orm_app.inbox_rows() == 1 and orm_rows(orm_app) == 1


def test_a_caught_duplicate_still_refuses_the_commit(orm_app: App) -> None:
    with orm_app.Session.begin() as session:
        register_claim(session, orm_app.inbox, "m1", CONSUMER)
        session.add(LedgerEntry(message_id="m1", amount=Decimal(5)))
    with orm_app.Session() as session:
        session.begin()
        register_claim(session, orm_app.inbox, "m1", CONSUMER)
        session.add(LedgerEntry(message_id="m1", amount=Decimal(5)))
        with pytest.raises(DuplicateMessage):
            session.flush()
        with pytest.raises(DuplicateMessage):
            session.commit()  # the caller ignored the duplicate: refused
        session.rollback()
    assert orm_rows(orm_app) == 1


# -- the runner refuses a unit of work that ends its own transaction ----------------------


def test_handler_that_rolls_back_is_failed_and_nacked(app: App) -> None:
    def rolls_back(session: Session) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))
        session.rollback()

    broker = Broker()
    result = handle(
        app.Session, app.inbox, "m1", CONSUMER, rolls_back, ack=broker.ack, nack=broker.nack
    )
    assert result.outcome is Outcome.FAILED and isinstance(result.error, UnsafeTransaction)
    assert (broker.acks, broker.nacks) == (0, 1)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_handler_that_commits_is_refused_and_nothing_commits(app: App) -> None:
    def commits_half(session: Session) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))
        session.commit()
        app.apply_payment(session, "m1", 2, Decimal(3))

    broker = Broker()
    result = handle(
        app.Session, app.inbox, "m1", CONSUMER, commits_half, ack=broker.ack, nack=broker.nack
    )
    assert result.outcome is Outcome.FAILED and isinstance(result.error, UnsafeTransaction)
    assert (broker.acks, broker.nacks) == (0, 1)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0 and app.balance(1) == 0


def test_handler_may_use_savepoints(app: App) -> None:
    _sqlite_savepoints(app.engine)

    def with_savepoint(session: Session) -> None:
        with session.begin_nested():
            app.apply_payment(session, "m1", 1, Decimal(3))

    result = handle(
        app.Session, app.inbox, "m1", CONSUMER, with_savepoint, ack=lambda: None, nack=lambda: None
    )
    assert result.outcome is Outcome.PROCESSED
    assert app.inbox_rows() == 1 and app.balance(1) == Decimal(3)


def test_autocommit_is_refused(app: App) -> None:
    autocommit = app.engine.execution_options(isolation_level="AUTOCOMMIT")
    with autocommit.connect() as conn, pytest.raises(UnsafeTransaction, match="AUTOCOMMIT"):
        app.inbox.claim(conn, "m1", CONSUMER)
    failing = Broker()

    def fails(session: Session) -> None:
        app.apply_payment(session, "m1", 1, Decimal(3))
        raise ValueError("boom")

    # A configuration error: raised to the caller, neither acked nor nacked.
    with pytest.raises(AutocommitConnection, match="AUTOCOMMIT"):
        handle(
            sessionmaker(autocommit),
            app.inbox,
            "m1",
            CONSUMER,
            fails,
            ack=failing.ack,
            nack=failing.nack,
        )
    assert (failing.acks, failing.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_scoped_session_is_a_bind(app: App) -> None:
    from sqlalchemy.orm import scoped_session

    scoped = scoped_session(app.Session)
    try:
        with scoped.begin():
            assert app.inbox.claim(scoped, "m1", CONSUMER) is True
            assert app.inbox.claim(scoped, "m1", CONSUMER) is False
    finally:
        scoped.remove()
    assert app.inbox_rows() == 1


def test_handle_rejects_max_attempts_below_one(app: App) -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="max_attempts"):
        handle(
            app.Session,
            app.inbox,
            "m1",
            CONSUMER,
            lambda s: None,
            ack=lambda: None,
            nack=lambda: None,
            max_attempts=0,
        )
