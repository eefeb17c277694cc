"""The claim sent with its transaction's ``BEGIN`` (psycopg 3): one round trip, same claim.

Round trips are counted on the wire, from libpq's own trace of the connection (``PQtrace``:
every protocol message the client sends, ``F``, and receives, ``B``, in order): each run of
messages the client sends before reading an answer is one round trip. The guarantee tests
of the claim (duplicates sequential and at a barrier, the crash between commit and ack, the
guard, the session extension, the misuse matrix) run on this path already, since it is the
default on psycopg 3; the tests here prove that it is the path taken, and what is particular
to it: the values stay bound, the error path, the connection's state after it.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import Inbox, InboxStore, Outcome, handle, install, register_claim
from sa_inbox.asyncio import AsyncInbox
from sa_inbox.claim import statement_rowcount
from sa_inbox.dialects.base import sqlstate_of
from sa_inbox.exc import InvalidArgument, MissingTable, TransientClaimError
from tests.conftest import backend_url
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

psycopg = pytest.importorskip("psycopg")

AMOUNT = Decimal("5.00")
#: Ids a careless text substitution would break or turn into SQL.
AWKWARD_IDS = [
    "it's",
    "back\\slash\\",
    "semi;colon; DROP TABLE ledger; --",
    "$1 $2 %s %(x)s ?",
    "quote''doubled\"and\"dq",
    "ünïcödé-日本語-😀",
    "line\nbreak\ttab",
]


@pytest.fixture
def pg_engine(tmp_path: Path) -> Iterator[sa.Engine]:
    url = sa.make_url(backend_url("postgresql", tmp_path))
    if url.get_driver_name() != "psycopg":
        pytest.skip("the claim goes with BEGIN on psycopg 3 only")
    engine = sa.create_engine(url, pool_size=4, max_overflow=4)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_app(pg_engine: sa.Engine) -> Iterator[App]:
    app = App(pg_engine)
    app.reset()
    yield app
    app.drop()


class Wire:
    """libpq's trace of one psycopg connection, read back as round trips."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def traced(self, driver_connection: Any) -> Iterator[None]:
        with self.path.open("w") as sink:
            driver_connection.pgconn.trace(sink.fileno())
            driver_connection.pgconn.set_trace_flags(
                psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE
            )
            try:
                yield
            finally:
                driver_connection.pgconn.untrace()

    @contextmanager
    def checkouts(self, engine: sa.Engine) -> Iterator[None]:
        """Trace every connection ``engine``'s pool checks out meanwhile."""
        traced: list[Any] = []

        def trace(dbapi_connection: Any, record: Any, proxy: Any) -> None:
            traced.append(dbapi_connection)
            dbapi_connection.pgconn.trace(sink.fileno())
            dbapi_connection.pgconn.set_trace_flags(
                psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE
            )

        with self.path.open("w") as sink:
            event.listen(engine, "checkout", trace)
            try:
                yield
            finally:
                event.remove(engine, "checkout", trace)
                for dbapi_connection in traced:
                    dbapi_connection.pgconn.untrace()

    def round_trips(self) -> list[list[str]]:
        """Per round trip, what the client sent: ``Parse`` and ``Query`` messages with the
        statement's first word, and ``Bind`` to one of sa-inbox's prepared statements as
        ``Bind sa_inbox``."""
        trips: list[list[str]] = []
        sending = False
        for line in self.path.read_text().splitlines():
            if not line.startswith(("F\t", "B\t")):
                continue  # the rest of a statement of several lines
            direction, _, kind, *more = line.split("\t", 3)
            rest = more[0] if more else ""
            if direction == "B":
                sending = False
                continue
            if not sending:
                trips.append([])
                sending = True
            quoted = [*re.findall(r'"([^"]*)"', rest), "", ""]
            if kind == "Query":
                trips[-1].append(f"Query {first_word(quoted[0])}")
            elif kind == "Parse":
                trips[-1].append(f"Parse {first_word(quoted[1])}")
            elif kind == "Bind" and quoted[1].startswith("sa_inbox_"):
                trips[-1].append("Bind sa_inbox")
        return trips


def first_word(statement: str) -> str:
    return (statement.split() or [""])[0]


def with_begin(trip: list[str]) -> bool:
    """Whether a round trip sent ``BEGIN`` and the claim (parsed, or prepared before)."""
    return trip[:1] == ["Parse BEGIN"] and any(
        sent in ("Parse INSERT", "Bind sa_inbox") for sent in trip[1:]
    )


