"""A failed handler cannot damage the connection it leaves behind: the sync runner and the
store's worker, with a raw DBAPI cursor left unfinished, on each backend.

Each scenario runs on a pool of ONE connection, so the messages after the failed one get
the very connection its handler used: the failed one is FAILED with the handler's own error
(or a dead row), then 100 good messages are all processed, the ledger holds exactly their
rows and the claims table (or the store) their claims, and a second connection can take an
exclusive lock on both tables (nothing is left holding one).

* psycopg: a ``cursor.stream()`` or a ``COPY`` left open holds the connection's lock, and
  the driver reports the command in progress (``PQTRANS_ACTIVE``). Before, the runner's
  rollback waited on that lock for ever (the worker hung); now the connection is
  invalidated instead of rolled back, and the pool opens a new one.
* PyMySQL: an unbuffered result left unread is read to its end by the driver before the
  rollback (with its warning); the connection is kept.
* SQLite: a cursor left mid-result is reset by the rollback; the connection is kept.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox import InboxStore, Outcome, Result, Worker, handle, pool_guard
from sa_inbox.store import Incoming, StoredMessage
from tests.conftest import backend_url
from tests.support.app import CONSUMER, App
from tests.support.locks import assert_no_lock_held
from tests.support.pool import ONE_CONNECTION, count_connects

pytestmark = pytest.mark.backend

T = TypeVar("T")

#: Good messages delivered after the failed one.
GOOD = 100
#: Seconds a run may take before the test calls it hung (a rollback waiting for ever).
HUNG_AFTER = 60.0
#: Rows the raw statements return (many more than any driver buffers in one read).
ROWS = 100_000


def stream_left_open(cursor: Any) -> object:
    """psycopg: a streamed result read one row in (the generator holds the lock)."""
    rows = cursor.stream(f"SELECT generate_series(1, {ROWS})")
    next(rows)
    return rows


def copy_left_open(cursor: Any) -> object:
    """psycopg: ``COPY … FROM STDIN`` entered and never finished."""
    copy = cursor.copy("COPY ledger (message_id, account_id, amount) FROM STDIN")
    writer = copy.__enter__()
    writer.write_row(("bad", 1, 1))
    return copy  # the context manager: freeing it would end the COPY


def unbuffered_left_unread(cursor: Any) -> object:
    """PyMySQL: an ``SSCursor`` (unbuffered) result read one row in."""
    cursor.execute(f"SELECT seq FROM seq_1_to_{ROWS}")
    return cursor.fetchone()


def cursor_left_mid_result(cursor: Any) -> object:
    """sqlite3: a result read one row in."""
    cursor.execute(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
        f"LIMIT {ROWS}) SELECT x FROM c"
    )
    return cursor.fetchone()


#: (backend, what the handler leaves, whether the connection is invalidated).
DAMAGE: dict[str, tuple[str, Callable[[Any], object], bool]] = {
    "psycopg-stream": ("postgresql", stream_left_open, True),
    "psycopg-copy": ("postgresql", copy_left_open, True),
    "pymysql-unbuffered": ("mysql", unbuffered_left_unread, False),
    "sqlite-cursor": ("sqlite", cursor_left_mid_result, False),
}


@pytest.fixture(params=list(DAMAGE))
def damage(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def app(damage: str, tmp_path: object) -> Iterator[App]:
    """The accounts/ledger schema and the inbox table on a pool of one connection (no
    consumers table: the damaging handler and the good one take turns under one name)."""
    engine = sa.create_engine(backend_url(DAMAGE[damage][0], tmp_path), **ONE_CONNECTION)
    app = App(engine, consumers=False)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


def damaging_handler(app: App, damage: str) -> Callable[[Session], None]:
    """Writes the bad row, leaves the raw cursor as :data:`DAMAGE` says, then raises (what
    it left is a local of its frame, kept by the error's traceback)."""
    _, leave, _ = DAMAGE[damage]

    def handler(session: Session) -> None:
        app.apply_payment(session, "bad", 1, Decimal(1))
        dbapi_connection = session.connection().connection.dbapi_connection
        if damage == "pymysql-unbuffered":
            import pymysql.cursors

            cursor = dbapi_connection.cursor(pymysql.cursors.SSCursor)
        else:
            cursor = dbapi_connection.cursor()
        left = leave(cursor)  # noqa: F841 (kept alive, as a handler's local is)
        raise LookupError("the lookup failed")

    return handler


def within(seconds: float, fn: Callable[[], T]) -> T:
    """``fn()`` in a daemon thread, failing the test if it has not returned in ``seconds``."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # re-raised in the test's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"hung: still running after {seconds} s"
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def deliver(app: App, message_id: str, handler: Callable[[Session], None]) -> Result:
    return handle(
        app.Session, app.inbox, message_id, CONSUMER, handler, ack=lambda: None, nack=lambda: None
    )


def deliver_good(app: App) -> Counter[Outcome]:
    outcomes: Counter[Outcome] = Counter()
    for i in range(GOOD):
        message_id = f"m{i}"

        def pay(session: Session, message_id: str = message_id) -> None:
            app.apply_payment(session, message_id, 1, Decimal(1))

        outcomes[deliver(app, message_id, pay).outcome] += 1
    return outcomes


def assert_only_the_good_messages(app: App, *tables: sa.Table) -> None:
    with app.engine.connect() as conn:
        ids = conn.execute(sa.select(app.ledger.c.message_id)).scalars().all()
    assert sorted(ids) == sorted(f"m{i}" for i in range(GOOD))
    assert app.balance(1) == GOOD
    assert_no_lock_held(app.engine, app.ledger, *tables)


def invalidations(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.state for r in caplog.records if r.name == pool_guard.__name__]  # type: ignore[attr-defined]


@pytest.mark.filterwarnings("ignore:Previous unbuffered result was left incomplete")
def test_a_raw_cursor_left_unfinished_through_handle(
    app: App, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    with app.engine.connect():
        pass  # the pool's one connection, opened before counting
    opened = count_connects(app.engine)
    with caplog.at_level(logging.WARNING, logger=pool_guard.__name__):
        failed = within(HUNG_AFTER, lambda: deliver(app, "bad", damaging_handler(app, damage)))
    assert failed.outcome is Outcome.FAILED
    assert isinstance(failed.error, LookupError), failed.error  # the handler's own error
    invalidated = DAMAGE[damage][2]
    assert invalidations(caplog) == (["busy"] if invalidated else [])
    assert within(HUNG_AFTER, lambda: deliver_good(app)) == Counter({Outcome.PROCESSED: GOOD})
    assert len(opened) == (1 if invalidated else 0)
    assert app.inbox_rows() == GOOD
    assert_only_the_good_messages(app, app.inbox.table)


@pytest.mark.filterwarnings("ignore:Previous unbuffered result was left incomplete")
def test_the_worker_after_a_raw_cursor_left_unfinished(app: App, damage: str) -> None:
    store = InboxStore(app.metadata, consumers=False)
    store.table.create(app.engine)
    with app.Session.begin() as session:
        incoming = [Incoming("bad", {})] + [Incoming(f"m{i}", {}) for i in range(GOOD)]
        store.receive_many(session, incoming, consumer_name=CONSUMER)
    damaged = damaging_handler(app, damage)

    def handler(session: Session, message: StoredMessage) -> None:
        if message.message_id == "bad":
            damaged(session)
        else:
            app.apply_payment(session, message.message_id, 1, Decimal(1))

    worker = Worker(
        store.bind(app.engine),
        handler,
        consumer_name=CONSUMER,
        batch_size=10,
        max_attempts=1,
        poll_interval=0.05,
    )
    summary = within(HUNG_AFTER, lambda: worker.run(until_empty=True, handle_signals=False))
    assert summary.processed == GOOD and summary.reason == "empty", summary
    counts = store.counts(app.engine, CONSUMER)
    assert counts["done"] == GOOD and counts["dead"] == 1, counts
    assert_only_the_good_messages(app, store.table)
    store.table.drop(app.engine)
