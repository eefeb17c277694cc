"""The fault helpers' refusals and registry (no broker, no database): what they refuse
before anything runs, the broker faults an adapter package registers, the proxy's refusal
of a database without a server, and the inject runner's arguments."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from sa_inbox.exc import InvalidArgument, UnsupportedBroker
from sa_inbox.testing import Message, faults
from sa_inbox.testing.proxy import DatabaseProxy


def test_publish_twice_needs_a_keyed_message_and_copies() -> None:
    published: list[Any] = []

    class Publisher:
        def publish(self, message: Any) -> None:
            published.append(message)

        def close(self) -> None:
            raise AssertionError("a publisher of the caller's is not closed")

    with pytest.raises(InvalidArgument, match="message_id"):
        faults.publish_twice(Publisher(), "payments", Message(None, b"{}"))
    with pytest.raises(InvalidArgument, match="copies"):
        faults.publish_twice(Publisher(), "payments", Message("pay-1"), copies=0)
    assert published == []
    faults.publish_twice(Publisher(), "payments", Message("pay-1", b"{}", {"n": 1}))
    assert [
        (m.message_id, m.destination, m.payload, dict(m.headers), m.attempts) for m in published
    ] == [
        ("pay-1", "payments", b"{}", {"n": "1"}, 1),
        ("pay-1", "payments", b"{}", {"n": "1"}, 2),
    ]


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: faults.crash_after_commit(0), "times"),
        (lambda: faults.stall_before_commit(0), "seconds"),
        (lambda: faults.stall_before_commit(1, times=0), "times"),
        (lambda: faults.claims_held_together(1).__enter__(), "parties"),
        (lambda: faults.claims_held_together(2, timeout=0).__enter__(), "timeout"),
    ],
)
def test_faults_refuse_what_cannot_be_injected(call: Any, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        call()


def test_a_broker_fault_is_what_its_adapter_registered() -> None:
    calls: list[tuple[Any, ...]] = []
    faults.register_broker_fault("kafkatest", "rebalance", lambda url, *a: calls.append((url, *a)))
    faults.broker_fault("kafkatest://host:9092", "rebalance", "payments")
    assert calls == [("kafkatest://host:9092", "payments")]
    with pytest.raises(UnsupportedBroker, match="no 'rebalance' fault for amqp://"):
        faults.broker_fault("amqp://host/", "rebalance")


@pytest.mark.parametrize("url", ["sqlite:///x.db", "postgresql+psycopg://u@/db?host=/run/pg"])
def test_the_proxy_needs_a_database_server(url: str) -> None:
    with pytest.raises(InvalidArgument, match="relays TCP"):
        DatabaseProxy(url)


def test_the_proxy_url_is_the_database_url_through_it() -> None:
    proxy = DatabaseProxy("postgresql+psycopg://app:secret@db.example:6543/pay", port=15432)
    assert proxy.target == ("db.example", 6543)
    assert proxy.url == "postgresql+psycopg://app:secret@127.0.0.1:15432/pay"
    assert DatabaseProxy("mysql+pymysql://app@db/pay").target == ("db", 3306)


def test_the_inject_runner_needs_a_consumer() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sa_inbox.testing.inject", "--crash-after-commit"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "give the consumer: -m MODULE [ARGS] or SCRIPT [ARGS]" in done.stderr