@pytest.fixture
def wire(tmp_path: Path) -> Wire:
    return Wire(tmp_path / "libpq.trace")


def test_core_claim_and_begin_go_in_one_round_trip(pg_app: App, wire: Wire) -> None:
    with pg_app.engine.connect() as conn:
        driver = conn.connection.driver_connection
        with wire.traced(driver), conn.begin():
            assert pg_app.inbox.claim(conn, "pay-1", CONSUMER)
            pg_app.apply_payment(conn, "pay-1", 1, AMOUNT)
    trips = wire.round_trips()
    assert trips[0] == ["Parse BEGIN", "Parse INSERT", "Bind sa_inbox"]
    assert "INSERT INTO inbox_processed_messages" in wire.path.read_text()
    # then the two business statements and the COMMIT, one round trip each
    assert len(trips) == 4
    assert pg_app.ledger_rows("pay-1") == 1 and pg_app.inbox_rows() == 1


def test_without_it_the_claim_is_a_round_trip_of_its_own(pg_engine: sa.Engine, wire: Wire) -> None:
    app = App(pg_engine, send_with_begin=False)
    app.reset()
    with pg_engine.connect() as conn, wire.traced(conn.connection.driver_connection):  # noqa: SIM117 (the trace outlives the transaction)
        with conn.begin():
            assert app.inbox.claim(conn, "pay-1", CONSUMER)
            app.apply_payment(conn, "pay-1", 1, AMOUNT)
    trips = wire.round_trips()
    assert trips[0] == ["Query BEGIN"]
    assert trips[1] == ["Parse INSERT"]
    assert len(trips) == 5
    app.drop()


def test_psycopg_asyncio_keeps_the_usual_path(pg_app: App, wire: Wire) -> None:
    """psycopg's AsyncConnection: ``BEGIN`` is a round trip of its own, then the claim."""
    engine = create_async_engine(pg_app.engine.url.set(drivername="postgresql+psycopg_async"))
    inbox = AsyncInbox(pg_app.inbox)

    async def deliver() -> list[bool]:
        claimed = []
        try:
            async with engine.connect() as conn:
                raw = await conn.get_raw_connection()
                with wire.traced(raw.driver_connection):
                    for _ in range(2):
                        async with conn.begin():
                            claimed.append(await inbox.claim(conn, "pay-1", CONSUMER))
        finally:
            await engine.dispose()
        return claimed

    assert asyncio.run(deliver()) == [True, False]
    trips = wire.round_trips()
    assert trips[:2] == [["Query BEGIN"], ["Parse INSERT"]]
    assert not any(with_begin(trip) for trip in trips)
    assert pg_app.inbox_rows() == 1


def test_a_claim_after_a_statement_takes_the_usual_path(pg_app: App, wire: Wire) -> None:
    """Nothing to carry: the transaction's BEGIN went with the earlier statement."""
    with pg_app.engine.connect() as conn, wire.traced(conn.connection.driver_connection):  # noqa: SIM117 (the trace outlives the transaction)
        with conn.begin():
            conn.execute(sa.select(pg_app.accounts.c.balance).where(pg_app.accounts.c.id == 1))
            assert pg_app.inbox.claim(conn, "pay-1", CONSUMER)
    trips = wire.round_trips()
    assert trips[0] == ["Query BEGIN"]
    assert trips[2] == ["Parse INSERT"]
    assert pg_app.inbox_rows() == 1


def test_the_session_extension_and_handle_send_it_with_begin(pg_app: App, wire: Wire) -> None:
    with pg_app.engine.connect() as conn:
        claims = sessionmaker(bind=conn)
        install(claims)
        with wire.traced(conn.connection.driver_connection), claims.begin() as session:
            register_claim(session, pg_app.inbox, "pay-orm", CONSUMER)
            pg_app.apply_payment(session, "pay-orm", 1, AMOUNT)
    assert with_begin(wire.round_trips()[0])

    def pay(session: Session) -> None:
        pg_app.apply_payment(session, "pay-handle", 2, AMOUNT)

    with wire.checkouts(pg_app.engine):
        result = handle(
            pg_app.Session, pg_app.inbox, "pay-handle", CONSUMER, pay, ack=_ok, nack=_ok
        )
    assert result.outcome is Outcome.PROCESSED
    # the owner check's transaction first (once per process and name), then the delivery
    assert any(with_begin(trip) for trip in wire.round_trips())
    assert pg_app.ledger_rows("pay-orm") == 1 and pg_app.ledger_rows("pay-handle") == 1
    assert pg_app.inbox_rows() == 2


