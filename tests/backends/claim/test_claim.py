"""The claim on every backend: duplicates, batches, bad input, and the caller's transaction."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from decimal import Decimal

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox
from sa_inbox.exc import InvalidMessageId
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

BAD_IDS = [None, "", " ", " m1", "m1 ", "m\x001", 42, b"m1", "x" * 256]


@pytest.fixture(params=["native", "savepoint"])
def strategy_app(request: pytest.FixtureRequest, engine: sa.Engine) -> App:
    app = App(engine, strategy=request.param)
    app.reset()
    yield app  # type: ignore[misc]
    app.drop()


def _deliver(app: App, message_id: str, amount: Decimal = Decimal("10.00")) -> bool:
    """One delivery: claim then business change in one transaction; True if applied."""
    with app.Session.begin() as session:
        if not app.inbox.claim(session, message_id, CONSUMER):
            return False
        app.apply_payment(session, message_id, 1, amount)
        return True


def test_sequential_duplicate_is_applied_once(strategy_app: App) -> None:
    app = strategy_app
    assert _deliver(app, "pay-1") is True
    assert _deliver(app, "pay-1") is False
    assert _deliver(app, "pay-1") is False
    assert app.ledger_rows("pay-1") == 1
    assert app.balance(1) == Decimal("10.00")
    assert app.inbox_rows() == 1


def test_same_message_for_two_consumers_is_processed_by_each(strategy_app: App) -> None:
    app = strategy_app
    with app.engine.begin() as conn:
        assert app.inbox.claim(conn, "pay-1", "billing") is True
        assert app.inbox.claim(conn, "pay-1", "audit") is True
        assert app.inbox.claim(conn, "pay-1", "audit") is False
    assert app.inbox_rows() == 2


def test_transaction_stays_usable_after_a_duplicate(strategy_app: App) -> None:
    app = strategy_app
    _deliver(app, "pay-1")
    with app.Session.begin() as session:
        assert app.inbox.claim(session, "pay-1", CONSUMER) is False
        # The same transaction goes on: a different message is claimed and applied.
        assert app.inbox.claim(session, "pay-2", CONSUMER) is True
        app.apply_payment(session, "pay-2", 1, Decimal("5.00"))
    assert app.ledger_rows() == 2
    assert app.balance(1) == Decimal("15.00")


def test_rollback_removes_the_claim(strategy_app: App) -> None:
    app = strategy_app
    with pytest.raises(RuntimeError), app.Session.begin() as session:
        assert app.inbox.claim(session, "pay-1", CONSUMER)
        app.apply_payment(session, "pay-1", 1, Decimal("10.00"))
        raise RuntimeError("handler failed")
    assert app.inbox_rows() == 0
    assert app.ledger_rows() == 0
    assert _deliver(app, "pay-1") is True  # the redelivery is processed
    assert app.balance(1) == Decimal("10.00")


def test_claim_many_returns_exactly_the_new_ids(strategy_app: App) -> None:
    app = strategy_app
    with app.engine.begin() as conn:
        assert app.inbox.claim(conn, "m-005", CONSUMER)
    batch = [f"m-{i:03d}" for i in range(10, 0, -1)] + ["m-003", "m-007"]  # unsorted, repeats
    with app.engine.begin() as conn:
        claimed = app.inbox.claim_many(conn, batch, CONSUMER)
    assert claimed == {f"m-{i:03d}" for i in range(1, 11)} - {"m-005"}
    with app.engine.begin() as conn:
        assert app.inbox.claim_many(conn, batch, CONSUMER) == set()
    assert app.inbox_rows() == 10


def test_claim_many_over_one_statement_limit(app: App) -> None:
    ids = [f"msg-{i:05d}" for i in range(2500)]
    with app.engine.begin() as conn:
        assert app.inbox.claim_many(conn, ids[:1200], CONSUMER) == set(ids[:1200])
    with app.engine.begin() as conn:
        assert app.inbox.claim_many(conn, ids, CONSUMER) == set(ids[1200:])
    assert app.inbox_rows() == 2500


def test_claim_many_of_nothing_sends_nothing(app: App) -> None:
    with app.engine.connect() as conn:
        assert app.inbox.claim_many(conn, [], CONSUMER) == set()
        assert not conn.in_transaction()


@dataclass(frozen=True)
class Payment:
    """A broker message of the caller's own type: ``message_id`` is the default key."""

    message_id: str
    account_id: int
    amount: Decimal


def _apply_poll(app: App, poll: list[Payment]) -> list[Payment]:
    """One poll, one transaction: claim the batch, apply each message it returns."""
    with app.Session.begin() as session:
        to_process = app.inbox.claim_batch(session, poll, CONSUMER)
        for message in to_process:
            app.apply_payment(session, message.message_id, message.account_id, message.amount)
    return to_process


