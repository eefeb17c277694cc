"""``InboxStore.receive`` / ``receive_many`` on every backend: the payload serialised once and
stored exactly, and a poll's batch with duplicates and bad input.

"Serialised once" is counted: the engine's ``json_serializer`` (what SQLAlchemy's JSON type
calls) and ``json.dumps`` itself are wrapped with counters while messages are received.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox.exc import InvalidArgument, InvalidMessageId
from sa_inbox.store import PENDING, InboxStore, Incoming

pytestmark = pytest.mark.backend

#: Payloads whose JSON text must come back as the same value.
PAYLOADS: list[Any] = [
    {"order": "o-1", "amount": 12.5, "currency": "EUR", "lines": [1, 2, {"x": None}]},
    ["a", 1, 2.25, True, None],
    "plain text",
    0,
    None,
    {"emoji": "\U0001f600", "accents": "\u00e9\u00df", "quote": "\"'\\", "big": 2**53},
    {"nested": {"deep": [[[]]], "empty": {}}},
]


class Counter:
    """Wraps a JSON serialiser and counts its calls."""

    def __init__(self, dumps: Any) -> None:
        self.dumps = dumps
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        return str(self.dumps(*args, **kwargs))


@pytest.fixture
def serializer() -> Counter:
    return Counter(json.dumps)


@pytest.fixture
def counted_engine(url: str, serializer: Counter) -> Iterator[sa.Engine]:
    """An engine whose JSON type serialises through ``serializer``."""
    extra: dict[str, Any] = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
    engine = sa.create_engine(url, json_serializer=serializer, **extra)
    yield engine
    engine.dispose()


@pytest.fixture
def store(counted_engine: sa.Engine) -> Iterator[InboxStore]:
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name="payload_store")
    metadata.drop_all(counted_engine)
    metadata.create_all(counted_engine)
    yield store
    metadata.drop_all(counted_engine)


def _stored(engine: sa.Engine, store: InboxStore) -> dict[str, Any]:
    t = store.table
    with engine.connect() as conn:
        return {str(m): p for m, p in conn.execute(sa.select(t.c.message_id, t.c.payload))}


def test_the_payload_is_serialised_once_and_stored_exactly(
    counted_engine: sa.Engine,
    store: InboxStore,
    serializer: Counter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dumps = Counter(json.dumps)
    monkeypatch.setattr(json, "dumps", dumps)
    with counted_engine.begin() as conn:
        for i, payload in enumerate(PAYLOADS):
            assert store.receive(conn, f"one-{i}", payload) is True
        batch = [Incoming(f"many-{i}", p) for i, p in enumerate(PAYLOADS)]
        assert len(store.receive_many(conn, batch)) == len(PAYLOADS)
    monkeypatch.undo()
    # One json.dumps per message (the receive's own, which validates), none by the column
    # type: the statement binds that text.
    assert (dumps.calls, serializer.calls) == (2 * len(PAYLOADS), 0)
    stored = _stored(counted_engine, store)
    for i, payload in enumerate(PAYLOADS):
        assert stored[f"one-{i}"] == payload and stored[f"many-{i}"] == payload
    assert store.counts(counted_engine)[PENDING] == 2 * len(PAYLOADS)


def test_receive_many_keeps_first_copies_and_skips_stored_rows(
    counted_engine: sa.Engine, store: InboxStore
) -> None:
    with counted_engine.begin() as conn:
        assert store.receive(conn, "stored", {"v": "old"}) is True
    poll = [
        Incoming("a", {"v": "a1"}, aggregate_id="acc-1", message_type="t"),
        Incoming("stored", {"v": "new"}),
        Incoming("b", {"v": "b1"}),
        Incoming("a", {"v": "a2"}),  # a second copy of "a" in the same poll
    ]
    sent: list[str] = []
    sa.event.listen(counted_engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    with counted_engine.begin() as conn:
        assert store.receive_many(conn, poll) == {"a", "b"}
    # One INSERT … RETURNING for the poll (PostgreSQL, SQLite, MariaDB: its one warning for
    # the one skipped row is the duplicate's, not read).
    assert [s.split()[0] for s in sent] == ["INSERT"]
    assert "RETURNING" in sent[0] and "payload_store" in sent[0]
    with counted_engine.begin() as conn:
        assert store.receive_many(conn, poll) == set()  # a redelivered poll: all stored
    assert _stored(counted_engine, store) == {
        "stored": {"v": "old"},
        "a": {"v": "a1"},
        "b": {"v": "b1"},
    }
    t = store.table
    with counted_engine.connect() as conn:
        row = conn.execute(sa.select(t).where(t.c.message_id == "a")).mappings().one()
    assert (row["aggregate_id"], row["message_type"], row["status"], row["attempts"]) == (
        "acc-1",
        "t",
        PENDING,
        0,
    )
    assert row["received_at"] == row["available_at"]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (Incoming("", {}), InvalidMessageId),
        (Incoming(" padded", {}), InvalidMessageId),
        (Incoming("x" * 256, {}), InvalidMessageId),
        (Incoming("nan", float("nan")), InvalidArgument),
        (Incoming("set", {1, 2}), InvalidArgument),
        (Incoming("agg", {}, aggregate_id="a" * 256), InvalidMessageId),
        ("not-an-incoming", InvalidArgument),
    ],
)
def test_bad_input_in_a_batch_sends_nothing(
    counted_engine: sa.Engine, store: InboxStore, bad: Any, error: type[Exception]
) -> None:
    sent: list[str] = []
    sa.event.listen(counted_engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    with counted_engine.begin() as conn:
        with pytest.raises(error):
            store.receive_many(conn, [Incoming("ok-1", {}), bad, Incoming("ok-2", {})])
        if isinstance(bad, Incoming):
            with pytest.raises(error):
                store.receive(conn, bad.message_id, bad.payload, aggregate_id=bad.aggregate_id)
    assert [s for s in sent if "payload_store" in s] == []
    assert _stored(counted_engine, store) == {}


def test_a_receive_returns_no_row(counted_engine: sa.Engine, store: InboxStore) -> None:
    """No implicit ``RETURNING id`` (SQLAlchemy adds one on PostgreSQL for a table with an
    identity key): a receive sends one INSERT and fetches nothing, new or duplicate."""
    sent: list[str] = []
    sa.event.listen(counted_engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    for expected in (True, False):
        with counted_engine.begin() as conn:
            assert store.receive(conn, "m-1", {"n": 1}) is expected
    inserts = [s for s in sent if "payload_store" in s]
    assert len(inserts) == 2 and not any("RETURNING" in s.upper() for s in inserts)
    assert len(sent) == 2 + (1 if counted_engine.dialect.name == "mysql" else 0)  # + check
    assert store.counts(counted_engine)[PENDING] == 1
