"""Consumers written wrong, each failed by the checks with the failure mode it commits, what
was seen, and the fix, on every database, sync and async: a SELECT-first dedup, an ack
before the commit, a key from the delivery tag (in a key function and in a consumer of the
user's own), a dedup table without a unique constraint, a handler that commits, an
outbound call without an idempotency key, work left running, and an adapter whose key
header the producer does not set."""

from __future__ import annotations

import pytest

from tests.backends.testkit.conftest import (
    CONSUMER,
    HANDLER,
    Case,
    assert_case,
    literal,
    user_run,
)
from tests.support.kit_app import is_async

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.slow


def failing(
    check: str, mode: str, title: str, seen: str, fix: str, also: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """What the report shows of one finding: the check's line tagged with the mode (and
    the later checks of ``also`` tagged with it too), the finding's heading, what was seen,
    the fix."""
    tag = literal(f"[{mode}]")
    return (
        "*ExactlyOnceViolation: exactly once: *checks failed*",
        f"*{check}*FAILED*{tag}*",
        *(f"*{later}*FAILED*{tag}*" for later in also),
        f"*{tag} {title} ({check})",
        f"*  seen: {literal(seen)}",
        f"*  fix: {literal(fix)}",
    )


SELECT_FIRST = failing(
    "concurrent duplicate",
    "check-then-insert",
    "a check-then-insert dedup",
    "*deliveries failed instead of being skipped*",
    "Insert the claim first*",
)
ACK_BEFORE_COMMIT = failing(
    "sequential duplicate",
    "ack-before-commit",
    "ack before commit",
    "when the first delivery was acked, 2 changed row(s) of the delivery were not committed "
    "yet and the message's state read from another session was still 0*",
    "Ack only after the commit has returned*",
)
TAG_KEY = failing(
    "key stability",
    "key-changes-per-delivery",
    "a key that changes per delivery",
    "one message was keyed 'tag-*' on its first delivery, 'tag-*' on a producer's retry, "
    "'tag-*' on the broker's redelivery; the key changes with the delivery tag",
    "Key the claim on the producer's id*",
    also=("sequential duplicate", "concurrent duplicate", "crash between commit and ack"),
)
TAG_KEYED_CONSUMER = failing(
    "sequential duplicate",
    "key-changes-per-delivery",
    "a key that changes per delivery",
    "the state went from 1 to 2 on the second delivery; the first delivery's exact metadata "
    "again was skipped, so the key comes from the broker's metadata: the delivery tag",
    "Key the claim on the producer's id*",
    also=("concurrent duplicate", "crash between commit and ack"),
)
LOOSE_CLAIM = failing(
    "sequential duplicate",
    "no-unique-constraint",
    "a dedup table without a unique constraint",
    "the state went from 1 to 2 on the second delivery: its claim (its first write) "
    "inserted 1 row(s) for an id the first delivery had committed, instead of conflicting",
    "Make (message_id, consumer_name) the dedup table's primary key*",
    also=("concurrent duplicate", "crash between commit and ack"),
)
COMMITS = failing(
    "sequential duplicate",
    "handler-ends-transaction",
    "a handler that commits or rolls back",
    "the first delivery was handed back for redelivery (HandlerEndedTransaction: *",
    "Remove the handler's commit() / rollback()*",
)
UNKEYED_CALL = failing(
    "crash before commit",
    "side-effect-repeats",
    "a side effect outside the database",
    "charge*(500) ran in the delivery killed before its commit, and charge*(500) again in "
    "the redelivery, with no idempotency key in common",
    "Give the call sa_inbox.idempotency_key(message_id, consumer_name, effect)*",
)
MISSING_KEY = failing(
    "key stability",
    "missing-key",
    "a message without the key the consumer reads",
    "the consumer found no key in the message the factory made*",
    "Make the producer set the key where the consumer reads it*",
)


def cases(asynchronous: bool) -> list[Case]:
    """The wrong consumers of one half (``_async`` names for asyncio)."""
    s = "_async" if asynchronous else ""
    found = [
        Case("select_first", f"consumer=app.select_first{s}, {CONSUMER}", SELECT_FIRST),
        Case(
            "ack_before_commit", f"consumer=app.ack_before_commit{s}, {CONSUMER}", ACK_BEFORE_COMMIT
        ),
        Case("tag_key", f"app.apply{s}, key=app.tag_key, {HANDLER}", TAG_KEY),
        Case("tag_keyed_consumer", f"consumer=app.tag_keyed{s}, {CONSUMER}", TAG_KEYED_CONSUMER),
        Case("loose_claim", f"consumer=app.loose_claim{s}, {CONSUMER}", LOOSE_CLAIM),
        Case("handler_commits", f"app.apply_and_commit{s}, {HANDLER}", COMMITS),
        Case(
            "unkeyed_outbound_call",
            f'app.apply_and_charge{s}, {HANDLER}, outbound=["tests.support.kit_app:charge{s}"]',
            UNKEYED_CALL,
        ),
    ]
    if asynchronous:
        found.append(
            Case(
                "work_left_running",
                f"app.apply_leaving_a_task, {HANDLER}",
                failing(
                    "sequential duplicate",
                    "work-left-running",
                    "a handler that leaves work running",
                    "the first delivery was handed back for redelivery (AsyncHandlerError: "
                    "*receipt-mailer*",
                    "Await every coroutine and task*",
                ),
            )
        )
    else:
        found += [
            Case(
                "work_left_running",
                f"app.apply_leaving_a_thread, {HANDLER}",
                failing(
                    "sequential duplicate",
                    "work-left-running",
                    "a handler that leaves work running",
                    "the first delivery returned with receipt-mailer still running",
                    "Await every coroutine and task*",
                ),
            ),
            Case(
                "adapter_key_header",
                "consumer, message=app.payment, state=app.ledger_rows",
                MISSING_KEY,
                before=(
                    '    consumer = Consumer("amqp://127.0.0.1:1/", "payments", '
                    'session_factory=Session, inbox=app.inbox, consumer_name="billing", '
                    "handler=app.apply, "
                    'options=DeliveryOptions(key_source="x-payment-id"))\n'
                ),
                imports=(
                    "from sa_inbox.brokers import DeliveryOptions\n"
                    "from sa_inbox.brokers.rabbitmq import Consumer"
                ),
            ),
        ]
    return found


NAMES = [c.name for c in cases(False) if c.name in {c.name for c in cases(True)}]


@pytest.mark.parametrize("name", NAMES)
def test_a_wrong_consumer_fails_with_its_failure_mode_and_fix(
    name: str, pytester: pytest.Pytester, any_url: str
) -> None:
    table = cases(is_async(any_url))
    (case,) = [c for c in table if c.name == name]
    assert_case(user_run(pytester, "wrong", any_url, table), case)


def test_an_adapter_reading_a_key_the_producer_does_not_set_fails(
    pytester: pytest.Pytester, sync_url: str
) -> None:
    table = cases(False)
    (case,) = [c for c in table if c.name == "adapter_key_header"]
    assert_case(user_run(pytester, "wrong", sync_url, table), case)