def test_claim_batch_applies_each_new_id_once(strategy_app: App) -> None:
    """A poll carrying ids twice, and an id committed by an earlier transaction."""
    app = strategy_app
    with app.Session.begin() as session:
        assert app.inbox.claim(session, "pay-2", CONSUMER)
        app.apply_payment(session, "pay-2", 2, Decimal("20.00"))
    first_1 = Payment("pay-1", 1, Decimal("10.00"))
    poll = [
        Payment("pay-3", 3, Decimal("30.00")),
        first_1,
        Payment("pay-2", 2, Decimal("20.00")),  # committed earlier: a duplicate
        Payment("pay-1", 1, Decimal("10.00")),  # a second copy in the same poll
        Payment("pay-4", 1, Decimal("4.00")),
        Payment("pay-3", 3, Decimal("30.00")),
        Payment("pay-2", 2, Decimal("20.00")),
    ]
    to_process = _apply_poll(app, poll)
    # The first copy of each new id, in poll order (the very objects of the poll).
    assert [m.message_id for m in to_process] == ["pay-3", "pay-1", "pay-4"]
    assert to_process[0] is poll[0] and to_process[1] is first_1
    assert app.ledger_rows() == 4
    assert [app.ledger_rows(f"pay-{i}") for i in range(1, 5)] == [1, 1, 1, 1]
    assert app.balance(1) == Decimal("14.00")
    assert app.balance(2) == Decimal("20.00")
    assert app.balance(3) == Decimal("30.00")
    assert app.inbox_rows() == 4

    # The whole poll redelivered: nothing is applied again.
    assert _apply_poll(app, poll) == []
    assert app.ledger_rows() == 4
    assert app.balance(1) == Decimal("14.00")
    assert app.inbox_rows() == 4


def test_claim_batch_of_ids_with_an_identity_key(app: App) -> None:
    with app.engine.begin() as conn:
        assert app.inbox.claim(conn, "b", CONSUMER)
    with app.engine.begin() as conn:
        new = app.inbox.claim_batch(
            conn, iter(["c", "a", "b", "c", "a"]), CONSUMER, key=lambda m: m
        )
    assert new == ["c", "a"]
    assert app.inbox_rows() == 3


def test_claim_batch_with_a_key_function(app: App) -> None:
    poll = [{"id": "x-2"}, {"id": "x-1"}, {"id": "x-2"}]
    with app.engine.begin() as conn:
        new = app.inbox.claim_batch(conn, poll, CONSUMER, key=operator.itemgetter("id"))
    assert new == [poll[0], poll[1]] and new[0] is poll[0]
    assert app.inbox_rows() == 2


def test_claim_batch_of_nothing_sends_nothing(app: App) -> None:
    with app.engine.connect() as conn:
        assert app.inbox.claim_batch(conn, [], CONSUMER) == []
        assert not conn.in_transaction()