def _ok() -> None:
    return None


def test_a_duplicate_through_handle_sends_nothing_after_the_claim(pg_app: App, wire: Wire) -> None:
    ran: list[str] = []

    def pay(session: Session) -> None:
        ran.append("pay-1")
        pg_app.apply_payment(session, "pay-1", 1, AMOUNT)

    first = handle(pg_app.Session, pg_app.inbox, "pay-1", CONSUMER, pay, ack=_ok, nack=_ok)
    with wire.checkouts(pg_app.engine):
        second = handle(pg_app.Session, pg_app.inbox, "pay-1", CONSUMER, pay, ack=_ok, nack=_ok)
    assert (first.outcome, second.outcome) == (Outcome.PROCESSED, Outcome.DUPLICATE)
    assert ran == ["pay-1"]  # the duplicate ran no handler
    trips = wire.round_trips()
    claim = next(i for i, trip in enumerate(trips) if with_begin(trip))
    # the claim that skipped, then the transaction's end (it holds nothing): no business
    # statement on the wire
    assert trips[claim + 1 :] in ([["Query COMMIT"]], [["Query ROLLBACK"]])
    assert pg_app.ledger_rows("pay-1") == 1 and pg_app.balance(1) == AMOUNT
    assert pg_app.inbox_rows() == 1


def test_the_store_receive_goes_with_begin(pg_engine: sa.Engine, wire: Wire) -> None:
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name="with_begin_store")
    metadata.create_all(pg_engine)
    try:
        with pg_engine.connect() as conn:
            with wire.traced(conn.connection.driver_connection), conn.begin():
                assert store.receive(conn, "m-1", {"amount": 5}, consumer_name=CONSUMER)
            with conn.begin():
                assert not store.receive(conn, "m-1", {"amount": 5}, consumer_name=CONSUMER)
                row = conn.execute(sa.select(store.table.c.payload)).one()
        assert with_begin(wire.round_trips()[0])
        assert row.payload == {"amount": 5}
    finally:
        metadata.drop_all(pg_engine)


@pytest.mark.parametrize("message_id", AWKWARD_IDS)
def test_values_stay_bound(pg_app: App, message_id: str) -> None:
    digest = bytes(range(256))[:64]  # NUL, quotes, backslashes, high bytes
    inbox = Inbox(sa.MetaData(), table_name="with_begin_values")
    inbox.table.create(pg_app.engine)
    try:
        for expected in (True, False):
            with pg_app.engine.begin() as conn:
                claimed = inbox.claim(
                    conn,
                    message_id,
                    "bill'ing;\\",
                    message_type="type'; --",
                    correlation_id="ünï",
                    payload_hash=digest,
                )
                assert claimed is expected
                if claimed:
                    pg_app.apply_payment(conn, message_id, 1, AMOUNT)
        with pg_app.engine.connect() as conn:
            stored = conn.execute(sa.select(inbox.table)).one()
        assert stored.message_id == message_id
        assert stored.consumer_name == "bill'ing;\\"
        assert stored.message_type == "type'; --"
        assert stored.correlation_id == "ünï"
        assert bytes(stored.payload_hash) == digest
        assert pg_app.ledger_rows(message_id) == 1
        assert pg_app.balance(1) == AMOUNT
    finally:
        inbox.table.drop(pg_app.engine)


def test_after_cursor_execute_sees_the_claims_row_count(pg_app: App) -> None:
    """Its cursor ran nothing; statement_rowcount() reads the pipeline's count."""
    seen: list[int] = []

    def after(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: Any) -> None:
        if pg_app.inbox.table.name in statement:
            seen.append(statement_rowcount(cursor, context))

    event.listen(pg_app.engine, "after_cursor_execute", after)
    try:
        for _ in range(2):
            with pg_app.engine.begin() as conn:
                pg_app.inbox.claim(conn, "pay-1", CONSUMER)
    finally:
        event.remove(pg_app.engine, "after_cursor_execute", after)
    assert seen == [1, 0]


def test_a_missing_table_is_reported_as_ever_and_the_connection_stays_usable(
    pg_engine: sa.Engine, wire: Wire
) -> None:
    inbox = Inbox(sa.MetaData(), table_name="with_begin_never_created")
    with pg_engine.connect() as conn:
        with wire.traced(conn.connection.driver_connection), pytest.raises(MissingTable):  # noqa: SIM117 (the trace outlives the transaction)
            with conn.begin():
                inbox.claim(conn, "pay-1", CONSUMER)
        # the pipelined claim's own answer raised it; the caller's rollback followed
        trips = wire.round_trips()
        assert with_begin(trips[0]) and trips[1:] == [["Query ROLLBACK"]]
        with conn.begin():
            assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1


