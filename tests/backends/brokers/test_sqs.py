"""The SQS adapter against the live moto server (``scripts/servers.sh start DIR sqs``), on
every database.

Each test uses its own queues (a uuid in the name) and deletes them after. Business state
(ledger, balances, claims) and queue state (visible and in-flight messages, the dead-letter
queue) are both asserted. moto is SQS's emulator, not SQS: what it cannot prove is said in
the README ("Amazon SQS").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox.brokers import DeadLetterReason, Disposition, Settlement
from sa_inbox.brokers.sqs import Consumer
from sa_inbox.brokers.sqs.core import Held, QueueInfo, Received, delete, drive, extend
from tests.backends.brokers.payments import pay
from tests.backends.brokers.sqs_support import Queues, drain, queues, sqs_client
from tests.conftest import broker_url
from tests.support.app import CONSUMER, App
from tests.support.options import with_options

pytestmark = pytest.mark.backend

#: Receives wait at most a second: a test's bounds follow from it and the visibility timeout.
FAST: dict[str, Any] = {"wait_time": 1, "visibility_timeout": 2, "retry_delay": lambda n: 0}
DUPLICATES = [
    ("pay-1", "10.00"),
    ("pay-2", "5.00"),
    ("pay-1", "10.00"),
    ("pay-3", "1.50"),
    ("pay-2", "5.00"),
    ("pay-3", "1.50"),
]


@pytest.fixture
def sqs_url() -> str:
    return broker_url("sqs")


@pytest.fixture
def client(sqs_url: str) -> Any:
    return sqs_client(sqs_url)


@pytest.fixture
def q(client: Any) -> Iterator[Queues]:
    yield from queues(client)


def consumer(q: Queues, app: App, handler: Any = None, **kw: Any) -> Consumer:
    return Consumer(
        q.client,
        q.name,
        consumer_name=CONSUMER,
        session_factory=app.Session,
        inbox=app.inbox,
        handler=handler or pay(app),
        **with_options({"dead_letter": q.dead_name, **FAST, **kw}),
    )


def kinds(settled: list[Settlement]) -> list[Disposition]:
    return [s.disposition for s in settled]


# -- what the adapter relies on, checked on the live server --------------------------------


def test_sqs_counts_receives_and_hides_messages_as_the_adapter_relies_on(q: Queues) -> None:
    q.send([("m-1", "1.00")])
    ask = {"QueueUrl": q.url, "VisibilityTimeout": 1, "MessageSystemAttributeNames": ["All"]}
    (first,) = q.client.receive_message(**ask)["Messages"]
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    assert "Messages" not in q.client.receive_message(**ask), "hidden while in flight"
    time.sleep(1.2)
    (second,) = q.client.receive_message(**ask)["Messages"]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2", "every receive counts"
    assert second["ReceiptHandle"] != first["ReceiptHandle"], "a new handle per receive"


# -- duplicates, keys, poison ----------------------------------------------------------------


def test_duplicate_sends_change_data_once_per_key(url: str, app: App, q: Queues) -> None:
    q.send([*DUPLICATES, (None, "3.00")])
    reader = consumer(q, app)
    settled = drain(reader.poll, len(DUPLICATES) + 1)
    reader.close()
    assert kinds(settled).count(Disposition.PROCESSED) == 3
    assert kinds(settled).count(Disposition.DUPLICATE) == 3
    (dead,) = q.dead_letters()
    assert (dead["body"], dead["record"]["reason"]) == ("3.00", "missing_message_id")
    assert (app.ledger_rows(), app.inbox_rows(), app.balance(1)) == (3, 3, Decimal("16.50"))
    assert q.counts() == (0, 0), "every message deleted"


def test_a_number_attribute_is_no_key(url: str, app: App, q: Queues) -> None:
    q.client.send_message(
        QueueUrl=q.url,
        MessageBody="1.00",
        MessageAttributes={"message_id": {"DataType": "Number", "StringValue": "7"}},
    )
    reader = consumer(q, app)
    (settled,) = drain(reader.poll, 1)
    assert settled.reason is DeadLetterReason.INVALID_MESSAGE_ID
    assert [d["record"]["reason"] for d in q.dead_letters()] == ["invalid_message_id"]
    assert app.ledger_rows() == 0


def test_a_poison_message_is_dead_lettered_without_stopping_the_queue(
    url: str, app: App, q: Queues
) -> None:
    q.send([("p-1", "1.00"), ("p-bad", "2.00"), ("p-2", "3.00")])
    reader = consumer(q, app, pay(app, poison="p-bad"), max_deliveries=3)
    settled = drain(reader.poll, 5)
    reader.close()
    bad = [s for s in settled if s.delivery.message_id == "p-bad"]
    assert [(s.disposition, s.delivery.delivery_count) for s in bad] == [
        (Disposition.RETRY, 1),
        (Disposition.RETRY, 2),
        (Disposition.DEAD_LETTERED, 3),
    ]
    (dead,) = q.dead_letters()
    assert (dead["key"], dead["record"]["reason"], dead["record"]["receive_count"]) == (
        "p-bad",
        "delivery_limit",
        3,
    )
    assert "poison, delivery 3" in dead["record"]["detail"]
    assert (app.ledger_rows(), app.balance(1)) == (2, Decimal("4.00"))
    assert q.counts() == (0, 0)


def test_the_redrive_policy_is_the_dead_letter_path_without_a_dead_letter_queue(
    url: str, app: App, client: Any
) -> None:
    for q in queues(client, redrive=2):
        q.send([("p-bad", "2.00"), ("p-1", "1.00")])
        reader = consumer(q, app, pay(app, poison="p-bad"), dead_letter=None)
        settled = drain(reader.poll, 3)
        assert reader.info is not None and reader.info.max_deliveries == 2
        bad = [
            (s.disposition, s.delivery.delivery_count)
            for s in settled
            if s.delivery.message_id == "p-bad"
        ]
        assert bad == [(Disposition.RETRY, 1), (Disposition.DEAD_LETTERED, 2)]
        # made visible again: SQS moves it at its next receive, after maxReceiveCount
        assert reader.poll() == []
        reader.close()
        (dead,) = q.dead_letters()
        assert (dead["key"], dead["record"]) == ("p-bad", None), "moved by SQS, as sent"
        assert (app.ledger_rows(), q.counts()) == (1, (0, 0))


# -- FIFO ------------------------------------------------------------------------------------


def test_fifo_keeps_each_group_in_order_and_a_failure_blocks_its_group_only(
    url: str, app: App, client: Any
) -> None:
    failed: set[str] = set()
    base = pay(app)

    def fail_once(session: Any, delivery: Any) -> None:
        base(session, delivery)
        if delivery.message_id == "a-1" and "a-1" not in failed:
            failed.add("a-1")
            raise RuntimeError("a-1 fails once")

    for q in queues(client, fifo=True):
        sent = [("a-1", "1.00"), ("b-1", "2.00"), ("a-2", "3.00"), ("b-2", "4.00"), ("a-3", "5.00")]
        q.send(sent, group=lambda key: (key or "?")[0])
        reader = consumer(q, app, fail_once, retry_delay=lambda n: 1)
        settled = drain(reader.poll, 6)
        reader.close()
        with app.engine.connect() as conn:
            applied = list(
                conn.scalars(sa.select(app.ledger.c.message_id).order_by(app.ledger.c.id))
            )
        assert [k for k in applied if k[0] == "a"] == ["a-1", "a-2", "a-3"], "group a in order"
        assert [k for k in applied if k[0] == "b"] == ["b-1", "b-2"], "group b in order"
        assert applied.index("b-2") < applied.index("a-1"), "b went on while a waited"
        assert kinds(settled).count(Disposition.RETRY) == 1
        assert (app.ledger_rows(), q.counts()) == (5, (0, 0))


def test_the_deduplication_id_is_the_key_only_when_asked(url: str, app: App, client: Any) -> None:
    for q in queues(client, fifo=True):
        q.send([(None, "1.00"), (None, "2.00")], deduplication=lambda _: "producer-key-1")
        q.send([(None, "4.00")], deduplication=lambda _: "producer-key-2")
        reader = consumer(q, app, deduplication_id_key=True)
        settled = drain(reader.poll, 2)  # SQS dropped the second send of producer-key-1
        reader.close()
        assert sorted(s.delivery.message_id or "" for s in settled) == [
            "producer-key-1",
            "producer-key-2",
        ]
        assert (app.ledger_rows(), app.balance(1)) == (2, Decimal("5.00"))


# -- stale receipt handles ------------------------------------------------------------------


def test_stale_receipt_handles_are_logged_not_raised(
    url: str, app: App, q: Queues, caplog: pytest.LogCaptureFixture
) -> None:
    """moto's answers to a stale handle (AWS may answer otherwise: see the module): the
    extension of a message deleted meanwhile is refused, a delete of it is accepted; an
    unknown handle is refused. None raises; each refusal is one WARNING."""
    q.send([("s-1", "1.00")])
    ask = {"QueueUrl": q.url, "VisibilityTimeout": 1, "MessageSystemAttributeNames": ["All"]}
    stale = Received.of(q.client.receive_message(**ask)["Messages"][0])
    time.sleep(1.2)  # its visibility timeout passes: the consumer's receive takes it
    reader = consumer(q, app)
    (settled,) = drain(reader.poll, 1)
    assert (settled.disposition, settled.delivery.delivery_count) == (Disposition.PROCESSED, 2)
    info = reader.info
    assert info is not None
    held = Held()
    bogus = Received("x", "not-a-receipt-handle", "")
    held.add([stale, bogus])
    with caplog.at_level(logging.WARNING, "sa_inbox.brokers.sqs"):
        drive(extend(info, held, [stale, bogus], 5), q.client)
        drive(delete(info, [stale, bogus]), q.client)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("could not extend" in w for w in warnings) == 2
    assert sum("could not delete" in w for w in warnings) == 1, "the unknown handle only"
    assert (app.ledger_rows(), q.counts()) == (1, (0, 0))


def test_a_delete_that_deletes_nothing_brings_a_duplicate_back_skipped(
    url: str, app: App, q: Queues, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AWS's answer to a stale handle: the delete succeeds, the message stays. Here the
    delete is sent with a handle SQS does not know (refused, logged): the committed message
    shows again after the visibility timeout and the inbox skips it."""
    from sa_inbox.brokers.sqs import consumer as module

    real = module.delete

    def stale_delete(info: QueueInfo, messages: list[Received]) -> Any:
        return real(
            info, [Received(m.message_id, "stale-" + m.receipt_handle, "") for m in messages]
        )

    monkeypatch.setattr(module, "delete", stale_delete)
    q.send([("d-1", "7.00")])
    reader = consumer(q, app, visibility_timeout=1)
    (first,) = drain(reader.poll, 1)
    monkeypatch.setattr(module, "delete", real)
    (second,) = drain(reader.poll, 1, seconds=10)
    reader.close()
    assert [(s.disposition, s.delivery.delivery_count) for s in (first, second)] == [
        (Disposition.PROCESSED, 1),
        (Disposition.DUPLICATE, 2),
    ]
    assert (app.ledger_rows(), app.balance(1), q.counts()) == (1, Decimal("7.00"), (0, 0))


