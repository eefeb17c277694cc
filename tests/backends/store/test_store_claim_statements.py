"""Which statements a store claim sends, per backend: PostgreSQL's single ``UPDATE …
RETURNING`` (its ``StoreClaimDialect.claim_statement``), the three-statement form
(``SELECT`` ids, ``UPDATE``, ``SELECT`` rows) elsewhere, MySQL/MariaDB finding the ids with
a plain read before locking them by primary key (``StoreClaimDialect.find_first``)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox.dialects import backend_for
from sa_inbox.dialects.store_claim import FIND_WIDENING, LIMIT
from sa_inbox.store import PENDING, PROCESSING
from tests.support.store_app import StoreApp, make_engine

pytestmark = pytest.mark.backend
HOUR = datetime.timedelta(hours=1)


@pytest.fixture
def store_app(url: str) -> Iterator[StoreApp]:
    engine = make_engine(url)
    app = StoreApp(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


def _receive(store_app: StoreApp, count: int) -> datetime.datetime:
    """Receive ``m-0`` … ``m-<count-1>``, one second apart; a time 10 s after the first,
    when all are claimable."""
    now = datetime.datetime.now(datetime.UTC)
    with store_app.engine.begin() as conn:
        for n in range(count):
            store_app.store.receive(
                conn, f"m-{n}", {"n": n}, now=now + datetime.timedelta(seconds=n)
            )
    return now + datetime.timedelta(seconds=10)


def test_claim_sends_the_backends_statements(store_app: StoreApp) -> None:
    engine, store = store_app.engine, store_app.store
    table = store.table
    later = _receive(store_app, 3)
    _, pending = store.candidates(visibility_timeout=30, max_attempts=5, now=later, ordered=False)
    dialect = backend_for(engine.dialect.name).store_claim
    values = {"status": PROCESSING, "claimed_by": "w", "attempts": table.c.attempts + 1}
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.split()[0].upper() in ("SELECT", "UPDATE"):
            sent.append(statement.split()[0].upper())

    with engine.begin() as conn:
        dialect.begin_write(conn)
        sa.event.listen(conn, "before_cursor_execute", record)
        rows = dialect.claim(conn, table, pending, 2, values)
    assert sorted(row["message_id"] for row in rows) == ["m-0", "m-1"]
    assert {row["status"] for row in rows} == {PROCESSING}
    if engine.dialect.name == "postgresql":
        assert sent == ["UPDATE"]
    elif dialect.find_first:  # the plain find, the lock by id, the UPDATE, the read-back
        assert sent == ["SELECT", "SELECT", "UPDATE", "SELECT"]
    else:
        assert sent == ["SELECT", "UPDATE", "SELECT"]


def test_the_store_claim_reads_no_row_back_and_returns_them_as_stored(
    store_app: StoreApp,
) -> None:
    """``InboxStore.claim`` sends, per candidate query, PostgreSQL's ``UPDATE … RETURNING``
    or elsewhere a locking ``SELECT`` and an ``UPDATE`` (no third statement reading the rows
    back: its rows are the locked ``SELECT``'s with the claim's values applied in Python);
    what it returns is what the database then holds."""
    engine, store = store_app.engine, store_app.store
    t = store.table
    later = _receive(store_app, 3)
    sent: list[str] = []

    locking: list[bool] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.split()[0].upper() in ("SELECT", "UPDATE"):
            sent.append(statement.split()[0].upper())
        if statement.split()[0].upper() == "SELECT":
            locking.append("FOR UPDATE" in statement.upper())

    def claim(token: str) -> list[Any]:
        sent.clear()
        locking.clear()
        sa.event.listen(engine, "before_cursor_execute", record)
        try:
            return store.claim(
                engine, claimed_by=token, limit=2, visibility_timeout=30, max_attempts=5, now=later
            )
        finally:
            sa.event.remove(engine, "before_cursor_execute", record)

    first = claim("w-1")
    # abandoned claims first (none found), then pending rows
    found_first = backend_for(engine.dialect.name).store_claim.find_first
    if engine.dialect.name == "postgresql":
        assert sent == ["UPDATE", "UPDATE"]
    elif found_first:  # the plain finds; no abandoned row found, so no lock of them
        assert (sent, locking) == (["SELECT", "SELECT", "SELECT", "UPDATE"], [False, False, True])
    else:
        assert sent == ["SELECT", "SELECT", "UPDATE"]
    with engine.begin() as conn:  # m-1's worker died: abandoned, past the visibility timeout
        conn.execute(t.update().where(t.c.message_id == "m-1").values(claimed_at=later - HOUR))
    second = claim("w-2")
    if found_first:  # the find found one: the lock by id of abandoned rows, then of pending
        assert (sent, locking) == (
            ["SELECT", "SELECT", "UPDATE", "SELECT", "SELECT", "UPDATE"],
            [False, True, False, True],
        )
    with engine.connect() as conn:
        stored = {
            row.message_id: row
            for row in conn.execute(
                sa.select(t.c.message_id, t.c.attempts, t.c.claimed_by, t.c.received_at)
            )
        }
    assert [m.message_id for m in first] == ["m-0", "m-1"]
    assert [m.message_id for m in second] == ["m-1", "m-2"]  # the abandoned one first
    for message in [first[0], *second]:
        row = stored[message.message_id]
        assert (message.attempts, message.claimed_by, message.received_at) == (
            row.attempts,
            row.claimed_by,
            row.received_at,
        )
    assert [m.attempts for m in second] == [2, 1]
    assert second[0].payload == {"n": 1}


def test_an_ordered_claim_rechecks_rows_its_locking_read_saw_beyond_its_snapshot(
    store_app: StoreApp,
) -> None:
    """InnoDB's locking read sees rows committed after its statement began; the NOT EXISTS
    of the ordered condition reads the statement's snapshot and does not: two messages of
    one aggregate received during a claim were both claimed. The race is simulated here
    with a lock statement lacking the ordered condition (what the locking read returned in
    the race); the recheck, a plain SELECT with the condition, keeps only the first."""
    engine, store = store_app.engine, store_app.store
    table = store.table
    now = datetime.datetime.now(datetime.UTC)
    with engine.begin() as conn:
        for seq in range(3):
            store.receive(conn, f"a-{seq}", {"seq": seq}, aggregate_id="a", now=now)
        store.receive(conn, "b-0", {"seq": 0}, aggregate_id="b", now=now)
    later = now + datetime.timedelta(seconds=10)
    unordered, ordered = (
        store.candidates(visibility_timeout=30, max_attempts=5, now=later, ordered=flag)[1]
        for flag in (False, True)
    )
    dialect = backend_for(engine.dialect.name).store_claim
    values = {"status": PROCESSING, "claimed_by": "w", "attempts": table.c.attempts + 1}
    raced = dialect.plan(table, unordered, values)  # what the locking read saw
    checked = dialect.plan(table, ordered, values, recheck=True)
    if checked.single is not None:  # one UPDATE … RETURNING: one snapshot throughout
        assert engine.dialect.name == "postgresql" and checked.recheck is None
        return
    plan = dataclasses.replace(raced, recheck=checked.recheck)
    with engine.begin() as conn:
        dialect.begin_write(conn)
        rows = dialect.run(conn, plan, 10, {})
    assert sorted(row["message_id"] for row in rows) == ["a-0", "b-0"]
    with engine.connect() as conn:
        claimed = conn.execute(
            sa.select(table.c.message_id).where(table.c.status == PROCESSING)
        ).scalars()
        assert sorted(claimed) == ["a-0", "b-0"]
    assert backend_for("mysql").store_claim.recheck_ordered


def _claims(engine: sa.Engine, table: sa.Table) -> dict[str, tuple[str | None, int]]:
    """message_id -> (claimed_by, attempts) of every row."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(table.c.message_id, table.c.claimed_by, table.c.attempts))
        return {row.message_id: (row.claimed_by, row.attempts) for row in rows}