def test_a_lock_timeout_is_transient(pg_app: App) -> None:
    with pg_app.engine.connect() as holder:
        holder.begin()
        assert pg_app.inbox.claim(holder, "pay-1", CONSUMER)  # holds the key's lock
        with pg_app.engine.connect() as conn:
            conn.exec_driver_sql("SET lock_timeout = '200ms'")
            conn.commit()
            with pytest.raises(TransientClaimError) as raised, conn.begin():
                pg_app.inbox.claim(conn, "pay-1", CONSUMER)
            assert sqlstate_of(raised.value.__cause__) == "55P03"  # type: ignore[arg-type]
            conn.exec_driver_sql("RESET lock_timeout")
            conn.commit()
        holder.rollback()
    assert pg_app.inbox_rows() == 0


def test_repeatable_read_waiter_gets_the_serialization_failure(pg_app: App) -> None:
    """At REPEATABLE READ a claim that waited on another delivery's insert of the same id
    fails with a serialization failure once that delivery commits (PostgreSQL manual,
    13.2.2): TransientClaimError, as on the usual path; the retry sees the duplicate."""
    engine = pg_app.engine.execution_options(isolation_level="REPEATABLE READ")
    waiting = threading.Event()
    outcome: list[object] = []

    with pg_app.engine.connect() as first:
        first.begin()
        assert pg_app.inbox.claim(first, "pay-1", CONSUMER)
        pg_app.apply_payment(first, "pay-1", 1, AMOUNT)

        def second_delivery() -> None:
            with engine.connect() as conn, conn.begin():
                waiting.set()
                try:
                    outcome.append(pg_app.inbox.claim(conn, "pay-1", CONSUMER))
                except BaseException as exc:  # asserted below
                    outcome.append(exc)
            with engine.connect() as conn, conn.begin():  # the retry
                outcome.append(pg_app.inbox.claim(conn, "pay-1", CONSUMER))

        thread = threading.Thread(target=second_delivery)
        thread.start()
        waiting.wait(10)
        _wait_for_lock_waiter(pg_app.engine)
        first.commit()
        thread.join(30)
    assert isinstance(outcome[0], TransientClaimError) and outcome[1:] == [False]
    assert sqlstate_of(outcome[0].__cause__) == "40001"  # type: ignore[arg-type]
    assert pg_app.ledger_rows("pay-1") == 1 and pg_app.balance(1) == AMOUNT


def _wait_for_lock_waiter(engine: sa.Engine, timeout: float = 20.0) -> None:
    """Until a backend waits on a lock (the second delivery's claim)."""
    deadline = time.monotonic() + timeout
    query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(query).scalar_one():
                return
        time.sleep(0.02)
    raise AssertionError("the second delivery never waited on the first one's claim")


def test_a_connection_killed_before_the_claim_is_invalidated(pg_app: App) -> None:
    with pg_app.engine.connect() as conn:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        conn.commit()
        with pg_app.engine.connect() as killer:
            killer.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(DBAPIError) as raised, conn.begin():
            pg_app.inbox.claim(conn, "pay-1", CONSUMER)
        assert raised.value.connection_invalidated
    with pg_app.engine.begin() as conn:  # the pool gives a new connection
        assert pg_app.inbox.claim(conn, "pay-1", CONSUMER)
    assert pg_app.inbox_rows() == 1


def test_concurrent_duplicates_at_a_barrier(pg_app: App, wire: Wire) -> None:
    deliveries = 4
    barrier = threading.Barrier(deliveries, timeout=30)
    results: list[object] = [None] * deliveries

    def deliver(index: int) -> None:
        try:
            with pg_app.Session.begin() as session:
                session.connection()
                barrier.wait()
                claimed = pg_app.inbox.claim(session, "pay-1", CONSUMER)
                if claimed:
                    pg_app.apply_payment(session, "pay-1", 1, AMOUNT)
            results[index] = claimed
        except BaseException as exc:  # asserted below
            results[index] = exc

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(deliveries)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(results, key=str) == [False, False, False, True]
    assert pg_app.ledger_rows("pay-1") == 1 and pg_app.balance(1) == AMOUNT
    assert pg_app.inbox_rows() == 1


