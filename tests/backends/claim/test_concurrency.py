"""Concurrent deliveries on real servers: threads held at a barrier, isolation-level losers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import TransientClaimError, run_in_transaction
from tests.conftest import backend_url
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

AMOUNT = Decimal("25.00")
HOLD = 0.5  # seconds the winner keeps its transaction open after claiming


def run_threads(count: int, target: object) -> list[object]:
    """Run ``target(index)`` in ``count`` real threads; return results or exceptions."""
    results: list[object] = [None] * count

    def runner(index: int) -> None:
        try:
            results[index] = target(index)  # type: ignore[operator]
        except BaseException as exc:  # collected and asserted on by the test
            results[index] = exc

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a delivery hung"
    return results


@pytest.mark.parametrize("strategy", ["native", "savepoint"])
def test_concurrent_duplicate_exactly_one_commits(engine: sa.Engine, strategy: str) -> None:
    app = App(engine, strategy=strategy)
    app.reset()
    deliveries = 4
    barrier = threading.Barrier(deliveries, timeout=30)
    committed_at: list[float] = []

    def deliver(index: int) -> tuple[bool, float]:
        with app.Session.begin() as session:
            session.connection()  # connect before the barrier, so all claims start together
            barrier.wait()
            claimed = app.inbox.claim(session, "pay-1", CONSUMER)
            returned = time.monotonic()
            if claimed:
                app.apply_payment(session, "pay-1", 1, AMOUNT)
                time.sleep(HOLD)  # the others must wait for this commit
        if claimed:
            committed_at.append(time.monotonic())
        return claimed, returned

    results = run_threads(deliveries, deliver)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    outcomes = [r for r in results if isinstance(r, tuple)]
    assert sorted(c for c, _ in outcomes) == [False, False, False, True]
    # The losers were held by the winner's lock and skipped only after its commit.
    winner_claimed = next(t for c, t in outcomes if c)
    for claimed, returned in outcomes:
        if not claimed:
            assert returned >= winner_claimed + HOLD * 0.9
    assert app.ledger_rows("pay-1") == 1
    assert app.balance(1) == AMOUNT
    assert app.inbox_rows() == 1
    app.drop()


ISOLATION = {"sqlite": ["SERIALIZABLE"], "postgresql": ["REPEATABLE READ", "SERIALIZABLE"]}
ISOLATION["mysql"] = ISOLATION["postgresql"]
ISOLATION["oracle"] = ["SERIALIZABLE"]


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_snapshot_loser_is_transient_and_succeeds_on_retry(app: App, level: str) -> None:
    """A delivery whose snapshot predates another delivery's commit of the same message.

    PostgreSQL (and Oracle) abort it with a serialization failure, surfaced as
    TransientClaimError, and the retry sees the duplicate. InnoDB's unique check reads the
    latest committed row, so MariaDB skips it as a duplicate at once; Python's sqlite3 starts
    the transaction only at the first write, so SQLite has no earlier snapshot and skips it
    too. Either way the payment is applied exactly once.
    """
    name = app.engine.dialect.name
    if level not in ISOLATION.get(name, []):
        level = ISOLATION[name][0]
    engine = app.engine.execution_options(isolation_level=level)
    factory = sessionmaker(engine)
    failures: list[BaseException] = []
    attempts = 0

    def other_delivery_commits() -> None:
        with app.engine.begin() as conn:
            assert app.inbox.claim(conn, "pay-1", CONSUMER)
            app.apply_payment(conn, "pay-1", 1, AMOUNT)

    def work(session: Session) -> bool:
        nonlocal attempts
        attempts += 1
        # The snapshot starts here; a row the other delivery does not write, so that
        # SERIALIZABLE's shared read locks (InnoDB) do not block it.
        session.execute(sa.select(app.accounts.c.balance).where(app.accounts.c.id == 3)).one()
        if attempts == 1:
            other_delivery_commits()
        try:
            claimed = app.inbox.claim(session, "pay-1", CONSUMER)
        except TransientClaimError as exc:
            failures.append(exc)
            raise
        if claimed:
            app.apply_payment(session, "pay-1", 1, AMOUNT)
        return claimed

    assert run_in_transaction(factory, work, sleep=lambda _: None) is False
    assert app.ledger_rows("pay-1") == 1
    assert app.balance(1) == AMOUNT
    if name in ("postgresql", "oracle"):
        assert attempts == 2 and len(failures) == 1
        assert failures[0].__cause__ is not None
    else:
        assert attempts == 1 and not failures


@pytest.fixture(params=["postgresql", "mysql"])
def server_app(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[App]:
    engine = sa.create_engine(backend_url(request.param, tmp_path), pool_size=5)
    app = App(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


def test_deadlocked_unit_of_work_is_retried(server_app: App) -> None:
    """Two payments that lock two accounts in opposite order: one deadlocks, is retried."""
    app = server_app
    barrier = threading.Barrier(2, timeout=30)
    attempts = [0, 0]

    def pay(index: int) -> bool:
        first, second = (1, 2) if index == 0 else (2, 1)
        message_id = f"transfer-{index}"

        def work(session: Session) -> bool:
            attempts[index] += 1
            if not app.inbox.claim(session, message_id, CONSUMER):
                return False
            app.apply_payment(session, message_id, first, AMOUNT)
            if attempts[index] == 1:
                barrier.wait()  # both hold their first account now
            app.apply_payment(session, message_id, second, -AMOUNT)
            return True

        return run_in_transaction(app.Session, work, sleep=lambda _: None)

    results = run_threads(2, pay)
    assert results == [True, True], results
    assert sum(attempts) == 3, "exactly one of the two was a deadlock victim and retried"
    assert app.ledger_rows() == 4
    assert app.balance(1) == Decimal(0) and app.balance(2) == Decimal(0)
    assert app.inbox_rows() == 2