@pytest.mark.parametrize(
    ("held", "limit", "statements"),
    [
        # abandoned: find; pending: find, lock by id (none free), the wider find, lock by id
        (2, 2, [False, False, True, False, True]),
        # ... and the wider find's rows are all held too: the locking scan
        (FIND_WIDENING, 1, [False, False, True, False, True, True]),
    ],
    ids=["wider-find", "scan"],
)
def test_a_claim_passes_the_rows_another_claim_holds(
    store_app: StoreApp, held: int, limit: int, statements: list[bool]
) -> None:
    """A claim takes the next rows past those another open claim holds (SKIP LOCKED). With
    ``find_first`` its plain read finds the held rows (still pending to it) and the lock by
    id skips them all; a find ``FIND_WIDENING`` times wider takes the next ones, and where
    even those are all held, the locking scan does. ``statements``: whether each SELECT of
    the second claim locks."""
    engine, store = store_app.engine, store_app.store
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite has one writer: a second claim waits for the first (BEGIN IMMEDIATE)")
    table = store.table
    later = _receive(store_app, held + limit + 1)
    _, pending = store.candidates(visibility_timeout=30, max_attempts=5, now=later)
    dialect = backend_for(engine.dialect.name).store_claim
    values = {"status": PROCESSING, "claimed_by": "first", "attempts": table.c.attempts + 1}
    locking: list[bool] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.split()[0].upper() == "SELECT":
            locking.append("FOR UPDATE" in statement.upper())

    with store.transaction(engine) as (conn, _):
        first = dialect.claim(conn, table, pending, held, values)  # held, not committed
        sa.event.listen(engine, "before_cursor_execute", record)
        try:
            second = store.claim(
                engine, claimed_by="second", limit=limit, visibility_timeout=30, max_attempts=5,
                now=later,
            )
        finally:
            sa.event.remove(engine, "before_cursor_execute", record)
    names = [f"m-{n}" for n in range(held + limit + 1)]
    assert sorted(row["message_id"] for row in first) == names[:held]
    assert [m.message_id for m in second] == names[held:-1]
    if dialect.find_first:
        assert locking == statements
    assert _claims(engine, table) == {
        **{name: ("first", 1) for name in names[:held]},
        **{name: ("second", 1) for name in names[held:-1]},
        names[-1]: (None, 0),
    }


