"""Consumers written right pass every check, on every database, sync and async: an sa-inbox
handler, one whose outbound call carries an idempotency key, a consumer of the user's own
claiming with ``Inbox.claim()`` by hand, and broker adapters made as in production."""

from __future__ import annotations

import pytest

from tests.backends.testkit.conftest import (
    CONSUMER,
    HANDLER,
    Case,
    assert_case,
    user_run,
)
from tests.support.kit_app import is_async

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.slow

#: Every check ran and passed: what the report printed by the user's test shows.
PASSED = (
    "*exactly once: *every check passed*",
    "*key stability*passed*",
    "*sequential duplicate*passed*",
    "*concurrent duplicate*passed*(4 *; 4 held together at the claim; 1 applied, 3 skipped "
    "and acked)*",
    "*crash between commit and ack*passed*(a child process SIGKILLed at its ack)*",
    "*crash before commit*passed*(a child process SIGKILLed at its commit*",
)
RABBITMQ = (
    '    consumer = Consumer("amqp://guest:guest@127.0.0.1:1/", "payments", '
    'session_factory=Session, inbox=app.inbox, consumer_name="billing", handler=app.apply)\n'
)
REDIS = (
    '    consumer = AsyncConsumer(redis.asyncio.Redis(port=1), "payments", '
    'group="billing", session_factory=Session, inbox=app.inbox, handler=app.apply_async)\n'
)


def cases(asynchronous: bool) -> list[Case]:
    """The right consumers of one half (``_async`` names for asyncio)."""
    s = "_async" if asynchronous else ""
    found = [
        Case("handler", f"app.apply{s}, {HANDLER}", PASSED, outcome="passed"),
        Case(
            "keyed_outbound_call",
            f"app.apply_and_charge_keyed{s}, {HANDLER}, "
            f'outbound=["tests.support.kit_app:charge{s}"]',
            (*PASSED[:-1], "*crash before commit*passed*"),
            outcome="passed",
        ),
        Case(
            "own_consumer",
            f"consumer=app.claim_first{s}, {CONSUMER}",
            ("*every check passed*", "*key stability*not run*", *PASSED[2:]),
            outcome="passed",
        ),
    ]
    if asynchronous:
        found.append(
            Case(
                "redis_adapter",
                "consumer, message=app.payment, state=app.ledger_rows",
                (
                    "*AsyncConsumer of payments (consumer 'billing')*every check passed",
                    *PASSED[1:],
                ),
                before=REDIS,
                imports="import redis.asyncio\nfrom sa_inbox.brokers.redis import AsyncConsumer",
                outcome="passed",
            )
        )
    else:
        found.append(
            Case(
                "rabbitmq_adapter",
                "consumer, message=app.payment, state=app.ledger_rows",
                (
                    "*Consumer of payments (consumer 'billing')*every check passed",
                    *PASSED[1:],
                ),
                before=RABBITMQ,
                imports="from sa_inbox.brokers.rabbitmq import Consumer",
                outcome="passed",
            )
        )
    return found


NAMES = ["handler", "keyed_outbound_call", "own_consumer", "adapter"]


@pytest.mark.parametrize("name", NAMES)
def test_a_right_consumer_passes_every_check(
    name: str, pytester: pytest.Pytester, any_url: str
) -> None:
    asynchronous = is_async(any_url)
    table = cases(asynchronous)
    run = user_run(pytester, "right", any_url, table)
    (case,) = [c for c in table if c.name == name or c.name.endswith(f"_{name}")]
    assert_case(run, case)
