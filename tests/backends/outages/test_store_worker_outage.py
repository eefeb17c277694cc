"""The inbox store's Worker holding a batch through a database outage (PostgreSQL, MariaDB,
SIGKILLed and restarted): no message of the batch is leased again, no attempt counted.

The outage gate of a worker is shared by its threads, and each thread waits its own
jittered back-off between probes. Here the thread holding the batch waits long, the other
one short (:class:`HolderWaitsLong`): the other thread finds the database back first, and
the batch's leases (taken before the outage, older than the visibility timeout by then) look
abandoned. The worker must neither take them over nor leave them to be taken over: every
row ends ``done`` with ``attempts == 1`` and one ledger row per message.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox import InboxStore, Worker
from sa_inbox.backoff import Backoff
from sa_inbox.store import DONE, StoredMessage
from tests.conftest import URL_VARIABLES
from tests.support.app import App
from tests.support.db_outage import servers_sh

pytestmark = [pytest.mark.backend, pytest.mark.slow]

MESSAGES = 4
#: The worker's visibility timeout, and the outage: longer, so the batch's leases run out.
VISIBILITY = 2.0
OUTAGE = 2 * VISIBILITY + 1.0
#: Seconds the holder's back-off waits between probes: longer than the rest of the test
#: would take if it were cut short by nothing.
HOLDER_WAIT = 4 * VISIBILITY


class HolderWaitsLong(Backoff):
    """The outage back-off: :data:`HOLDER_WAIT` for the thread that holds the batch, 0.2 s
    for every other thread."""

    def __init__(self, holder: list[str]) -> None:
        super().__init__(base=0.2, maximum=HOLDER_WAIT)
        object.__setattr__(self, "holder", holder)

    def jittered(
        self, attempts: int, uniform: Callable[[float, float], float] = random.uniform
    ) -> float:
        holder: list[str] = self.holder  # type: ignore[attr-defined]
        return HOLDER_WAIT if threading.current_thread().name in holder else 0.2


@pytest.mark.parametrize("database", ["postgresql", "mysql"])
def test_a_batch_held_through_an_outage_costs_no_attempt(
    database: str, server_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = sa.create_engine(os.environ[URL_VARIABLES[database]])
    app = App(engine)
    store = InboxStore(app.metadata, table_name="outage_store", consumers=False)
    app.reset()
    in_handler, killed = threading.Event(), threading.Event()
    holder: list[str] = []

    def handler(session: Session, message: StoredMessage) -> None:
        if not holder:  # the first message: the database dies under it
            holder.append(threading.current_thread().name)
            in_handler.set()
            killed.wait(30)
        app.apply_payment(session, message.message_id, 1, Decimal(1))

    try:
        with engine.begin() as conn:
            for n in range(MESSAGES):
                store.receive(conn, f"m-{n}", {"n": n})
        worker = Worker(
            store.bind(engine),
            handler,
            concurrency=2,
            batch_size=MESSAGES,
            poll_interval=0.1,
            visibility_timeout=VISIBILITY,
        )
        worker.outage.backoff = HolderWaitsLong(holder)
        summary: list[Any] = []
        runner = threading.Thread(
            target=lambda: summary.append(worker.run(handle_signals=False)), daemon=True
        )
        with caplog.at_level("INFO", logger="sa_inbox"):
            runner.start()
            assert in_handler.wait(30), "the batch was not leased"
            servers_sh("kill", str(server_dir), database)
            killed.set()
            time.sleep(OUTAGE)
            servers_sh("restart", str(server_dir), database)
            deadline = time.monotonic() + HOLDER_WAIT + 30
            while app.ledger_rows() < MESSAGES and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(2 * VISIBILITY)  # a takeover, if any, would come by now
            worker.stop()
            runner.join(30)
        t = store.table
        with engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.message_id, t.c.status, t.c.attempts)).all()
        assert sorted(rows) == [(f"m-{n}", DONE, 1) for n in range(MESSAGES)]
        assert app.ledger_rows() == MESSAGES and app.balance(1) == Decimal(MESSAGES)
        assert not [r for r in caplog.records if "lease lost" in r.getMessage()]
        assert summary and summary[0].lost == 0 and summary[0].retried == 0
    finally:
        app.drop()
        engine.dispose()
