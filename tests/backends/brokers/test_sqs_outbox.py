"""The outbox relay to SQS (standard and FIFO queues) against the live moto server, and the
relay's rule for an SQS that cannot be reached."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from botocore.exceptions import ClientError

from sa_inbox.brokers import DeliveryOptions, Disposition
from sa_inbox.brokers.sqs import AsyncPublisher, Consumer, Publisher
from sa_inbox.outbox import OutboxRelay
from sa_inbox.outbox.message import OutboxMessage
from sa_inbox.outbox.publisher import async_publisher_for, broker_unavailable, publisher_for
from tests.backends.brokers.payments import pay
from tests.backends.brokers.sqs_support import Queues, drain, queues, sqs_client
from tests.conftest import broker_url
from tests.support.app import CONSUMER
from tests.support.outbox_app import OutboxApp

pytestmark = pytest.mark.backend


@pytest.fixture
def sqs_url() -> str:
    return broker_url("sqs")


@pytest.fixture
def client(sqs_url: str) -> Any:
    return sqs_client(sqs_url)


@pytest.fixture
def outbox_app(url: str) -> Iterator[OutboxApp]:
    engine = sa.create_engine(url)
    app = OutboxApp(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


def write(app: OutboxApp, destination: str, rows: list[tuple[str, str, str]]) -> None:
    """One transaction per ``(message_id, amount, group)`` row."""
    for message_id, amount, group in rows:
        with app.Session.begin() as session:
            app.outbox.publish(
                session,
                destination,
                amount.encode(),
                headers={"message_group_id": group, "kind": "payment"},
                message_id=message_id,
            )


def received(q: Queues) -> list[dict[str, Any]]:
    reply = q.client.receive_message(
        QueueUrl=q.url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=0,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )
    return list(reply.get("Messages") or [])


def consume(app: OutboxApp, q: Queues, count: int) -> list[Any]:
    reader = Consumer(
        q.client,
        q.name,
        consumer_name=CONSUMER,
        session_factory=app.Session,
        inbox=app.inbox,
        handler=pay(app),
        options=DeliveryOptions(dead_letter=q.dead_name),
        wait_time=1,
    )
    settled = drain(reader.poll, count)
    reader.close()
    return settled


def test_the_relay_publishes_to_a_standard_queue_and_a_republished_row_is_skipped(
    url: str, outbox_app: OutboxApp, client: Any, sqs_url: str
) -> None:
    for q in queues(client):
        write(outbox_app, q.name, [("o-1", "1.00", "a"), ("o-2", "2.00", "a")])
        publisher = publisher_for(sqs_url)
        assert isinstance(publisher, Publisher)
        batch = OutboxRelay(outbox_app.engine, outbox_app.outbox, publisher).run_once()
        assert batch.dispatched == 2
        # a relay killed between the send and its mark publishes the row again
        (row,) = [r for r in outbox_app.outbox_rows() if r["message_id"] == "o-1"]
        again = OutboxMessage(row["id"], "o-1", q.name, b"1.00", {"message_group_id": "a"})
        publisher.publish(again)
        messages = received(q)
        assert sorted(m["MessageAttributes"]["message_id"]["StringValue"] for m in messages) == [
            "o-1",
            "o-1",
            "o-2",
        ]
        assert "message_group_id" not in messages[0]["MessageAttributes"]
        assert messages[0]["MessageAttributes"]["kind"]["StringValue"] == "payment"
        settled = consume(outbox_app, q, 3)
        assert [s.disposition for s in settled].count(Disposition.DUPLICATE) == 1
        assert (outbox_app.ledger_rows(), outbox_app.balance(1)) == (2, Decimal("3.00"))


def test_the_relay_publishes_to_a_fifo_queue_with_the_rows_group_and_dedup_id(
    url: str, outbox_app: OutboxApp, client: Any, sqs_url: str
) -> None:
    for q in queues(client, fifo=True):
        write(
            outbox_app, q.name, [("f-1", "1.00", "a"), ("f-2", "2.00", "b"), ("f-3", "3.00", "a")]
        )
        publisher = Publisher(client)
        assert (
            OutboxRelay(outbox_app.engine, outbox_app.outbox, publisher).run_once().dispatched == 3
        )
        (row,) = [r for r in outbox_app.outbox_rows() if r["message_id"] == "f-1"]
        publisher.publish(
            OutboxMessage(row["id"], "f-1", q.name, b"1.00", {"message_group_id": "a"})
        )
        messages = received(q)
        seen = [
            (
                m["MessageAttributes"]["message_id"]["StringValue"],
                m["Attributes"]["MessageGroupId"],
                m["Attributes"]["MessageDeduplicationId"],
            )
            for m in messages
        ]
        # SQS dropped the second send of f-1 (its deduplication id, within 5 minutes)
        assert sorted(seen) == [("f-1", "a", "f-1"), ("f-2", "b", "f-2"), ("f-3", "a", "f-3")]
        consume(outbox_app, q, 3)
        assert (outbox_app.ledger_rows(), outbox_app.balance(1)) == (3, Decimal("6.00"))


@pytest.fixture
def fifo(client: Any) -> Iterator[Queues]:
    yield from queues(client, fifo=True)


def test_the_async_publisher_sends_as_the_sync_one(fifo: Queues, sqs_url: str) -> None:
    publisher = async_publisher_for(sqs_url)
    assert isinstance(publisher, AsyncPublisher)

    async def send() -> None:
        try:
            await publisher.publish(OutboxMessage(1, "x" * 200, fifo.name, b"{}", {}))
        finally:
            await publisher.close()

    asyncio.run(send())
    (message,) = received(fifo)
    assert message["MessageAttributes"]["message_id"]["StringValue"] == "x" * 200
    # too long for a deduplication id: its SHA-256, the same on every publish
    assert len(message["Attributes"]["MessageDeduplicationId"]) == 64
    assert message["Attributes"]["MessageGroupId"] == fifo.name


def test_an_unreachable_sqs_counts_no_attempt_a_refusal_does(client: Any, sqs_url: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    gone = publisher_for(f"sqs://k:s@127.0.0.1:{port}")
    message = OutboxMessage(1, "m-1", f"http://127.0.0.1:{port}/123456789012/q", b"1", {})
    with pytest.raises(Exception) as unreachable:
        gone.publish(message)
    assert broker_unavailable(gone, unreachable.value)
    live = Publisher(client)
    with pytest.raises(ClientError) as refused:
        live.publish(OutboxMessage(1, "m-1", "no-such-queue-here", b"1", {}))
    assert not broker_unavailable(live, refused.value), "QueueDoesNotExist is the row's"
