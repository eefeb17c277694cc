"""The chaos workload: the plan (what is published, what is expected) and the handler, the
handler run through :func:`sa_inbox.brokers.process` on a real SQLite database."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox.brokers import DeadLetterReason, Delivery, Disposition, process
from sa_inbox.chaos.workload import (
    CONSUMER,
    ChaosPlan,
    decode,
    encode,
    make_plan,
    payment_handler,
)
from sa_inbox.demo.app import DemoSchema


class Recorder:
    """A settler recording what the adapter would send to its broker."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def ack(self) -> None:
        self.calls.append(("ack",))

    def retry(self) -> None:
        self.calls.append(("retry",))

    def dead_letter(self, reason: DeadLetterReason, detail: str) -> None:
        self.calls.append(("dead_letter", reason))


def test_the_plan_is_deterministic_and_counts_its_publishes(plan: ChaosPlan) -> None:
    assert make_plan(200, seed=11, duplicates=0.2, poison=3, accounts=10) == plan
    assert make_plan(200, seed=12, duplicates=0.2, poison=3, accounts=10) != plan
    ids = Counter(message_id for message_id, _ in plan.publishes)
    assert len(plan.payments) == 200 and len(plan.poison_ids) == 3
    assert set(ids) == set(plan.payments) | plan.poison_ids
    assert plan.duplicate_publishes == len(plan.publishes) - 203 > 0
    assert sum(count - 1 for count in ids.values()) == plan.duplicate_publishes
    assert all(ids[poison] == 1 for poison in plan.poison_ids)


def test_a_producer_retry_republishes_the_same_body_later(plan: ChaosPlan) -> None:
    first: dict[str, tuple[int, bytes]] = {}
    for position, (message_id, body) in enumerate(plan.publishes):
        if message_id in first:
            assert body == first[message_id][1]
            assert position >= first[message_id][0] + 2
        else:
            first[message_id] = (position, body)


def test_expected_balances_sum_the_unique_payments_only(plan: ChaosPlan) -> None:
    expected = plan.expected_balances()
    assert sorted(expected) == plan.accounts
    assert sum(expected.values()) == sum(cents for _, cents in plan.payments.values())
    bodies = dict(plan.publishes)
    for poison in plan.poison_ids:
        assert decode(bodies[poison])[2] is True
    account, cents, poison_flag = decode(bodies[next(iter(plan.payments))])
    assert (account, cents) == next(iter(plan.payments.values())) and not poison_flag


def test_encode_and_decode_round_trip() -> None:
    assert decode(encode("acct-0001", -250)) == ("acct-0001", -250, False)
    assert decode(encode("acct-0002", 1, poison=True)) == ("acct-0002", 1, True)
    with pytest.raises(ValueError):
        decode(b"[1, 2]")


def test_plan_refuses_bad_counts() -> None:
    with pytest.raises(ValueError):
        make_plan(10, seed=1, poison=-1)
    with pytest.raises(ValueError):
        make_plan(0, seed=1)
    with pytest.raises(ValueError):
        make_plan(10, seed=1, duplicates=1.5)


def _deliver(
    engine: sa.Engine, schema: DemoSchema, message_id: str, body: bytes, count: int
) -> tuple[Disposition, list[tuple[Any, ...]]]:
    settler = Recorder()
    settlement = process(
        Delivery(message_id, body, delivery_count=count),
        settler,
        session_factory=sessionmaker(engine),
        inbox=schema.inbox,
        consumer_name=CONSUMER,
        handler=payment_handler(schema),
        max_deliveries=3,
    )
    return settlement.disposition, settler.calls


def test_the_handler_applies_a_payment_once(
    engine: sa.Engine, schema: DemoSchema, plan: ChaosPlan
) -> None:
    message_id, body = next(p for p in plan.publishes if p[0] in plan.payments)
    account, cents = plan.payments[message_id]
    assert _deliver(engine, schema, message_id, body, 1) == (Disposition.PROCESSED, [("ack",)])
    assert _deliver(engine, schema, message_id, body, 2) == (Disposition.DUPLICATE, [("ack",)])
    state = schema.read_state(engine)
    assert (state.ledger_rows, state.inbox_rows) == (1, 1)
    assert state.balances[account] == cents


def test_a_poison_message_is_retried_then_dead_lettered_never_applied(
    engine: sa.Engine, schema: DemoSchema, plan: ChaosPlan
) -> None:
    poison = next(p for p in plan.publishes if p[0] in plan.poison_ids)
    assert _deliver(engine, schema, *poison, 1) == (Disposition.RETRY, [("retry",)])
    assert _deliver(engine, schema, *poison, 3) == (
        Disposition.DEAD_LETTERED,
        [("dead_letter", DeadLetterReason.DELIVERY_LIMIT)],
    )
    state = schema.read_state(engine)
    assert (state.ledger_rows, state.inbox_rows) == (0, 0)
    assert set(state.balances.values()) == {0}