@pytest.mark.parametrize(
    ("messages", "key", "match"),
    [
        ([Payment("ok-1", 1, Decimal(1)), Payment(" bad", 1, Decimal(1))], None, "whitespace"),
        ([Payment("ok-1", 1, Decimal(1)), "ok-2"], None, "no message_id attribute"),
        (["ok-1", None], "identity", "must not be None"),
        (["ok-1", 42], "identity", "must be str"),
        ("ok-1", "identity", "not a string"),
        (b"ok-1", "identity", "not a string"),
        (7, "identity", "must be an iterable"),
    ],
    ids=repr,
)
def test_claim_batch_validates_everything_before_any_sql(
    app: App, messages: object, key: str | None, match: str
) -> None:
    kwargs = {} if key is None else {"key": lambda m: m}
    with app.engine.connect() as conn:
        with pytest.raises(InvalidMessageId, match=match):
            app.inbox.claim_batch(conn, messages, CONSUMER, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(InvalidMessageId, match="consumer_name"):
            app.inbox.claim_batch(conn, ["ok-1"], " billing", key=lambda m: m)
        assert not conn.in_transaction(), "no SQL may be sent for invalid input"
    assert app.inbox_rows() == 0


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_bad_message_id_is_rejected_with_nothing_written(app: App, bad: object) -> None:
    with app.engine.connect() as conn:
        with pytest.raises(InvalidMessageId):
            app.inbox.claim(conn, bad, CONSUMER)  # type: ignore[arg-type]
        with pytest.raises(InvalidMessageId):
            app.inbox.claim(conn, "ok", bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidMessageId):
            app.inbox.claim_many(conn, ["ok-1", bad], CONSUMER)  # type: ignore[list-item]
        assert not conn.in_transaction(), "no SQL may be sent for invalid input"
    assert app.inbox_rows() == 0


def test_claim_many_refuses_a_bare_string(app: App) -> None:
    with app.engine.connect() as conn, pytest.raises(InvalidMessageId):
        app.inbox.claim_many(conn, "abc", CONSUMER)
    assert app.inbox_rows() == 0


def test_over_length_ids_never_collide(app: App) -> None:
    """Two ids that share their first 255 characters are both refused, never truncated."""
    stem = "x" * 255
    with app.engine.begin() as conn:
        assert app.inbox.claim(conn, stem, CONSUMER) is True
        for long_id in (stem + "a", stem + "b"):
            with pytest.raises(InvalidMessageId, match="256 characters"):
                app.inbox.claim(conn, long_id, CONSUMER)
    assert app.inbox_rows() == 1


def test_non_ascii_ids_round_trip(app: App) -> None:
    ids = ["zahlung-ü-1", "支払い-1", "emoji-🙂-1", "é" * 255]
    with app.engine.begin() as conn:
        assert app.inbox.claim_many(conn, ids, CONSUMER) == set(ids)
    with app.engine.begin() as conn:
        assert all(app.inbox.claim(conn, i, CONSUMER) is False for i in ids)
        stored = set(conn.execute(sa.select(app.inbox.table.c.message_id)).scalars())
    assert stored == set(ids)


def test_ids_differing_only_by_case_accent_or_normalisation_are_distinct(app: App) -> None:
    """MySQL's default collations would merge these; the key columns compare bytes."""
    ids = ["Pay-1", "pay-1", "PAY-1", "café-1", "cafe-1", "cafe\u0301-1", "straße-1", "strasse-1"]
    with app.engine.begin() as conn:
        assert [app.inbox.claim(conn, i, CONSUMER) for i in ids] == [True] * len(ids)
        assert app.inbox.claim_many(conn, ids, CONSUMER) == set()
    with app.engine.begin() as conn:
        assert app.inbox.claim_many(conn, ids, "Billing") == set(ids)
    assert app.inbox_rows() == 2 * len(ids)


def test_optional_columns_are_stored(app: App) -> None:
    digest = bytes(range(32))
    with app.engine.begin() as conn:
        app.inbox.claim(
            conn,
            "m1",
            CONSUMER,
            message_type="PaymentCaptured",
            correlation_id="c-9",
            payload_hash=digest,
        )
        row = conn.execute(sa.select(app.inbox.table)).one()
    assert (row.message_type, row.correlation_id, row.payload_hash) == (
        "PaymentCaptured",
        "c-9",
        digest,
    )
    assert row.received_at is not None


def test_claim_through_the_mixin_table(engine: sa.Engine) -> None:
    from sqlalchemy.orm import DeclarativeBase

    from sa_inbox import InboxMessageMixin

    class Base(DeclarativeBase):
        pass

    class Processed(InboxMessageMixin, Base):
        __tablename__ = "mixin_processed"

    inbox = Inbox.for_table(Processed.__table__)  # type: ignore[arg-type]
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            assert inbox.claim(conn, "m1", CONSUMER) is True
            assert inbox.claim(conn, "m1", CONSUMER) is False
        pk = sa.inspect(engine).get_pk_constraint("mixin_processed")
        assert pk["constrained_columns"] == ["message_id", "consumer_name"]
    finally:
        Base.metadata.drop_all(engine)


def test_table_shape(app: App) -> None:
    inspector = sa.inspect(app.engine)
    name = app.inbox.table.name
    assert inspector.get_pk_constraint(name)["constrained_columns"] == [
        "message_id",
        "consumer_name",
    ]
    columns = {c["name"]: c for c in inspector.get_columns(name)}
    assert not columns["message_id"]["nullable"] and not columns["consumer_name"]["nullable"]
    assert set(columns) == {
        "message_id",
        "consumer_name",
        "received_at",
        "message_type",
        "correlation_id",
        "payload_hash",
    }
    indexes = {ix["name"]: ix["column_names"] for ix in inspector.get_indexes(name)}
    assert indexes[f"ix_{name}_received_at"] == ["received_at"]


def test_is_processed_causal_reads_the_same_claims_on_every_backend(app: App) -> None:
    """``causal=True`` is a ``SET STATEMENT wsrep_sync_wait = 1 FOR SELECT`` on MariaDB (a
    Galera node catches up first; see tests/backends/cluster) and the plain read elsewhere:
    on one server both see the same claims."""
    _deliver(app, "pay-1")
    with app.engine.connect() as conn:
        assert app.inbox.is_processed(conn, "pay-1", CONSUMER, causal=True)
        assert not app.inbox.is_processed(conn, "pay-2", CONSUMER, causal=True)
        assert app.inbox.is_processed(conn, "pay-1", CONSUMER)
