"""The chaos run's verification on a real SQLite database: a correct run passes, and each
kind of damage (an id applied twice, a poison message applied, a lost payment, something
unsettled, a dead letter that is not poison) fails its own check; a poison dead letter
published twice does not."""

from __future__ import annotations

import sqlalchemy as sa
from rich.console import Console
from sqlalchemy.orm import Session

from sa_inbox.chaos.report import ChaosResult, render
from sa_inbox.chaos.tally import Tally
from sa_inbox.chaos.verify import Verification, read_state, verify
from sa_inbox.chaos.workload import ChaosPlan
from sa_inbox.demo.app import DemoSchema


def _apply_all(engine: sa.Engine, schema: DemoSchema, plan: ChaosPlan) -> None:
    with Session(engine) as session, session.begin():
        for message_id, (account, cents) in plan.payments.items():
            schema.apply(session, message_id, account, cents)
            session.execute(
                schema.inbox.table.insert().values(message_id=message_id, consumer_name="c")
            )


def _verify(
    engine: sa.Engine,
    schema: DemoSchema,
    plan: ChaosPlan,
    *,
    unsettled: int = 0,
    dead: list[str] | None = None,
) -> Verification:
    dead_letters = sorted(plan.poison_ids) if dead is None else dead
    return verify(plan, read_state(engine, schema), unsettled=unsettled, dead_letters=dead_letters)


def _failed(v: Verification) -> list[str]:
    return [name for name, ok in v.checks.items() if not ok]


def test_every_payment_once_passes(engine: sa.Engine, schema: DemoSchema, plan: ChaosPlan) -> None:
    _apply_all(engine, schema, plan)
    v = _verify(engine, schema, plan)
    assert v.ok, v.checks
    assert v.ledger_rows == v.inbox_rows == v.unique_payments == 200
    assert v.actual_balance_cents == v.expected_balance_cents
    assert v.dead_letters == v.poison_ids and len(v.poison_ids) == 3


def test_an_id_applied_twice_is_named(
    engine: sa.Engine, schema: DemoSchema, plan: ChaosPlan
) -> None:
    _apply_all(engine, schema, plan)
    message_id, (account, cents) = next(iter(plan.payments.items()))
    with Session(engine) as session, session.begin():
        schema.apply(session, message_id, account, cents)
    v = _verify(engine, schema, plan)
    assert v.applied_twice == [message_id]
    assert _failed(v) == ["ledger_rows", "no_id_applied_twice", "balances"]
    assert v.account_mismatches == 1


def test_a_poison_message_applied_and_not_dead_lettered_fails(
    engine: sa.Engine, schema: DemoSchema, plan: ChaosPlan
) -> None:
    _apply_all(engine, schema, plan)
    poison = sorted(plan.poison_ids)[0]
    with Session(engine) as session, session.begin():
        schema.apply(session, poison, plan.accounts[0], 100)
    v = _verify(engine, schema, plan, dead=sorted(plan.poison_ids)[1:])
    assert v.unexpected_ids == [poison]
    assert _failed(v) == [
        "ledger_rows",
        "only_published_ids",
        "balances",
        "dead_letters_are_poison",
    ]


def test_a_lost_payment_and_unsettled_messages_fail(
    engine: sa.Engine, schema: DemoSchema, plan: ChaosPlan
) -> None:
    _apply_all(engine, schema, plan)
    lost, (account, cents) = next(iter(plan.payments.items()))
    with engine.begin() as conn:  # the payment's transaction never happened
        conn.execute(schema.ledger.delete().where(schema.ledger.c.message_id == lost))
        accounts = schema.accounts
        conn.execute(
            accounts.update()
            .where(accounts.c.account_id == account)
            .values(balance_cents=accounts.c.balance_cents - cents)
        )
        conn.execute(schema.inbox.table.delete().where(schema.inbox.table.c.message_id == lost))
    v = _verify(engine, schema, plan, unsettled=2)
    assert _failed(v) == ["ledger_rows", "balances", "inbox_claims", "nothing_unsettled"]


def test_the_report_renders_and_serialises(
    engine: sa.Engine, schema: DemoSchema, plan: ChaosPlan
) -> None:
    _apply_all(engine, schema, plan)
    result = ChaosResult(
        broker="redis://127.0.0.1:6379",
        backend="sqlite",
        name="q",
        consumers=3,
        kill_every=0.5,
        seed=11,
        published=len(plan.publishes),
        duplicate_publishes=plan.duplicate_publishes,
        poison=3,
        kills=4,
        crashes=0,
        elapsed_s=2.0,
        tally=Tally(deliveries=250, processed=200),
        verification=_verify(engine, schema, plan),
    )
    console = Console(record=True, width=120)
    console.print(render(result))
    text = console.export_text()
    assert "PASS" in text and "consumers SIGKILLed by the killer" in text
    data = result.to_json()
    assert data["ok"] is True and data["kills"] == 4
    assert data["messages_per_s"] == 101.5
    assert all(data["checks"].values())


def _killed_run(plan: ChaosPlan, v: Verification) -> tuple[ChaosResult, str]:
    """A RabbitMQ run of 9 kills verified as ``v``, and its report as text."""
    result = ChaosResult(
        broker="amqp://127.0.0.1:5672",
        backend="sqlite",
        name="q",
        consumers=3,
        kill_every=0.5,
        seed=11,
        published=len(plan.publishes),
        duplicate_publishes=plan.duplicate_publishes,
        poison=3,
        kills=9,
        crashes=0,
        elapsed_s=2.0,
        tally=Tally(),
        verification=v,
    )
    console = Console(record=True, width=200)
    console.print(render(result))
    return result, console.export_text()


def test_a_poison_dead_letter_published_twice_passes_and_is_counted(
    engine: sa.Engine, schema: DemoSchema, plan: ChaosPlan
) -> None:
    """A consumer killed between its dead-letter publish and its ack publishes that dead
    letter again on the redelivery: the poison is still all that was dead-lettered."""
    _apply_all(engine, schema, plan)
    poison = sorted(plan.poison_ids)
    v = _verify(engine, schema, plan, dead=sorted([*poison, poison[0]]))
    assert v.ok, v.checks
    assert v.dead_letters_repeated == 1
    result, text = _killed_run(plan, v)
    assert "PASS" in text and "dead letters published again" in text
    assert result.to_json()["dead_letters_repeated"] == 1


def test_a_payment_dead_lettered_by_kills_fails_with_a_hint(
    engine: sa.Engine, schema: DemoSchema, plan: ChaosPlan
) -> None:
    _apply_all(engine, schema, plan)
    killed = next(iter(plan.payments))
    v = _verify(engine, schema, plan, dead=sorted([*plan.poison_ids, killed]))
    assert _failed(v) == ["dead_letters_are_poison"]
    result, text = _killed_run(plan, v)
    assert "FAIL: dead_letters_are_poison" in text
    assert "1 payments were dead-lettered" in text and "--max-deliveries" in text
    assert result.to_json()["ok"] is False