# -- the visibility timeout -------------------------------------------------------------------


def test_past_the_visibility_timeout_a_second_worker_races_and_one_commits(
    url: str, app: App, q: Queues
) -> None:
    """Heartbeat off: A's handler outlives the timeout, SQS hands the message to B (its
    second receive) while A's transaction is open, both run it; the inbox claim lets
    exactly one commit (B's claim waits on A's, then finds it committed)."""
    base = pay(app)
    b_settled: list[Settlement] = []

    def slow(session: Any, delivery: Any) -> None:  # both workers' handler (one owner)
        base(session, delivery)
        if delivery.delivery_count > 1:
            return  # B's
        deadline = time.monotonic() + 10  # the timeout (1 s) plus B's receive (<= 1 s)
        while not len(b.held):  # B received it: A's receive handle is stale now
            assert time.monotonic() < deadline, "no second worker received the message"
            time.sleep(0.05)
        time.sleep(0.5)  # B's claim now waits on this transaction

    a = consumer(q, app, slow, heartbeat=False, visibility_timeout=1)
    b = consumer(q, app, slow, heartbeat=False, visibility_timeout=1, on_settled=b_settled.append)
    done = threading.Event()

    def worker_b() -> None:
        while not len(a.held) and not done.is_set():  # A receives first
            time.sleep(0.01)
        while not b_settled and not done.is_set():
            b.poll()
        b.close()

    q.send([("v-1", "9.00")])
    thread = threading.Thread(target=worker_b)
    thread.start()
    try:
        (a_settled,) = drain(a.poll, 1)
        thread.join(timeout=20)
    finally:
        done.set()
        a.close()
    assert not thread.is_alive()
    (settled,) = b_settled
    assert (a_settled.delivery.delivery_count, settled.delivery.delivery_count) == (1, 2)
    assert sorted(s.disposition.value for s in (a_settled, settled)) == [
        "duplicate",
        "processed",
    ]
    assert (app.ledger_rows(), app.inbox_rows(), app.balance(1)) == (1, 1, Decimal("9.00"))
    assert q.counts() == (0, 0)


