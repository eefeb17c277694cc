"""The dead-letter API refuses what it cannot serve with a typed error before it connects:
every call here names a broker on a port nothing listens on, so an argument that got past
the checks would raise :class:`~sa_inbox.exc.DeadLetterQueueUnavailable` instead. And the target
URLs of ``stats --dead-letters``: where the name ends and the broker's URL begins, and the
password hidden from every report."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sa_inbox.brokers import DeadLetterReason
from sa_inbox.brokers import dead_letters as dl
from sa_inbox.brokers.dead_letters import DeadLetterTarget
from sa_inbox.brokers.dead_letters.nats import replay_headers as nats_headers
from sa_inbox.brokers.dead_letters.rabbitmq import replay_headers as amqp_headers
from sa_inbox.exc import DeadLetterQueueUnavailable, InvalidArgument, UnsupportedBroker

NOWHERE = "amqp://guest:guest@127.0.0.1:1/"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: dl.count("kafka://127.0.0.1:1", "q"), UnsupportedBroker),
        (lambda: dl.count("127.0.0.1:1", "q"), InvalidArgument),
        (lambda: dl.count(None, "q"), InvalidArgument),  # type: ignore[arg-type]
        (lambda: dl.count(NOWHERE, ""), InvalidArgument),
        (lambda: dl.count(NOWHERE, " q"), InvalidArgument),
        (lambda: dl.count(NOWHERE, b"q"), InvalidArgument),  # type: ignore[arg-type]
        (lambda: dl.count(NOWHERE, "q" * 256), InvalidArgument),
        (lambda: dl.count("nats://127.0.0.1:1", "payments.dead"), InvalidArgument),
        (lambda: dl.count("nats://127.0.0.1:1", "PAY>"), InvalidArgument),
        (lambda: dl.count(NOWHERE, "q", timeout=0), InvalidArgument),
        (lambda: dl.count(NOWHERE, "q", timeout=float("inf")), InvalidArgument),
        (lambda: dl.count(NOWHERE, "q", timeout=True), InvalidArgument),
        (lambda: dl.peek(NOWHERE, "q", reason="poison"), InvalidArgument),
        (lambda: dl.peek(NOWHERE, "q", limit=0), InvalidArgument),
        (lambda: dl.replay(NOWHERE, "q", dry_run="no"), InvalidArgument),  # type: ignore[arg-type]
        (lambda: dl.replay(NOWHERE, "q", dry_run=False, limit=True), InvalidArgument),
        (lambda: dl.replay(NOWHERE, "q", dry_run=False, limit=2.5), InvalidArgument),  # type: ignore[arg-type]
        (lambda: dl.replay(NOWHERE, "q", dry_run=False, reason=3), InvalidArgument),  # type: ignore[arg-type]
        (lambda: dl.sample([], timeout=-1), InvalidArgument),
        (lambda: DeadLetterTarget.parse("amqp://127.0.0.1:1/"), InvalidArgument),
        (lambda: DeadLetterTarget.parse("amqp://127.0.0.1:1"), InvalidArgument),
        (lambda: DeadLetterTarget.parse("payments.dead"), InvalidArgument),
        (lambda: DeadLetterTarget.parse("sqs://127.0.0.1:1/q"), UnsupportedBroker),
    ],
)
def test_bad_arguments_are_refused_before_connecting(
    call: Callable[[], object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        call()
    assert issubclass(error, ValueError)


@pytest.mark.parametrize("reason", [DeadLetterReason.DELIVERY_LIMIT, "missing_message_id", None])
def test_good_arguments_get_as_far_as_connecting(reason: object) -> None:
    with pytest.raises(DeadLetterQueueUnavailable):
        dl.replay(NOWHERE, "q", dry_run=True, reason=reason, limit=5, timeout=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "broker", "url", "queue"),
    [
        (
            "amqp://guest:pw@host:5672/%2F/payments.dead-letter",
            "rabbitmq",
            "amqp://guest:pw@host:5672/%2F",
            "payments.dead-letter",
        ),
        ("amqp://host/payments.dead-letter", "rabbitmq", "amqp://host", "payments.dead-letter"),
        ("amqps://host/vh/q?heartbeat=30", "rabbitmq", "amqps://host/vh?heartbeat=30", "q"),
        ("redis://host:6379/0/payments:dead", "redis", "redis://host:6379/0", "payments:dead"),
        ("redis://:pw@host/payments:dead", "redis", "redis://:pw@host", "payments:dead"),
        ("redis://host/0/a%2Fb", "redis", "redis://host/0", "a/b"),
        ("nats://host:4222/PAYMENTS_DEAD", "nats", "nats://host:4222", "PAYMENTS_DEAD"),
        ("tls://host:4222/PAYMENTS_DEAD", "nats", "tls://host:4222", "PAYMENTS_DEAD"),
    ],
)
def test_the_last_path_segment_is_the_name(spec: str, broker: str, url: str, queue: str) -> None:
    assert DeadLetterTarget.parse(spec) == DeadLetterTarget(broker, url, queue)


@pytest.mark.parametrize(
    ("url", "queue", "shown"),
    [
        ("amqp://guest:secret@host/%2F", "q", "amqp://guest:***@host/%2F/q"),
        ("redis://:secret@host:6379/0", "s:dead", "redis://:***@host:6379/0/s:dead"),
        ("nats://token-secret@host:4222", "DEAD", "nats://***@host:4222/DEAD"),
        ("nats://host:4222", "DEAD", "nats://host:4222/DEAD"),
    ],
)
def test_reports_never_show_the_password(url: str, queue: str, shown: str) -> None:
    target = DeadLetterTarget.of(url, queue)
    assert target.display == shown and "secret" not in target.display


def test_a_replayed_amqp_message_leaves_what_the_adapter_and_the_broker_added() -> None:
    headers = {
        "payment-id": "pay-1",
        "x-sa-inbox-reason": "delivery_limit",
        "x-sa-inbox-detail": "RuntimeError",
        "x-sa-inbox-queue": "payments",
        "x-delivery-count": 2,
        "x-death": [{"queue": "payments", "reason": "rejected"}],
        "x-first-death-queue": "payments",
        "x-last-death-reason": "rejected",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }
    assert amqp_headers(headers) == {
        "payment-id": "pay-1",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }


def test_a_replayed_nats_message_gets_its_own_nats_msg_id_back() -> None:
    dead = {
        "Sa-Inbox-Dead-Letter-Reason": "delivery_limit",
        "Sa-Inbox-Message-Id": "pay-1",
        "Sa-Inbox-Nats-Msg-Id": "pay-1",
        "Sa-Inbox-Subject": "payments.in",
        "Nats-Msg-Id": "PAYMENTS:7",  # the dead letter's own
        "Trace": "t",
    }
    assert nats_headers(dead) == {"Nats-Msg-Id": "pay-1", "Trace": "t"}
    custom = {"Sa-Inbox-Message-Id": "pay-2", "Idempotency-Key": "pay-2", "Nats-Msg-Id": "P:8"}
    assert nats_headers(custom) == {"Idempotency-Key": "pay-2"}  # the key is in its header
    older = {"Sa-Inbox-Message-Id": "pay-3", "Nats-Msg-Id": "P:9"}  # made before the header
    assert nats_headers(older) == {"Nats-Msg-Id": "pay-3"}