def test_a_row_claimed_between_the_find_and_the_lock_is_not_claimed_again(
    store_app: StoreApp,
) -> None:
    """``find_first``: another worker claims and commits a row the plain read found, before
    the lock by id runs. The locking read checks the candidate condition again on the
    row's latest committed version (``processing`` now), so the row is not returned; the
    claim takes the other rows it found and, one short, scans on for the next."""
    engine, store = store_app.engine, store_app.store
    dialect = backend_for(engine.dialect.name).store_claim
    if not dialect.find_first:
        pytest.skip(f"{engine.dialect.name} locks its candidates in one statement")
    table = store.table
    later = _receive(store_app, 5)
    raced: list[str] = []

    def claim(token: str, limit: int) -> list[str]:
        messages = store.claim(
            engine, claimed_by=token, limit=limit, visibility_timeout=30, max_attempts=5,
            now=later,
        )
        return [m.message_id for m in messages]

    started: list[bool] = []

    def race(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        """Right after the first plain read of pending rows: another claim, committed."""
        plain_select = statement.lstrip().upper().startswith("SELECT") and (
            "FOR UPDATE" not in statement.upper()
        )
        if not started and plain_select and PENDING in dict(parameters).values():
            started.append(True)
            raced.extend(claim("other", 1))  # on another connection of the pool

    sa.event.listen(engine, "after_cursor_execute", race)
    try:
        mine = claim("mine", 3)
    finally:
        sa.event.remove(engine, "after_cursor_execute", race)
    assert raced == ["m-0"]
    assert mine == ["m-1", "m-2", "m-3"]
    assert _claims(engine, table) == {
        "m-0": ("other", 1),
        "m-1": ("mine", 1),
        "m-2": ("mine", 1),
        "m-3": ("mine", 1),
        "m-4": (None, 0),
    }




def _reads(conn: sa.Connection, table: sa.Table, other: sa.Engine) -> tuple[str, bool]:
    """How the transaction open on ``conn`` reads, seen by behaviour: ``"READ COMMITTED"``
    if a row committed by ``other`` after its first read shows in its second (a new
    snapshot per statement), ``"REPEATABLE READ"`` if not; and whether a row it inserts is
    still hidden from ``other`` (so it is in an open transaction)."""
    count = sa.select(sa.func.count()).select_from(table)
    now = datetime.datetime.now(datetime.UTC)

    def row(message_id: str) -> dict[str, Any]:
        return {
            "message_id": message_id,
            "consumer_name": "isolation",
            "payload": {},
            "status": PENDING,
            "received_at": now,
            "available_at": now,
        }

    first = conn.execute(count).scalar_one()
    with other.begin() as writer:
        writer.execute(table.insert().values(row(f"other-{first}")))
    level = "READ COMMITTED" if conn.execute(count).scalar_one() > first else "REPEATABLE READ"
    conn.execute(table.insert().values(row(f"mine-{first}")))
    with other.connect() as reader:
        hidden = reader.execute(count).scalar_one() == first + 1
    return level, hidden


@pytest.mark.parametrize("autocommit", [False, True], ids=["default", "autocommit-engine"])
def test_the_store_transaction_runs_at_read_committed_and_leaves_the_session_as_it_was(
    url: str, autocommit: bool
) -> None:
    """The store's own transactions run at READ COMMITTED in one transaction (MySQL/MariaDB:
    ``SET TRANSACTION`` for that transaction only), an ``AUTOCOMMIT`` engine's too; the
    pooled connection then runs the next transaction at the engine's level (InnoDB's
    REPEATABLE READ)."""
    if url.startswith("sqlite"):
        pytest.skip("SQLite has no isolation levels to choose (serialisable writes)")
    base = sa.create_engine(url, pool_size=1, max_overflow=0)
    other = sa.create_engine(url)
    engine = base.execution_options(isolation_level="AUTOCOMMIT") if autocommit else base
    app = StoreApp(other)
    app.reset()
    table = app.store.table
    try:
        with app.store.transaction(engine) as (conn, _):
            assert _reads(conn, table, other) == ("READ COMMITTED", True)
        if not autocommit:
            with engine.connect() as conn, conn.begin():  # the same pooled connection
                level, _ = _reads(conn, table, other)
            default = "READ COMMITTED" if base.dialect.name == "postgresql" else "REPEATABLE READ"
            assert level == default
    finally:
        base.dispose()
        app.drop()
        other.dispose()


def test_an_ordered_claim_locks_with_the_scan_not_the_find(store_app: StoreApp) -> None:
    """MySQL/MariaDB: an ordered claim keeps the locking scan (then its recheck), without
    ``find_first``'s plain find and lock by primary key. With them, 6 worker threads
    draining 3,000 ordered messages of 40 aggregates processed 1,051 in 60 s (the wider find
    read the whole backlog through the NOT EXISTS per row, and the locks by primary key
    deadlocked with other claimers' scans of the claim index) against all 3,000 in 37.6 s
    with the scan (MariaDB 10.11, shared 2-core machine)."""
    engine, store = store_app.engine, store_app.store
    dialect = backend_for(engine.dialect.name).store_claim
    if not dialect.find_first:
        pytest.skip(f"{engine.dialect.name} has no find_first")
    now = datetime.datetime.now(datetime.UTC)
    with engine.begin() as conn:
        for n in range(4):
            store.receive(conn, f"a-{n}", {"seq": n}, aggregate_id=f"a{n % 2}", now=now)
    locking: list[bool] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.split()[0].upper() == "SELECT":
            locking.append("FOR UPDATE" in statement.upper())

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        claimed = store.claim(
            engine,
            claimed_by="w",
            limit=10,
            visibility_timeout=30,
            max_attempts=5,
            ordered=True,
            now=now + datetime.timedelta(seconds=1),
            abandoned=False,
        )
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert sorted(m.message_id for m in claimed) == ["a-0", "a-1"]
    assert locking == [True, False]  # the locking scan, the recheck


def test_a_store_transaction_after_a_checkout_that_opened_one_still_runs(url: str) -> None:
    """MySQL/MariaDB: a pool ``checkout`` listener that reads an InnoDB table leaves a
    transaction open on the connection, where ``SET TRANSACTION`` fails (error 1568). The
    store sees it in the server's status flag and sets the level as before (its COMMIT ends
    that transaction first): the claim runs, at READ COMMITTED, in one transaction."""
    if not url.startswith("mysql"):
        pytest.skip("SET TRANSACTION is the MySQL/MariaDB store transaction's")
    base = sa.create_engine(url, pool_size=1, max_overflow=0)
    other = sa.create_engine(url)
    app = StoreApp(other)
    app.reset()
    table = app.store.table

    @sa.event.listens_for(base, "checkout")
    def read_at_checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"SELECT COUNT(*) FROM {table.name}")  # opens an InnoDB transaction
        cursor.fetchall()
        cursor.close()

    try:
        later = _receive(StoreApp(base), 2)
        claimed = app.store.claim(
            base, claimed_by="w", limit=5, visibility_timeout=30, max_attempts=5, now=later
        )
        assert [m.message_id for m in claimed] == ["m-0", "m-1"]
        with app.store.transaction(base) as (conn, _):
            assert _reads(conn, table, other) == ("READ COMMITTED", True)
    finally:
        base.dispose()
        app.drop()
        other.dispose()


