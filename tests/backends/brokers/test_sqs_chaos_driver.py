"""The chaos run's SQS driver (:mod:`sa_inbox.chaos.drivers.sqs`) against the live moto
server, with the run's sync session factory and handler on each database."""

from __future__ import annotations

import threading
import time
import uuid
from decimal import Decimal

import pytest

from sa_inbox.brokers import Disposition
from sa_inbox.chaos.drivers import driver_for
from sa_inbox.chaos.drivers.sqs import BACKLOG_EVERY, MAX_BACKLOG, VISIBILITY_TIMEOUT, Driver
from tests.backends.brokers.chaos_support import consume_until
from tests.conftest import broker_url
from tests.support.app import App

pytestmark = pytest.mark.backend

#: Seconds the consume may take: the poison's deliveries each wait at most a receive's long
#: poll, a few receives in all, on a loaded machine.
CONSUME_BOUND = 30 + 3 * VISIBILITY_TIMEOUT


def test_the_chaos_driver_runs_the_payments_once_and_counts_what_is_left(
    url: str, app: App
) -> None:
    driver = driver_for(broker_url("sqs"))
    assert isinstance(driver, Driver)
    name = f"sa-inbox-chaos-{uuid.uuid4().hex[:10]}"
    try:
        driver.prepare(name, max_deliveries=2)
        sends = [(f"p-{i}", b"1.00") for i in range(5)] + [("p-0", b"1.00"), ("bad", b"boom")]
        driver.publish(name, sends)
        assert driver.unsettled(name) == 7  # SQS keeps both copies of p-0
        # bad: retry, then dead letter
        seen = consume_until(driver, name, app, settlements=8, seconds=CONSUME_BOUND)
        assert [s.disposition for s in seen].count(Disposition.PROCESSED) == 5
        assert [s.disposition for s in seen].count(Disposition.DUPLICATE) == 1
        assert driver.unsettled(name) == 0
        # read twice: the run's verification reads them, then whoever checks after it
        assert driver.dead_letters(name) == ["bad"]
        assert driver.dead_letters(name) == ["bad"]
    finally:
        driver.delete(name)
        driver.close()
    assert app.ledger_rows() == 5 and app.inbox_rows() == 5
    assert app.balance(1) == Decimal("5.00")


def test_the_producer_waits_while_the_queue_holds_the_backlog() -> None:
    """The producer stops sending at :data:`MAX_BACKLOG` messages queued (moto's cost per
    message grows with its queue) and sends the rest once consumers took some."""
    driver = driver_for(broker_url("sqs"))
    assert isinstance(driver, Driver)
    name = f"sa-inbox-chaos-{uuid.uuid4().hex[:10]}"
    sends = [(f"p-{i}", b"1.00") for i in range(MAX_BACKLOG + 30)]
    try:
        driver.prepare(name, max_deliveries=2)
        producer = threading.Thread(target=driver.publish, args=(name, sends), daemon=True)
        producer.start()
        deadline = time.monotonic() + CONSUME_BOUND
        while driver.unsettled(name) < MAX_BACKLOG:
            assert time.monotonic() < deadline, "the producer did not reach the backlog"
            time.sleep(0.1)
        time.sleep(1.0)  # it would have sent the rest by now; it waits instead
        assert producer.is_alive()
        assert MAX_BACKLOG <= driver.unsettled(name) < MAX_BACKLOG + BACKLOG_EVERY
        url = driver.client.get_queue_url(QueueName=name)["QueueUrl"]
        while producer.is_alive():  # a consumer of sorts: delete what is there
            reply = driver.client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
            for message in reply.get("Messages") or []:
                driver.client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        producer.join()
    finally:
        driver.delete(name)
        driver.close()
