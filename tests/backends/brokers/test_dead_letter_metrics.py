"""Every dead letter is counted once, with its reason: ``sa_inbox_dead_letters_total
{consumer, reason}`` (Prometheus, read from the real registry), ``sa_inbox.dead_letters``
(OpenTelemetry, the SDK's in-memory reader) and the ``inbox.delivery.dead_lettered`` log
event, from :func:`sa_inbox.brokers.process` (every adapter settles through it), then from
each adapter's real consumer on the live RabbitMQ, Redis and NATS brokers, FastStream's
middleware and Celery's task, on SQLite and PostgreSQL. What the counter says is checked
against what the dead-letter queue holds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry
from sqlalchemy.orm import Session

from sa_inbox.brokers import DeadLetterReason, Delivery, DeliveryOptions, Disposition, process
from sa_inbox.brokers import dead_letters as dl
from sa_inbox.hooks import MultiHooks
from sa_inbox.hooks.opentelemetry import (
    CONSUMER_ATTRIBUTE,
    DEAD_LETTER_REASON_ATTRIBUTE,
    OpenTelemetryHooks,
)
from sa_inbox.hooks.prometheus import PrometheusHooks
from tests.backends.brokers.dead_letter_sides import (
    SIDES,
    FastStreamRun,
    Payments,
    faststream_queue,
)
from tests.conftest import backend_url, broker_url, importorskip
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

METRIC = "sa_inbox_dead_letters_total"
REASONS = [reason.value for reason in DeadLetterReason]
#: A key the inbox refuses, as each broker can carry it (an AMQP short string keeps the
#: leading space; a NATS header value may be longer than the column).
INVALID_KEY = {"rabbitmq": " bad-key", "redis": " bad-key", "nats": "x" * 300}


class Counted:
    """The payments app whose inbox reports to a Prometheus registry and an OpenTelemetry
    meter of its own."""

    def __init__(self, engine: sa.Engine) -> None:
        self.registry = CollectorRegistry()
        self.reader = InMemoryMetricReader()
        self.hooks = MultiHooks(
            PrometheusHooks(self.registry),
            OpenTelemetryHooks(meter_provider=MeterProvider(metric_readers=[self.reader])),
        )
        self.app = App(engine, hooks=self.hooks)
        self.app.reset()

    def prometheus(self) -> dict[str, float]:
        """``sa_inbox_dead_letters_total`` per reason, of the consumer."""
        found = {}
        for reason in REASONS:
            value = self.registry.get_sample_value(METRIC, {"consumer": CONSUMER, "reason": reason})
            if value is not None:
                found[reason] = value
        return found

    def opentelemetry(self) -> dict[str, float]:
        """``sa_inbox.dead_letters`` per reason, of the consumer."""
        data = self.reader.get_metrics_data()
        found: dict[str, float] = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != "sa_inbox.dead_letters":
                        continue
                    for point in metric.data.data_points:
                        if point.attributes[CONSUMER_ATTRIBUTE] == CONSUMER:
                            found[str(point.attributes[DEAD_LETTER_REASON_ATTRIBUTE])] = point.value
        return found


@pytest.fixture(params=["sqlite", "postgresql"])
def counted(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[Counted]:
    engine = sa.create_engine(backend_url(request.param, tmp_path))
    counted = Counted(engine)
    yield counted
    counted.app.drop()
    engine.dispose()


# -- the one place: process() -------------------------------------------------------------


class Settler:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.dead: list[DeadLetterReason] = []

    def ack(self) -> None:
        pass

    def retry(self) -> None:
        pass

    def dead_letter(self, reason: DeadLetterReason, detail: str) -> None:
        if self.fail:
            raise ConnectionError("the dead-letter queue's publish failed")
        self.dead.append(reason)


def deliver(counted: Counted, delivery: Delivery, settler: Settler | None = None) -> Any:
    def handler(session: Session, delivery: Delivery) -> None:
        if delivery.message_id == "poison":
            raise RuntimeError("cannot apply it")
        counted.app.apply_payment(session, delivery.message_id or "", 1, Decimal("1.00"))

    return process(
        delivery,
        settler or Settler(),
        session_factory=counted.app.Session,
        inbox=counted.app.inbox,
        consumer_name=CONSUMER,
        handler=handler,
        max_deliveries=3,
    )


def test_process_counts_each_reason_once_and_nothing_else(
    counted: Counted, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "sa_inbox.brokers")
    deliveries = [
        Delivery("pay-1", b""),  # processed
        Delivery("pay-1", b"", 2),  # duplicate
        Delivery("poison", b"", 1),  # retry
        Delivery("poison", b"", 3),  # dead letter at the limit
        Delivery("pay-2", b"", 9),  # past the limit: dead-lettered unprocessed
        Delivery(None, b""),  # no key
        Delivery(" pay-3", b""),  # invalid key
        Delivery(None, b"", key_error="the key is int 7, not a string"),  # no text
    ]
    settled = [deliver(counted, d).disposition for d in deliveries]
    assert settled.count(Disposition.DEAD_LETTERED) == 5
    expected = {"delivery_limit": 2.0, "missing_message_id": 1.0, "invalid_message_id": 2.0}
    assert counted.prometheus() == expected
    assert counted.opentelemetry() == expected
    events = [
        r for r in caplog.records if getattr(r, "event", None) == "inbox.delivery.dead_lettered"
    ]
    assert sorted(r.reason for r in events) == sorted(  # type: ignore[attr-defined]
        [r for r, n in expected.items() for _ in range(int(n))]
    )
    assert counted.app.ledger_rows() == 1 and counted.app.inbox_rows() == 1


def test_a_dead_letter_whose_publish_failed_is_not_counted(counted: Counted) -> None:
    with pytest.raises(ConnectionError):
        deliver(counted, Delivery(None, b""), Settler(fail=True))
    assert counted.prometheus() == {} and counted.opentelemetry() == {}


# -- each adapter's consumer on the live brokers ------------------------------------------


@pytest.mark.parametrize("broker", list(SIDES))
def test_each_reason_on_each_broker_is_counted_as_the_dead_letter_queue_holds_it(
    broker: str, counted: Counted
) -> None:
    side = SIDES[broker](broker_url(broker))
    try:
        side.publish(
            [(None, "1.00"), (INVALID_KEY[broker], "2.00"), ("bad-1", "3.00"), ("pay-1", "4.00")]
        )
        settlements = side.consume(
            counted.app, counted.app.inbox, Payments(counted.app, {"bad-1"}), 6
        )
        held = dl.peek(side.url, side.dead)
    finally:
        side.delete()
    dead = [s.reason.value for s in settlements if s.reason is not None]
    assert sorted(dead) == sorted(REASONS)
    assert counted.prometheus() == {reason: 1.0 for reason in REASONS}
    assert counted.opentelemetry() == {reason: 1.0 for reason in REASONS}
    assert sorted(letter.reason or "" for letter in held) == sorted(REASONS)
    assert counted.app.ledger_rows() == 1 and counted.app.balance(1) == Decimal("4.00")


# -- FastStream's middleware (it settles through process_async too) -----------------------


FASTSTREAM = {"rabbit": "rabbitmq", "redis": "redis", "nats": "nats"}


@pytest.mark.parametrize("kind", list(FASTSTREAM))
def test_faststream_dead_letters_are_counted_with_their_reason(kind: str, counted: Counted) -> None:
    importorskip("faststream", "faststream")
    url = broker_url(FASTSTREAM[kind])
    app = counted.app

    async def main(name: str) -> list[str]:
        async with FastStreamRun(kind, url, name, app, app.inbox, Payments(app)) as run:
            await run.publish([(None, "1"), ("x" * 300, "1")])
            return [s.reason.value for s in await run.settled(2) if s.reason is not None]

    with faststream_queue(kind, url) as (name, _):
        reasons = asyncio.run(main(name))
    assert sorted(reasons) == ["invalid_message_id", "missing_message_id"]
    assert counted.prometheus() == {"invalid_message_id": 1.0, "missing_message_id": 1.0}


# -- Celery's task (it settles through process() too) ---------------------------------------


def test_celery_dead_letters_are_counted_with_their_reason(counted: Counted) -> None:
    """A task without its key, one with a key the inbox refuses, and a poison task at its
    last delivery (``request.retries`` past ``max_deliveries``): each is rejected
    (``Reject(requeue=False)``, to the queue's dead-letter exchange) and counted once with
    its reason. The tasks run as the worker runs them (``Task.apply``), in this process,
    where the counters are."""
    importorskip("celery", "celery")
    from celery import Celery
    from celery.exceptions import Reject

    from sa_inbox.brokers.celery import inbox_task

    app = counted.app
    celery = Celery("dead_letters", broker=broker_url("rabbitmq"))

    @inbox_task(
        celery,
        session_factory=app.Session,
        inbox=app.inbox,
        consumer_name=CONSUMER,
        options=DeliveryOptions(max_deliveries=3),
        name="dead_letters.pay",
    )
    def pay(session: Session, amount: str, idempotency_key: Any = None) -> None:
        app.apply_payment(session, str(idempotency_key), 1, Decimal(amount))

    deliveries: list[dict[str, Any]] = [
        {"kwargs": {"amount": "1.00"}},  # no key
        {"kwargs": {"amount": "1.00", "idempotency_key": " bad-key"}},
        {"kwargs": {"amount": "not-a-number", "idempotency_key": "poison-1"}, "retries": 2},
        {"kwargs": {"amount": "4.00", "idempotency_key": "pay-1"}},
    ]
    rejected = []
    for delivery in deliveries:
        result = pay.apply(**delivery)
        if isinstance(result.result, Reject):
            rejected.append(delivery["kwargs"].get("idempotency_key"))
    assert rejected == [None, " bad-key", "poison-1"]
    assert counted.prometheus() == {
        "missing_message_id": 1.0,
        "invalid_message_id": 1.0,
        "delivery_limit": 1.0,
    }
    assert counted.opentelemetry() == counted.prometheus()
    assert app.ledger_rows() == 1 and app.balance(1) == Decimal("4.00")
