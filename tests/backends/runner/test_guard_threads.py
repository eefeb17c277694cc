"""The transaction guard's listeners and other threads' commits, on every backend."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import (
    Outcome,
    handle,
    install,
    register_claim,
)
from tests.backends.runner.test_guarantee import Broker
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


def pay(app: App, message_id: str = "m1") -> object:
    def apply(session: Session) -> None:  # a function: a lambda cannot own a consumer name
        app.apply_payment(session, message_id, 1, Decimal(3))

    return apply


def test_the_guard_never_disturbs_other_threads_commits(app: App) -> None:
    """Each new sessionmaker is a new Session class. The guard's listeners are installed
    once, at import: adding them at a class's first handle() while other threads' commits
    (here through the session extension, as the README shows) fire the same event would fail
    those commits ('deque mutated during iteration')."""
    import itertools
    import threading

    errors: list[BaseException] = []
    counter = itertools.count()
    # SQLite takes one writer at a time: each handle() waits behind the three threads'
    # commits (about 0.5 s), and the listeners' race is the same Python on every backend
    iterations = 10 if app.engine.dialect.name == "sqlite" else 40
    for iteration in range(iterations):
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
    assert app.ledger_rows() == iterations


def deliver_with(app: App, factory: sessionmaker[Session], message_id: str) -> tuple[Any, Broker]:
    broker = Broker()
    result = handle(factory, app.inbox, message_id, CONSUMER, pay(app, message_id),
                    ack=broker.ack, nack=broker.nack)  # fmt: skip
    return result, broker
