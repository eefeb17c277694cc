"""A claim is reported to the hooks from one place (sa_inbox.claim.ClaimReport), for every
way to claim: one id, a batch, a poll with repeated ids, a store receive; a collision that
raises is reported as one (real claims on SQLite)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox, InboxStore
from sa_inbox.collision import payload_hash
from sa_inbox.exc import MessageIdCollision
from sa_inbox.hooks import InboxHooks
from sa_inbox.store import Incoming

PACKAGE = Path(__file__).resolve().parents[3] / "sa_inbox"


class Claims(InboxHooks):
    def __init__(self) -> None:
        self.reports: list[tuple[int, int, int]] = []

    def claimed(
        self, consumer_name: str, *, new: int, duplicates: int, collisions: int, seconds: float
    ) -> None:
        assert seconds >= 0
        self.reports.append((new, duplicates, collisions))


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/report.db")
    yield engine
    engine.dispose()


def test_only_the_claim_report_tells_the_hooks_of_a_claim() -> None:
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for inner in ast.walk(node):
                    if (
                        isinstance(inner, ast.Call)
                        and isinstance(inner.func, ast.Attribute)
                        and inner.func.attr == "claimed"
                    ):
                        callers.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert sorted(callers) == ["claim.py:ClaimReport", "hooks/__init__.py:MultiHooks"]


def test_every_way_to_claim_is_reported_once(engine: sa.Engine) -> None:
    hooks = Claims()
    metadata = sa.MetaData()
    inbox = Inbox(metadata, hooks=hooks, consumers=False, on_collision="record")
    store = InboxStore(metadata, hooks=hooks, consumers=False)
    metadata.create_all(engine)
    with engine.begin() as conn:
        assert inbox.claim(conn, "a", "c")
        assert not inbox.claim(conn, "a", "c")
        assert inbox.claim_many(conn, ["a", "b", "c"], "c") == {"b", "c"}
        poll = [("d", b"1"), ("d", b"2")]  # one id twice in a poll, with two digests
        polled = inbox.claim_batch(conn, poll, "c", key=lambda m: m[0], payload_hash=lambda m: m[1])
        assert polled == [("d", b"1")]
        assert store.receive(conn, "s", {"n": 1})
        assert store.receive_many(conn, [Incoming("s", {"n": 1}), Incoming("t", {})]) == {"t"}
    assert hooks.reports == [
        (1, 0, 0),  # a, new
        (0, 1, 0),  # a, a redelivery
        (2, 1, 0),  # a batch
        (1, 0, 0),  # a poll: d claimed once...
        (0, 0, 1),  # ...its second copy with another digest, recorded
        (1, 0, 0),  # a store receive
        (1, 1, 0),  # a store batch
    ]
    with engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(inbox.table)) == 4


def test_a_collision_that_raises_is_reported_as_one(engine: sa.Engine) -> None:
    hooks = Claims()
    metadata = sa.MetaData()
    inbox = Inbox(metadata, hooks=hooks, consumers=False)
    metadata.create_all(engine)
    with engine.begin() as conn:
        inbox.claim(conn, "a", "c", payload_hash=payload_hash({"n": 1}))
    with pytest.raises(MessageIdCollision), engine.begin() as conn:
        inbox.claim(conn, "a", "c", payload_hash=payload_hash({"n": 2}))
    assert hooks.reports == [(1, 0, 0), (0, 0, 1)]
