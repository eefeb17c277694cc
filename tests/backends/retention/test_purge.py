"""The batched purge on real servers, on tables big enough to matter.

A million rows on PostgreSQL and MariaDB (100,000 on SQLite and Oracle), half of them older
than the retention window and interleaved with the other half in both key and time order.
The purge must delete exactly the expired half, in batches of at most ``batch_size`` rows,
while claims keep committing and while a second purger works on the same table.
"""

from __future__ import annotations

import datetime
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import Inbox, run_in_transaction
from sa_inbox.bench.purge import load_rows
from sa_inbox.exc import InvalidArgument, RetentionWindowTooShort
from sa_inbox.retention import Batch, RetentionPolicy, purge
from tests.conftest import backend_url
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

#: Window: 2 days + 7 days + 1 hour. Kept rows are at most 8 days old, expired ones at
#: least 10 days: a day of slack either side, so the test's own duration never matters.
POLICY = RetentionPolicy(
    max_redelivery=datetime.timedelta(days=2),
    max_replay=datetime.timedelta(days=7),
    margin=datetime.timedelta(hours=1),
)
BATCH = 5000
ROWS = {"postgresql": 1_000_000, "mysql": 1_000_000, "sqlite": 100_000, "oracle": 100_000}
TABLE = "retention_processed"


@dataclass
class Loaded:
    """A table of ``rows`` claims, ``rows // 2`` of them expired under :data:`POLICY`."""

    backend: str
    engine: sa.Engine
    inbox: Inbox
    rows: int

    @property
    def expired(self) -> int:
        return self.rows // 2

    def count(self, prefix: str | None = None) -> int:
        table = self.inbox.table
        query = sa.select(sa.func.count()).select_from(table)
        if prefix is not None:
            query = query.where(table.c.message_id.startswith(prefix))
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())


