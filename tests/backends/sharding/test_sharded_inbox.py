"""The sharded inbox on two real PostgreSQL servers (shards ``a`` and ``b``).

Each shard holds the payments app's business tables (accounts, ledger) and the inbox table;
a message's shard key routes its claim and its payment to one shard, where they commit
together. Every test asserts the business state of both shards: ledger rows, balances,
inbox rows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox import Outcome, Result
from sa_inbox.collision import payload_hash
from sa_inbox.exc import MessageIdCollision, ShardKeyChanged, WrongShard
from sa_inbox.sharding import ShardedInbox
from tests.support.app import CONSUMER, App

pytestmark = [pytest.mark.backend, pytest.mark.slow]

AMOUNT = Decimal("10.00")
ACCOUNT = 1


@pytest.fixture
def apps(shard_engines: dict[str, sa.Engine]) -> Iterator[dict[str, App]]:
    apps = {name: App(engine) for name, engine in shard_engines.items()}
    for app in apps.values():
        app.reset()
    yield apps
    for app in apps.values():
        app.drop()


def sharded(apps: dict[str, App], **kw: Any) -> ShardedInbox:
    return ShardedInbox(apps["a"].inbox, {name: app.engine for name, app in apps.items()}, **kw)


def keys_on(router: ShardedInbox, shard: str, count: int) -> list[str]:
    """``count`` tenant keys that route to ``shard``."""
    found = [key for key in (f"tenant-{i}" for i in range(1000)) if router.shard_for(key) == shard]
    return found[:count]


class Acks:
    """Counts acks and nacks of deliveries (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: list[str] = []
        self.nacked: list[str] = []

    def of(self, message_id: str) -> dict[str, Callable[[], None]]:
        def ack() -> None:
            with self.lock:
                self.acked.append(message_id)

        def nack() -> None:
            with self.lock:
                self.nacked.append(message_id)

        return {"ack": ack, "nack": nack}


def deliver(
    router: ShardedInbox,
    apps: dict[str, App],
    acks: Acks,
    shard_key: str,
    message_id: str,
    *,
    amount: Decimal = AMOUNT,
    handler: Callable[[Session], None] | None = None,
    **kw: Any,
) -> Result:
    """One delivery: the payment on the shard of ``shard_key``, through the router."""
    app = apps[router.shard_for(shard_key)]

    def pay(session: Session) -> None:
        app.apply_payment(session, message_id, ACCOUNT, amount)
        if handler is not None:
            handler(session)

    return router.handle(shard_key, message_id, CONSUMER, pay, **acks.of(message_id), **kw)


def state(apps: dict[str, App]) -> dict[str, tuple[int, Decimal, int]]:
    """Per shard: ledger rows, balance of the account, inbox rows."""
    return {
        name: (app.ledger_rows(), app.balance(ACCOUNT), app.inbox_rows())
        for name, app in apps.items()
    }


def test_each_message_is_applied_once_on_the_shard_of_its_key(apps: dict[str, App]) -> None:
    router = sharded(apps)
    acks = Acks()
    keys = {f"m-{i}": f"tenant-{i % 7}" for i in range(30)}
    for _ in range(2):  # every message delivered twice
        for message_id, key in keys.items():
            deliver(router, apps, acks, key, message_id)
    per_shard = {name: [m for m, k in keys.items() if router.shard_for(k) == name] for name in apps}
    assert all(per_shard.values()), per_shard  # both shards get messages
    for name, app in apps.items():
        expected = len(per_shard[name])
        assert state(apps)[name] == (expected, AMOUNT * expected, expected)
        with app.engine.connect() as conn:
            ledger_ids = set(conn.execute(sa.select(app.ledger.c.message_id)).scalars())
        assert ledger_ids == set(per_shard[name])
    assert len(acks.acked) == 60 and acks.nacked == []
    message_id, key = next(iter(keys.items()))
    assert router.is_processed(message_id, CONSUMER, shard_key=key)


def test_a_redelivery_under_another_key_of_the_same_shard_is_refused(
    apps: dict[str, App],
) -> None:
    router = sharded(apps)
    acks = Acks()
    first, second = keys_on(router, "a", 2)
    assert deliver(router, apps, acks, first, "m-1").outcome is Outcome.PROCESSED
    result = deliver(router, apps, acks, second, "m-1")
    assert result.outcome is Outcome.FAILED
    assert isinstance(result.error, ShardKeyChanged)
    assert (result.error.shard, result.error.found_on) == ("a", "a")
    assert acks.acked == ["m-1"] and acks.nacked == ["m-1"]
    assert state(apps) == {"a": (1, AMOUNT, 1), "b": (0, 0, 0)}
    # the same key again is a plain duplicate
    assert deliver(router, apps, acks, first, "m-1").outcome is Outcome.DUPLICATE
    assert state(apps)["a"] == (1, AMOUNT, 1)


def test_a_changed_payload_under_the_same_key_is_a_collision(apps: dict[str, App]) -> None:
    router = sharded(apps)
    acks = Acks()
    (key,) = keys_on(router, "b", 1)
    one, other = payload_hash({"amount": "10.00"}), payload_hash({"amount": "99.00"})
    assert deliver(router, apps, acks, key, "m-1", payload_hash=one).outcome is Outcome.PROCESSED
    assert deliver(router, apps, acks, key, "m-1", payload_hash=one).outcome is Outcome.DUPLICATE
    assert deliver(router, apps, acks, key, "m-1").outcome is Outcome.DUPLICATE  # no digest
    result = deliver(router, apps, acks, key, "m-1", payload_hash=other)
    assert isinstance(result.error, MessageIdCollision)
    assert state(apps) == {"a": (0, 0, 0), "b": (1, AMOUNT, 1)}


def test_a_redelivery_routed_to_another_shard_is_refused_only_with_the_check(
    apps: dict[str, App],
) -> None:
    acks = Acks()
    plain, checked = sharded(apps), sharded(apps, check_other_shards=True)
    (key_a,) = keys_on(plain, "a", 1)
    (key_b,) = keys_on(plain, "b", 1)
    assert deliver(checked, apps, acks, key_a, "m-1").outcome is Outcome.PROCESSED
    # with the check: the claim on b finds m-1 on a, rolls back, nacks
    result = deliver(checked, apps, acks, key_b, "m-1")
    assert isinstance(result.error, ShardKeyChanged)
    assert (result.error.shard, result.error.found_on) == ("b", "a")
    assert state(apps) == {"a": (1, AMOUNT, 1), "b": (0, 0, 0)}
    # without it, shard b has no claim of m-1: the limit the check exists for
    assert deliver(plain, apps, acks, key_b, "m-1").outcome is Outcome.PROCESSED
    assert state(apps) == {"a": (1, AMOUNT, 1), "b": (1, AMOUNT, 1)}


def test_the_cross_shard_check_cannot_see_a_delivery_not_yet_committed(
    apps: dict[str, App],
) -> None:
    """The documented race: two deliveries of one message under keys of two shards, the
    first still uncommitted when the second checks; both apply."""
    router = sharded(apps, check_other_shards=True)
    acks = Acks()
    (key_a,) = keys_on(router, "a", 1)
    (key_b,) = keys_on(router, "b", 1)
    claimed_on_a, b_done = threading.Event(), threading.Event()
    results: list[Result] = []

    def hold(session: Session) -> None:
        claimed_on_a.set()
        assert b_done.wait(30)

    thread = threading.Thread(
        target=lambda: results.append(deliver(router, apps, acks, key_a, "m-1", handler=hold))
    )
    thread.start()
    assert claimed_on_a.wait(30)
    try:
        second = deliver(router, apps, acks, key_b, "m-1")
    finally:
        b_done.set()
        thread.join(30)
    assert second.outcome is Outcome.PROCESSED and results[0].outcome is Outcome.PROCESSED
    assert state(apps) == {"a": (1, AMOUNT, 1), "b": (1, AMOUNT, 1)}


def test_a_claim_on_a_session_of_the_other_shard_is_refused(apps: dict[str, App]) -> None:
    router = sharded(apps)
    (key_a,) = keys_on(router, "a", 1)
    with (
        Session(apps["b"].engine) as session,
        session.begin(),
        pytest.raises(WrongShard, match="not on shard 'a'"),
    ):
        router.claim(session, "m-1", CONSUMER, shard_key=key_a)
    with router.session_factory(key_a)() as session, session.begin():
        assert router.claim(session, "m-1", CONSUMER, shard_key=key_a)
    assert [app.inbox_rows() for app in apps.values()] == [1, 0]


def test_concurrent_deliveries_at_a_barrier_apply_each_message_once(
    apps: dict[str, App],
) -> None:
    """8 threads released together deliver the same 16 messages (4 threads under the
    message's key, 4 under another key of the same shard): each message is applied once,
    every other delivery is a duplicate or refused."""
    router = sharded(apps)
    acks = Acks()
    messages = [
        (f"m-{shard}-{i}", keys[2 * i], keys[2 * i + 1])
        for shard in ("a", "b")
        for keys in [keys_on(router, shard, 16)]
        for i in range(8)
    ]
    barrier = threading.Barrier(8)
    results: list[tuple[str, bool, Result]] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        changed = index % 2 == 1
        barrier.wait(30)
        for message_id, key, other in messages:
            result = deliver(router, apps, acks, other if changed else key, message_id)
            with lock:
                results.append((message_id, changed, result))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(results) == 8 * len(messages)
    for message_id, _, _ in messages:
        outcomes = [(changed, r) for m, changed, r in results if m == message_id]
        processed = [changed for changed, r in outcomes if r.outcome is Outcome.PROCESSED]
        assert len(processed) == 1, message_id
        winner = processed[0]
        for changed, r in outcomes:
            if r.outcome is Outcome.PROCESSED:
                continue
            if changed == winner:
                assert r.outcome is Outcome.DUPLICATE, (message_id, r)
            else:
                assert isinstance(r.error, ShardKeyChanged), (message_id, r)
    per_shard = {name: sum(router.shard_for(k) == name for _, k, _ in messages) for name in apps}
    assert state(apps) == {
        name: (count, AMOUNT * count, count) for name, count in per_shard.items()
    }
