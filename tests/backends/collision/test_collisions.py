"""Message-id collisions on real servers (SQLite, PostgreSQL, MariaDB), sync.

Two messages sharing ``(message_id, consumer_name)`` with different payload digests: the
second raises :class:`MessageIdCollision` (its transaction rolls back, the runner nacks) or,
with ``on_collision="record"``, writes a row into ``inbox_collisions`` and is skipped. A
redelivery (same digest) stays a plain duplicate. Every test asserts the database state:
ledger rows, balances, inbox rows and their stored digests, collision rows.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from sa_inbox import DuplicateMessage, InboxStore, Outcome, handle, install, register_claim
from sa_inbox.collision import COLLISIONS_TABLE, payload_hash
from sa_inbox.exc import MessageIdCollision
from sa_inbox.store import Incoming
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

A = payload_hash({"amount": "10.00", "account": 1})
B = payload_hash({"amount": "99.00", "account": 2})
AMOUNT = Decimal("10.00")


@dataclass
class Msg:
    message_id: str
    digest: bytes


def collision_rows(app: App) -> list[tuple[str, str, bytes | None, bytes]]:
    table = app.metadata.tables[COLLISIONS_TABLE]
    query = sa.select(
        table.c.message_id, table.c.consumer_name, table.c.stored_hash, table.c.payload_hash
    ).order_by(table.c.id)
    with app.engine.connect() as conn:
        return [
            (r[0], r[1], bytes(r[2]) if r[2] else None, bytes(r[3])) for r in conn.execute(query)
        ]


def stored_digest(app: App, message_id: str) -> bytes | None:
    t = app.inbox.table
    with app.engine.connect() as conn:
        value = conn.execute(
            sa.select(t.c.payload_hash).where(t.c.message_id == message_id)
        ).scalar_one()
    return None if value is None else bytes(value)


@pytest.fixture(params=["raise", "record"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def capp(engine: sa.Engine, mode: str) -> Any:
    app = App(engine, on_collision=mode)
    app.reset()
    yield app
    app.drop()


def claim_and_pay(app: App, message_id: str, digest: bytes | None) -> bool:
    with app.Session.begin() as session:
        claimed = app.inbox.claim(session, message_id, CONSUMER, payload_hash=digest)
        if claimed:
            app.apply_payment(session, message_id, 1, AMOUNT)
    return claimed


def test_claim_collision_raises_or_records(capp: App, mode: str) -> None:
    assert claim_and_pay(capp, "m-1", A) is True
    assert claim_and_pay(capp, "m-1", A) is False  # a redelivery: plain duplicate
    assert claim_and_pay(capp, "m-1", None) is False  # no digest: nothing to compare
    if mode == "raise":
        with pytest.raises(MessageIdCollision) as info:
            claim_and_pay(capp, "m-1", B)
        assert (info.value.stored_hash, info.value.payload_hash) == (A, B)
    else:
        assert claim_and_pay(capp, "m-1", B) is False
        assert collision_rows(capp) == [("m-1", CONSUMER, A, B)]
    assert capp.ledger_rows() == 1 and capp.balance(1) == AMOUNT
    assert capp.inbox_rows() == 1 and stored_digest(capp, "m-1") == A


def test_claim_many_and_batch(capp: App, mode: str) -> None:
    with capp.Session.begin() as session:
        new = capp.inbox.claim_many(session, ["a", "b"], CONSUMER, payload_hashes={"a": A, "b": A})
    assert new == {"a", "b"} and stored_digest(capp, "a") == A
    poll = [Msg("a", A), Msg("b", B), Msg("c", A), Msg("c", A)]
    if mode == "raise":
        with pytest.raises(MessageIdCollision) as info, capp.Session.begin() as session:
            capp.inbox.claim_batch(session, poll, CONSUMER, payload_hash=lambda m: m.digest)
        assert info.value.message_id == "b"
        assert capp.inbox_rows() == 2  # "c" rolled back with the transaction
    else:
        with capp.Session.begin() as session:
            todo = capp.inbox.claim_batch(session, poll, CONSUMER, payload_hash=lambda m: m.digest)
        assert [m.message_id for m in todo] == ["c"]
        assert collision_rows(capp) == [("b", CONSUMER, A, B)]
        assert capp.inbox_rows() == 3 and stored_digest(capp, "c") == A


def test_collision_within_one_poll(capp: App, mode: str) -> None:
    poll = [Msg("p", A), Msg("p", B)]
    if mode == "raise":
        with pytest.raises(MessageIdCollision), capp.Session.begin() as session:
            capp.inbox.claim_batch(session, poll, CONSUMER, payload_hash=lambda m: m.digest)
        assert capp.inbox_rows() == 0
    else:
        with capp.Session.begin() as session:
            todo = capp.inbox.claim_batch(session, poll, CONSUMER, payload_hash=lambda m: m.digest)
        assert [m.digest for m in todo] == [A]
        assert collision_rows(capp) == [("p", CONSUMER, A, B)]


def test_session_extension(capp: App, mode: str) -> None:
    install(capp.Session)
    with capp.Session.begin() as session:
        register_claim(session, capp.inbox, "s-1", CONSUMER, payload_hash=A)
        capp.apply_payment(session, "s-1", 1, AMOUNT)
    expected = MessageIdCollision if mode == "raise" else DuplicateMessage
    with pytest.raises(expected), capp.Session.begin() as session:
        register_claim(session, capp.inbox, "s-1", CONSUMER, payload_hash=B)
        session.flush()
    assert capp.ledger_rows() == 1 and capp.inbox_rows() == 1


def test_runner_nacks_a_collision_and_acks_a_recorded_one(capp: App, mode: str) -> None:
    events: list[str] = []

    def deliver(digest: bytes) -> Outcome:
        result = handle(
            capp.Session,
            capp.inbox,
            "r-1",
            CONSUMER,
            functools.partial(capp.apply_payment, message_id="r-1", account_id=1, amount=AMOUNT),
            ack=lambda: events.append("ack"),
            nack=lambda: events.append("nack"),
            payload_hash=digest,
        )
        return result.outcome

    assert deliver(A) is Outcome.PROCESSED
    assert deliver(A) is Outcome.DUPLICATE
    if mode == "raise":
        assert deliver(B) is Outcome.FAILED
        assert events == ["ack", "ack", "nack"]
    else:
        assert deliver(B) is Outcome.DUPLICATE
        assert events == ["ack", "ack", "ack"]
        assert len(collision_rows(capp)) == 1
    assert capp.ledger_rows() == 1 and capp.balance(1) == AMOUNT


def test_concurrent_claims_of_one_id_with_different_digests(capp: App, mode: str) -> None:
    """Two transactions claim one id at a barrier, with different digests: the loser waits
    for the winner's commit (ON CONFLICT / INSERT IGNORE wait on the uncommitted key; SQLite
    serialises writers), then sees its row and collides. Exactly one ledger row."""
    barrier = threading.Barrier(2, timeout=30)
    results: list[object] = [None, None]

    def deliver(index: int) -> None:
        digest = (A, B)[index]
        try:
            with capp.Session.begin() as session:
                session.connection()
                barrier.wait()
                claimed = capp.inbox.claim(session, "c-1", CONSUMER, payload_hash=digest)
                if claimed:
                    capp.apply_payment(session, "c-1", 1, AMOUNT)
            results[index] = claimed
        except Exception as exc:
            results[index] = exc

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert True in results, results
    loser = results[1 - results.index(True)]
    winner_digest = (A, B)[results.index(True)]
    if mode == "raise":
        assert isinstance(loser, MessageIdCollision), loser
    else:
        assert loser is False
        assert [row[2:] for row in collision_rows(capp)] == [
            (winner_digest, B if winner_digest == A else A)
        ]
    assert capp.ledger_rows() == 1 and capp.inbox_rows() == 1
    assert stored_digest(capp, "c-1") == winner_digest


def test_duplicate_read_sees_a_row_committed_after_the_snapshot(engine: sa.Engine) -> None:
    """The duplicate path's read is a locking read: under InnoDB's REPEATABLE READ a plain
    SELECT would read the snapshot taken by this transaction's first read, from before the
    other transaction committed the id, and miss the collision."""
    app = App(engine)
    app.reset()
    with app.Session.begin() as late:
        assert app.inbox.is_processed(late, "snap-1", CONSUMER) is False  # snapshot taken
        assert claim_and_pay(app, "snap-1", A) is True  # committed by another transaction
        if engine.dialect.name == "mysql":
            t = app.inbox.table
            plain = late.execute(sa.select(t.c.payload_hash).where(t.c.message_id == "snap-1"))
            assert plain.first() is None  # what a nonlocking read would have compared
        with pytest.raises(MessageIdCollision):
            app.inbox.claim(late, "snap-1", CONSUMER, payload_hash=B)
    app.drop()


class Statements:
    def __init__(self, engine: sa.Engine) -> None:
        self.sql: list[str] = []
        event.listen(engine, "before_cursor_execute", self._cursor)

    def _cursor(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.sql.append(statement)


def test_new_claim_stays_one_statement(capp: App) -> None:
    """With a digest and detection on, a new claim is one statement; the locking read is
    sent only on the duplicate path (one more statement)."""
    claim_and_pay(capp, "warm", A)  # the engine's one-time checks
    sent = Statements(capp.engine)
    with capp.engine.begin() as conn:
        sent.sql.clear()
        assert capp.inbox.claim(conn, "n-1", CONSUMER, payload_hash=A) is True
        new_claim = list(sent.sql)
        sent.sql.clear()
        assert capp.inbox.claim(conn, "warm", CONSUMER, payload_hash=A) is False
        duplicate = list(sent.sql)
        sent.sql.clear()
        assert capp.inbox.claim(conn, "warm", CONSUMER) is False
        without_digest = list(sent.sql)
    assert len(new_claim) == 1 and "INSERT" in new_claim[0].upper()
    # A duplicate without a digest is what it was: one statement (on MySQL/MariaDB too, its
    # lone 1062 warning proven by the count); with a digest, exactly one more: the locking read.
    assert len(without_digest) == 1
    assert duplicate[:-1] == without_digest
    assert duplicate[-1].upper().lstrip().startswith("SELECT")
    assert ("LOCK IN SHARE MODE" in duplicate[-1] or "FOR SHARE" in duplicate[-1]) == (
        capp.engine.dialect.name != "sqlite"
    )


# -- the inbox store -----------------------------------------------------------------------


@pytest.fixture
def store(engine: sa.Engine, mode: str) -> Any:
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name="collision_store", on_collision=mode)  # type: ignore[arg-type]
    metadata.drop_all(engine)
    metadata.create_all(engine)
    yield store
    metadata.drop_all(engine)


def store_rows(engine: sa.Engine, store: InboxStore) -> list[tuple[str, Any]]:
    t = store.table
    with engine.connect() as conn:
        return [
            tuple(r) for r in conn.execute(sa.select(t.c.message_id, t.c.payload).order_by(t.c.id))
        ]  # type: ignore[misc]


def test_store_receive(engine: sa.Engine, store: InboxStore, mode: str) -> None:
    first, second = {"n": 1, "v": [1.5, "é"]}, {"n": 2}
    with engine.begin() as conn:
        assert store.receive(conn, "x", first, payload_hash=payload_hash(first)) is True
    with engine.begin() as conn:  # a redelivery: its payload hashes as the stored one
        assert (
            store.receive(
                conn, "x", dict(reversed(first.items())), payload_hash=payload_hash(first)
            )
            is False
        )
    with engine.begin() as conn:  # no digest given: not compared (the old behaviour)
        assert store.receive(conn, "x", second) is False
    if mode == "raise":
        with pytest.raises(MessageIdCollision), engine.begin() as conn:
            store.receive(conn, "x", second, payload_hash=payload_hash(second))
    else:
        with engine.begin() as conn:
            assert store.receive(conn, "x", second, payload_hash=payload_hash(second)) is False
        table = store.table.metadata.tables[COLLISIONS_TABLE]
        with engine.connect() as conn:
            rows = conn.execute(sa.select(table.c.message_id, table.c.source)).all()
        assert [tuple(r) for r in rows] == [("x", "collision_store")]
    assert store_rows(engine, store) == [("x", first)]


def test_store_receive_many(engine: sa.Engine, store: InboxStore, mode: str) -> None:
    with engine.begin() as conn:
        store.receive_many(conn, [Incoming("a", {"n": 1}), Incoming("b", {"n": 1})])
    batch = [Incoming("a", {"n": 1}), Incoming("b", {"n": 2}), Incoming("c", {"n": 3})]
    digests = {m.message_id: payload_hash(m.payload) for m in batch}
    if mode == "raise":
        with pytest.raises(MessageIdCollision) as info, engine.begin() as conn:
            store.receive_many(conn, batch, payload_hashes=digests)
        assert info.value.message_id == "b"
        assert [r[0] for r in store_rows(engine, store)] == ["a", "b"]
    else:
        with engine.begin() as conn:
            assert store.receive_many(conn, batch, payload_hashes=digests) == {"c"}
        assert [r[0] for r in store_rows(engine, store)] == ["a", "b", "c"]