def test_the_heartbeat_keeps_a_slow_handlers_message_from_a_second_worker(
    url: str, app: App, q: Queues
) -> None:
    """Heartbeat on: A's handler sleeps three visibility timeouts, B polls all along and
    receives nothing; the message was received once."""
    base = pay(app)
    timeout = 1

    def slow(session: Any, delivery: Any) -> None:
        base(session, delivery)
        time.sleep(3 * timeout)

    a = consumer(q, app, slow, visibility_timeout=timeout)
    b = consumer(q, app, slow, visibility_timeout=timeout)
    done = threading.Event()
    b_settled: list[Settlement] = []
    b_polls = 0

    def worker_b() -> None:
        nonlocal b_polls
        while not len(a.held) and not done.is_set():  # A receives first
            time.sleep(0.01)
        while not done.is_set():
            b_settled.extend(b.poll())
            b_polls += 1
        b.close()

    q.send([("h-1", "9.00")])
    thread = threading.Thread(target=worker_b)
    thread.start()
    try:
        (a_settled,) = drain(a.poll, 1)
    finally:
        done.set()
        thread.join(timeout=10)
        a.close()
    assert b_polls >= 2, "B polled while A's handler ran"
    assert b_settled == []
    assert (a_settled.disposition, a_settled.delivery.delivery_count) == (Disposition.PROCESSED, 1)
    assert (app.ledger_rows(), q.counts()) == (1, (0, 0))