def test_isolation_settings_go_in_the_begin(pg_app: App, wire: Wire) -> None:
    engine = pg_app.engine.execution_options(isolation_level="SERIALIZABLE")
    with engine.connect() as conn, wire.traced(conn.connection.driver_connection), conn.begin():
        assert pg_app.inbox.claim(conn, "pay-1", CONSUMER)
        level = conn.exec_driver_sql("SHOW transaction_isolation").scalar_one()
    assert level == "serializable"
    assert "BEGIN ISOLATION LEVEL SERIALIZABLE" in wire.path.read_text()


@pytest.mark.parametrize("value", [1, "yes", None])
def test_send_with_begin_must_be_a_bool(value: object) -> None:
    metadata = sa.MetaData()
    with pytest.raises(InvalidArgument):
        Inbox(metadata, send_with_begin=value)  # type: ignore[arg-type]
    assert not metadata.tables  # nothing defined


def test_a_statement_the_server_forgot_is_prepared_again(pg_app: App, wire: Wire) -> None:
    """``DEALLOCATE ALL`` drops the connection's prepared statements behind sa-inbox's back:
    the next claim takes the error path (the server's 26000, the usual path after), the
    one after prepares it again, and every claim is counted right."""
    with pg_app.engine.connect() as conn:
        with conn.begin():
            assert pg_app.inbox.claim(conn, "pay-1", CONSUMER)
        conn.exec_driver_sql("DEALLOCATE ALL")
        conn.commit()
        with wire.traced(conn.connection.driver_connection):
            for message_id, expected in (("pay-2", True), ("pay-3", True), ("pay-2", False)):
                with conn.begin():
                    assert pg_app.inbox.claim(conn, message_id, CONSUMER) is expected
    trips = wire.round_trips()
    assert trips[0] == ["Parse BEGIN", "Bind sa_inbox"]  # a name unknown to the server
    assert trips[1:4] == [["Query ROLLBACK"], ["Query BEGIN"], ["Parse INSERT"]]
    text = wire.path.read_text()
    assert text.count('Parse\t "sa_inbox_') == 1  # prepared again, once
    assert text.count('Bind\t "" "sa_inbox_') == 3  # every exchange executes it by name
    assert pg_app.inbox_rows() == 3


def test_no_prepared_statement_without_prepare_threshold(pg_engine: sa.Engine, wire: Wire) -> None:
    """psycopg's ``prepare_threshold=None`` (PgBouncer in transaction mode): the claim is
    parsed at each exchange, never prepared under a name."""
    engine = sa.create_engine(pg_engine.url, connect_args={"prepare_threshold": None})
    app = App(engine)
    app.reset()
    try:
        with engine.connect() as conn, wire.traced(conn.connection.driver_connection):
            for message_id in ("pay-1", "pay-2"):
                with conn.begin():
                    assert app.inbox.claim(conn, message_id, CONSUMER)
        text = wire.path.read_text()
        assert text.count('Parse\t "" "INSERT') == 2
        assert '"sa_inbox_' not in text
        assert app.inbox_rows() == 2
    finally:
        app.drop()
        engine.dispose()


def test_a_statement_prepared_by_a_failed_exchange_is_executed_by_name(
    pg_app: App, wire: Wire
) -> None:
    """A named statement the server prepared outlives the transaction (PostgreSQL manual,
    55.2.3 "Extended Query": it lasts till the end of the session): a claim that timed out
    on a lock after its statement was prepared leaves it prepared, and the next claims on
    that connection execute it by name, one round trip each."""
    with pg_app.engine.connect() as holder:
        holder.begin()
        assert pg_app.inbox.claim(holder, "pay-1", CONSUMER)  # holds the key's lock
        with pg_app.engine.connect() as conn:
            conn.exec_driver_sql("SET lock_timeout = '200ms'")
            conn.commit()
            with pytest.raises(TransientClaimError), conn.begin():
                pg_app.inbox.claim(conn, "pay-1", CONSUMER)
            holder.rollback()
            with wire.traced(conn.connection.driver_connection):
                for message_id, expected in (("pay-1", True), ("pay-2", True), ("pay-1", False)):
                    with conn.begin():
                        assert pg_app.inbox.claim(conn, message_id, CONSUMER) is expected
    trips = wire.round_trips()
    claims = [trip for trip in trips if with_begin(trip)]
    assert len(claims) == 3 and ["Query ROLLBACK"] not in trips
    assert 'Parse\t "sa_inbox_' not in wire.path.read_text()  # prepared once, before
    assert pg_app.inbox_rows() == 2