def test_after_a_claim_met_held_rows_the_next_one_starts_with_the_wider_find(
    store_app: StoreApp,
) -> None:
    """``find_first``: a claim that met rows another open claim held makes the next claim
    of the same plan skip the narrow find (it would likely come back short again) and start
    with the wider one; a claim that met none makes the next start narrow again."""
    engine, store = store_app.engine, store_app.store
    if not backend_for(engine.dialect.name).store_claim.find_first:
        pytest.skip(f"{engine.dialect.name} locks its candidates in one statement")
    table = store.table
    later = _receive(store_app, 9)
    _, pending = store.candidates(visibility_timeout=30, max_attempts=5, now=later)
    dialect = backend_for(engine.dialect.name).store_claim
    values = {"status": PROCESSING, "claimed_by": "open", "attempts": table.c.attempts + 1}
    windows: list[int] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        """The row limit of each plain read of pending rows (the finds)."""
        plain = "FOR UPDATE" not in statement.upper()
        if plain and PENDING in dict(parameters).values():
            windows.append(dict(parameters)[LIMIT])

    def claim(token: str) -> list[str]:
        sa.event.listen(engine, "before_cursor_execute", record)
        try:
            messages = store.claim(
                engine, claimed_by=token, limit=2, visibility_timeout=30, max_attempts=5,
                now=later,
            )
        finally:
            sa.event.remove(engine, "before_cursor_execute", record)
        return [m.message_id for m in messages]

    with store.transaction(engine) as (conn, _):
        dialect.claim(conn, table, pending, 2, values)  # m-0 and m-1, held
        assert claim("met") == ["m-2", "m-3"]
    assert claim("wide") == ["m-4", "m-5"]  # nothing held now
    assert claim("narrow") == ["m-6", "m-7"]
    assert windows == [2, 2 * FIND_WIDENING, 2 * FIND_WIDENING, 2]
    assert _claims(engine, table)["m-8"] == (None, 0)
