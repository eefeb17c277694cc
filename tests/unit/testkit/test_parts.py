"""The parts of the exactly-once checks that need no database: how a statement is told a
claim, the broker's deliveries of one message, idempotency keys among a call's arguments,
the failure modes and the report."""

from __future__ import annotations

import dataclasses

import pytest

from sa_inbox import idempotency_key
from sa_inbox.testing import MODES, Message
from sa_inbox.testing.messages import BROKER_FIELDS, Broker
from sa_inbox.testing.modes import CHECK_THEN_INSERT
from sa_inbox.testing.observe import statement_kind
from sa_inbox.testing.outbound import idempotency_keys
from sa_inbox.testing.report import CHECKS, Report


@pytest.mark.parametrize(
    ("statement", "kind"),
    [
        ("INSERT INTO inbox VALUES (?)", "write"),
        ("  insert or ignore into inbox values (?)", "write"),
        ("/* claim */ INSERT IGNORE INTO inbox VALUES (%s)", "write"),
        ("-- claim\nMERGE INTO inbox USING dual ON (1 = 0)", "write"),
        ("UPDATE accounts SET balance = balance + 1", "write"),
        ("DELETE FROM inbox", "write"),
        ("REPLACE INTO inbox VALUES (1)", "write"),
        ("WITH x AS (SELECT 1) INSERT INTO inbox SELECT * FROM x", "write"),
        ("WITH x AS (SELECT 1) SELECT * FROM x", "read"),
        ("SELECT count(*) FROM claims WHERE id = ?", "read"),
        ("(SELECT 1) UNION (SELECT 2)", "read"),
        ("SHOW WARNINGS", "read"),
        ("SAVEPOINT sa_savepoint_1", "other"),
        ("SET LOCAL lock_timeout = 1000", "other"),
        ("BEGIN", "other"),
        ("", "other"),
    ],
)
def test_a_statement_is_a_write_a_read_or_other(statement: str, kind: str) -> None:
    assert statement_kind(statement) == kind


def test_each_delivery_of_one_message_has_broker_metadata_of_its_own() -> None:
    broker = Broker()
    message = Message("pay-1", b"{}")
    first = broker.first(message)
    retry = broker.producer_retry(message)
    again = broker.redelivery(first)
    assert first.message is retry.message is again.message is message
    assert (first.delivery_count, first.redelivered) == (1, False)
    # a producer's retry is a new record: every broker field but the count differs
    assert all(
        getattr(first, name) != getattr(retry, name)
        for name in BROKER_FIELDS
        if name not in ("redelivered", "delivery_count", "partition")
    )
    # a redelivery is the same record, flagged, counted, under a new tag and handle
    assert (again.offset, again.entry_id, again.sequence) == (
        first.offset,
        first.entry_id,
        first.sequence,
    )
    assert (again.redelivered, again.delivery_count) == (True, 2)
    assert again.delivery_tag != first.delivery_tag
    assert again.receipt_handle != first.receipt_handle
    for name in BROKER_FIELDS:
        varied = broker.varied(first, name)
        changed = [
            f.name
            for f in dataclasses.fields(first)
            if getattr(first, f.name) != getattr(varied, f.name)
        ]
        assert changed == [name]


def test_a_delivery_becomes_the_adapters_delivery_keyed_as_given() -> None:
    first = Broker().first(Message("pay-1", b"body", {"x-trace": "t"}))
    delivery = first.to_delivery("pay-1")
    assert (delivery.message_id, delivery.body, dict(delivery.headers)) == (
        "pay-1",
        b"body",
        {"x-trace": "t"},
    )
    assert delivery.broker_ref == f"delivery tag {first.delivery_tag}"


def test_idempotency_keys_are_found_in_arguments_and_their_headers() -> None:
    key = idempotency_key("pay-1", "billing", "charge")
    assert idempotency_keys([500, key]) == (key,)
    assert idempotency_keys([{"headers": {"Idempotency-Key": key}}]) == (key,)
    assert idempotency_keys([[key]]) == (key,)
    assert idempotency_keys([{"a": {"b": {"c": key}}}]) == ()  # deeper than two levels
    assert idempotency_keys(["pay-1", "00000000-0000-4000-8000-000000000000", 7]) == ()


def test_every_failure_mode_has_a_rule_and_a_fix() -> None:
    assert len(MODES) >= 18
    for name, mode in MODES.items():
        assert mode.name == name and name == name.lower() and " " not in name
        assert mode.title and mode.rule.strip() and mode.fix.strip()


def test_the_report_names_the_mode_the_rule_and_the_fix_of_each_finding() -> None:
    report = Report("billing.apply on sqlite:///x.db")
    report.add("concurrent", CHECK_THEN_INSERT, "4 of 4 deliveries committed a change")
    report.skip("crash_after_commit", "needs os.fork")
    text = report.render()
    lines = text.splitlines()
    assert lines[0] == "exactly once: billing.apply on sqlite:///x.db: 1 of 4 checks failed"
    assert "  concurrent duplicate                 FAILED  [check-then-insert]" in lines
    assert any(
        line.startswith("  crash between commit and ack") and "not run" in line for line in lines
    )
    assert lines[-4:] == [
        "[check-then-insert] a check-then-insert dedup (concurrent duplicate)",
        "  seen: 4 of 4 deliveries committed a change",
        f'  the rule: "{CHECK_THEN_INSERT.rule}"',
        f"  fix: {CHECK_THEN_INSERT.fix}",
    ]
    assert report.modes() == ["check-then-insert"] and not report.passed
    assert len(CHECKS) == 5
