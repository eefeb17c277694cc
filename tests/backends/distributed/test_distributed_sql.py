"""CockroachDB and YugabyteDB live, and YugabyteDB's SQL on a real PostgreSQL.

No CockroachDB or YugabyteDB server can be installed here (no Docker, no packages): their
live runs need ``SA_INBOX_TEST_COCKROACHDB_URL`` (``cockroachdb+psycopg://…``, the
``sa-inbox[cockroachdb]`` extra) or ``SA_INBOX_TEST_YUGABYTEDB_URL``
(``postgresql+psycopg://…:5433/yugabyte``) and are skipped without them, in CI too, as
Oracle's are.

What runs here instead, on the suite's real PostgreSQL: a server whose ``version()`` says
``-YB-`` (PostgreSQL with a ``version()`` function placed before ``pg_catalog`` on the
search path) is recognised as YugabyteDB by :func:`sa_inbox.dialects.backend_of`, and the
YugabyteDB purge (by primary key, no ``ctid``) deletes exactly the expired claims. That
proves the recognition and that the SQL runs on PostgreSQL's grammar, not YugabyteDB's
behaviour.

Each scenario asserts business state: ledger rows, balances, inbox rows.
"""

from __future__ import annotations

import datetime
import functools
import os
import threading
from collections.abc import Iterator
from decimal import Decimal

import pytest
import sqlalchemy as sa

from sa_inbox import Outcome, RetentionPolicy, handle, purge
from sa_inbox.dialects import backend_of
from sa_inbox.dialects.cockroachdb import CockroachDBPurge
from sa_inbox.dialects.yugabytedb import YugabyteDBPurge
from tests.conftest import backend_url
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

URL_VARIABLES = {
    "cockroachdb": "SA_INBOX_TEST_COCKROACHDB_URL",
    "yugabytedb": "SA_INBOX_TEST_YUGABYTEDB_URL",
}
#: The purge each server must get from backend_of.
PURGES = {"cockroachdb": CockroachDBPurge, "yugabytedb": YugabyteDBPurge}
#: SERIALIZABLE / Snapshot: 40001 retries are the normal path under contention.
MAX_ATTEMPTS = 20
AMOUNT = Decimal("10.00")
PROBE_SCHEMA = "sa_inbox_yb_probe"
#: A 10-day window (the old claims are 30 days old, the fresh ones seconds).
POLICY = RetentionPolicy(
    max_redelivery=datetime.timedelta(days=3), max_replay=datetime.timedelta(days=7)
)
YB_VERSION = "PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64-pc-linux-gnu"


def live_url(name: str) -> str:
    url = os.environ.get(URL_VARIABLES[name])
    if not url:
        pytest.skip(f"{URL_VARIABLES[name]} is not set; no {name} server here (none can be)")
    return url


@pytest.fixture
def posing_as_yugabytedb(tmp_path: object) -> Iterator[sa.Engine]:
    """The suite's PostgreSQL, whose unqualified ``version()`` answers YugabyteDB's string."""
    url = backend_url("postgresql", tmp_path)
    plain = sa.create_engine(url)
    with plain.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {PROBE_SCHEMA} CASCADE")
        conn.exec_driver_sql(f"CREATE SCHEMA {PROBE_SCHEMA}")
        conn.exec_driver_sql(
            f"CREATE FUNCTION {PROBE_SCHEMA}.version() RETURNS text LANGUAGE sql "
            f"AS $$ SELECT '{YB_VERSION}'::text $$"
        )
    engine = sa.create_engine(
        url,
        pool_size=10,
        connect_args={"options": f"-c search_path={PROBE_SCHEMA},pg_catalog"},
    )
    try:
        yield engine
    finally:
        engine.dispose()
        with plain.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {PROBE_SCHEMA} CASCADE")
        plain.dispose()


def concurrent_payments(engine: sa.Engine, threads: int = 6, messages: int = 10) -> App:
    """``threads`` threads released at a barrier deliver the same ``messages`` payments."""
    app = App(engine)
    app.reset()
    barrier = threading.Barrier(threads)
    outcomes: list[Outcome] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait(30)
        for i in range(messages):
            result = handle(
                app.Session,
                app.inbox,
                f"m-{i}",
                CONSUMER,
                functools.partial(
                    app.apply_payment, message_id=f"m-{i}", account_id=1, amount=AMOUNT
                ),
                ack=lambda: None,
                nack=lambda: None,
                max_retries=MAX_ATTEMPTS - 1,
            )
            with lock:
                outcomes.append(result.outcome)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(120)
    assert outcomes.count(Outcome.PROCESSED) == messages
    assert outcomes.count(Outcome.DUPLICATE) == messages * (threads - 1)
    assert (app.ledger_rows(), app.balance(1), app.inbox_rows()) == (
        messages,
        AMOUNT * messages,
        messages,
    )
    return app


def purge_expired(app: App) -> None:
    """20 claims 30 days old and the payments' fresh ones: the purge deletes the old ones
    only, in batches of 7."""
    table = app.inbox.table
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    with app.engine.begin() as conn:
        conn.execute(
            table.insert(),
            [
                {"message_id": f"old-{i}", "consumer_name": CONSUMER, "received_at": old}
                for i in range(20)
            ],
        )
    fresh = app.inbox_rows() - 20
    batches: list[int] = []
    deleted = purge(
        app.engine,
        older_than=POLICY,
        table=app.inbox,
        batch_size=7,
        on_batch=lambda batch: batches.append(batch.rows),
    )
    assert deleted == 20 and max(batches) <= 7 and len(batches) >= 3
    assert app.inbox_rows() == fresh
    assert app.ledger_rows() == fresh  # the business rows are never touched


@pytest.mark.parametrize("name", sorted(URL_VARIABLES))
def test_live_server(name: str) -> None:
    engine = sa.create_engine(live_url(name), pool_size=10)
    try:
        with engine.connect() as conn:
            assert type(backend_of(conn).purge) is PURGES[name]
        app = concurrent_payments(engine)
        try:
            purge_expired(app)
        finally:
            app.drop()
    finally:
        engine.dispose()


def test_a_postgresql_posing_as_yugabytedb_gets_and_runs_its_sql(
    posing_as_yugabytedb: sa.Engine,
) -> None:
    with posing_as_yugabytedb.connect() as conn:
        assert conn.exec_driver_sql("SELECT version()").scalar() == YB_VERSION
        assert type(backend_of(conn).purge) is YugabyteDBPurge
    app = concurrent_payments(posing_as_yugabytedb)
    sent: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(statement)

    sa.event.listen(posing_as_yugabytedb, "before_cursor_execute", record)
    try:
        purge_expired(app)
    finally:
        sa.event.remove(posing_as_yugabytedb, "before_cursor_execute", record)
        app.drop()
    deletes = [s for s in sent if s.lstrip().upper().startswith("DELETE")]
    assert len(deletes) >= 3
    assert all("ctid" not in s and "FOR UPDATE SKIP LOCKED" in s for s in deletes)