def _engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        return sa.create_engine(url, connect_args={"timeout": 60})
    return sa.create_engine(url, pool_size=5)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.slow),
        pytest.param("mysql", marks=pytest.mark.slow),
        pytest.param("oracle", marks=pytest.mark.slow),
    ]
)
def loaded(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[Loaded]:
    backend = request.param
    engine = _engine(backend_url(backend, tmp_path))
    metadata = sa.MetaData()
    inbox = Inbox(metadata, table_name=TABLE)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    started = time.perf_counter()
    load_rows(backend, engine, TABLE, ROWS[backend])
    loaded = Loaded(backend, engine, inbox, ROWS[backend])
    assert loaded.count() == loaded.rows
    assert loaded.count("old-") == loaded.expired
    _report(request, f"loaded {loaded.rows:,} rows in {time.perf_counter() - started:.1f} s")
    yield loaded
    metadata.drop_all(engine)
    engine.dispose()


def _report(request: pytest.FixtureRequest, line: str) -> None:
    """Print a measured figure even under output capture (figures are never asserted)."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # type: ignore[union-attr]
        print(f"\n    [{request.node.callspec.id}] {line}", flush=True)


def test_purge_deletes_every_expired_row_and_keeps_the_window(
    loaded: Loaded, request: pytest.FixtureRequest
) -> None:
    batches: list[Batch] = []
    started = time.perf_counter()
    deleted = purge(
        loaded.engine,
        older_than=POLICY,
        table=loaded.inbox,
        batch_size=BATCH,
        on_batch=batches.append,
    )
    elapsed = time.perf_counter() - started

    assert deleted == loaded.expired
    assert loaded.count("old-") == 0, "an expired row survived"
    assert loaded.count("keep-") == loaded.rows - loaded.expired, "a row inside the window went"
    assert loaded.count() == loaded.rows - loaded.expired
    # Short transactions: every batch holds at most BATCH rows, and they add up.
    assert all(0 < batch.rows <= BATCH for batch in batches)
    assert sum(batch.rows for batch in batches) == deleted
    assert len(batches) == -(-loaded.expired // BATCH)
    assert [batch.total for batch in batches][-1] == deleted
    # Nothing is left to purge.
    assert purge(loaded.engine, older_than=POLICY, table=loaded.inbox) == 0

    seconds = [batch.seconds for batch in batches]
    _report(
        request,
        f"purged {deleted:,} rows in {len(batches)} batches of <= {BATCH}: "
        f"{deleted / elapsed:,.0f} rows/s, longest batch {max(seconds) * 1000:.0f} ms, "
        f"median {statistics.median(seconds) * 1000:.0f} ms",
    )


@dataclass
class Timed:
    started: float = 0.0
    ended: float = 0.0
    deleted: int = 0
    batches: int = 0
    longest: float = 0.0


def test_two_purgers_and_claims_at_once(loaded: Loaded, request: pytest.FixtureRequest) -> None:
    """Two purgers on one table while a consumer keeps claiming new messages.

    No deadlock, no error, no row deleted twice (the two totals add up to exactly the
    expired rows), and claims commit during the purge's time span, not only after it.
    """
    barrier = threading.Barrier(3, timeout=60)
    purgers = [Timed(), Timed()]
    claim_commits: list[float] = []
    claim_waits: list[float] = []
    retries = [0]
    done = threading.Event()
    errors: list[BaseException] = []
    factory = sessionmaker(loaded.engine)

    def run_purger(index: int) -> None:
        timed = purgers[index]

        def on_batch(batch: Batch) -> None:
            timed.batches += 1
            timed.longest = max(timed.longest, batch.seconds)

        barrier.wait()
        timed.started = time.monotonic()
        timed.deleted = purge(
            loaded.engine,
            older_than=POLICY,
            table=loaded.inbox,
            batch_size=BATCH,
            on_batch=on_batch,
        )
        timed.ended = time.monotonic()

    def claim(session: Session, message_id: str) -> bool:
        retries[0] += 1
        return loaded.inbox.claim(session, message_id, CONSUMER)

    def run_claimer() -> None:
        barrier.wait()
        number = 0
        while not done.is_set() or number < 3:
            number += 1
            retries[0] -= 1
            started = time.monotonic()
            claimed = run_in_transaction(factory, lambda s, m=f"new-{number}": claim(s, m))
            assert claimed, f"new-{number} was not claimed"
            claim_commits.append(time.monotonic())
            claim_waits.append(claim_commits[-1] - started)

    def guarded(target: object, *args: object) -> None:
        try:
            target(*args)  # type: ignore[operator]
        except BaseException as exc:  # asserted on below
            errors.append(exc)
            done.set()

    threads = [
        threading.Thread(target=guarded, args=(run_purger, 0)),
        threading.Thread(target=guarded, args=(run_purger, 1)),
    ]
    claimer = threading.Thread(target=guarded, args=(run_claimer,))
    for thread in [*threads, claimer]:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    done.set()
    claimer.join(timeout=60)
    assert not any(t.is_alive() for t in [*threads, claimer]), "a purger or the claimer hung"
    assert not errors, errors

    assert purgers[0].deleted + purgers[1].deleted == loaded.expired, "double or missed count"
    assert loaded.count("old-") == 0
    assert loaded.count("keep-") == loaded.rows - loaded.expired
    assert loaded.count("new-") == len(claim_commits)
    span = (min(p.started for p in purgers), max(p.ended for p in purgers))
    during = [t for t in claim_commits if span[0] <= t <= span[1]]
    assert during, "no claim committed while the purge ran: the purge blocked the claims"

    _report(
        request,
        f"two purgers deleted {purgers[0].deleted:,} + {purgers[1].deleted:,} rows in "
        f"{span[1] - span[0]:.1f} s (batches {purgers[0].batches} + {purgers[1].batches}, "
        f"longest {max(p.longest for p in purgers) * 1000:.0f} ms); {len(during)} claims "
        f"committed meanwhile, longest claim {max(claim_waits) * 1000:.0f} ms, "
        f"{retries[0]} retried",
    )


# -- the window -------------------------------------------------------------------------

AMOUNT = Decimal("10.00")


def _set_age(app: App, message_id: str, age: datetime.timedelta) -> None:
    table = app.inbox.table
    with app.engine.begin() as conn:
        now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
        conn.execute(
            table.update().where(table.c.message_id == message_id).values(received_at=now - age)
        )


def _deliver(app: App, message_id: str) -> bool:
    with app.Session.begin() as session:
        claimed = app.inbox.claim(session, message_id, CONSUMER)
        if claimed:
            app.apply_payment(session, message_id, 1, AMOUNT)
        return claimed


def test_redelivery_just_inside_the_window_is_still_a_duplicate(app: App) -> None:
    """Purge, then redeliver a message processed just inside the window: still skipped."""
    assert _deliver(app, "pay-inside") and _deliver(app, "pay-outside")
    _set_age(app, "pay-inside", POLICY.window - datetime.timedelta(minutes=5))
    _set_age(app, "pay-outside", POLICY.window + datetime.timedelta(minutes=5))

    assert purge(app.engine, older_than=POLICY, table=app.inbox) == 1

    assert _deliver(app, "pay-inside") is False, "a redelivery inside the window was processed"
    assert app.ledger_rows("pay-inside") == 1
    assert app.balance(1) == 2 * AMOUNT
    assert app.inbox_rows() == 1
    with app.engine.connect() as conn:
        assert not app.inbox.is_processed(conn, "pay-outside", CONSUMER)


def test_a_window_inside_the_policy_is_refused_and_deletes_nothing(app: App) -> None:
    assert _deliver(app, "pay-1")
    _set_age(app, "pay-1", datetime.timedelta(days=3))
    too_short = POLICY.window - datetime.timedelta(seconds=1)

    with pytest.raises(RetentionWindowTooShort, match="max_redelivery \\+ max_replay") as info:
        purge(app.engine, older_than=too_short, policy=POLICY, table=app.inbox)
    assert info.value.minimum == POLICY.window
    with pytest.raises(InvalidArgument, match="needs policy="):
        purge(app.engine, older_than=datetime.timedelta(days=1), table=app.inbox)
    with pytest.raises(InvalidArgument, match="batch_size"):
        purge(app.engine, older_than=POLICY, table=app.inbox, batch_size=0)
    with app.engine.connect() as conn:
        conn.execute(sa.select(1))
        with pytest.raises(InvalidArgument, match="not in a transaction"):
            purge(conn, older_than=POLICY, table=app.inbox)
    assert app.inbox_rows() == 1
    assert app.ledger_rows("pay-1") == 1

    # A longer window than the policy's is allowed, and a Connection outside a transaction.
    _set_age(app, "pay-1", datetime.timedelta(days=40))
    with app.engine.connect() as conn:
        deleted = purge(
            conn, older_than=datetime.timedelta(days=30), policy=POLICY, table=app.inbox
        )
    assert deleted == 1
    assert app.inbox_rows() == 0


def test_a_batch_of_rows_inside_the_window_never_stalls_the_purge(app: App) -> None:
    """The first rows in key and insertion (physical) order are all inside the window.

    A batch limited before the cut-off is applied (Oracle's ``ROWNUM`` outside the
    condition, a limited subquery without the cut-off) would pick those rows, delete
    nothing and stop the purge with expired rows left. The time-ordered forms cannot pick
    them; the unordered one (Oracle) can, and runs this test when its server is set.
    """
    table = app.inbox.table
    with app.engine.begin() as conn:
        now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
        rows = [
            {"message_id": f"a-{i:03}", "consumer_name": CONSUMER, "received_at": now}
            for i in range(30)
        ] + [
            {
                "message_id": f"z-{i:03}",
                "consumer_name": CONSUMER,
                "received_at": now - POLICY.window - datetime.timedelta(days=1, seconds=i),
            }
            for i in range(25)
        ]
        conn.execute(table.insert(), rows)

    batches: list[Batch] = []
    assert (
        purge(
            app.engine, older_than=POLICY, table=app.inbox, batch_size=10, on_batch=batches.append
        )
        == 25
    )
    assert [b.rows for b in batches] == [10, 10, 5]
    assert app.inbox_rows() == 30


def test_purge_by_a_second_engine_on_a_separate_url(tmp_path: object) -> None:
    """The default table name and a fresh engine: what the CLI does."""
    engine = _engine(backend_url("sqlite", tmp_path))
    metadata = sa.MetaData()
    inbox = Inbox(metadata)
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            inbox.table.insert(),
            [
                {
                    "message_id": "m",
                    "consumer_name": "c",
                    "received_at": datetime.datetime(2000, 1, 1),
                }
            ],
        )
    assert purge(engine, older_than=POLICY) == 1
    engine.dispose()
