"""The settings every broker consumer shares: refused when made if out of type or range, and
refused by a consumer that cannot serve them, before any request or SQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sa_inbox import ConfigurationError
from sa_inbox.backoff import Backoff
from sa_inbox.brokers import DEFAULT_MAX_DELIVERIES, DeliveryOptions
from sa_inbox.brokers.keys import DEFAULT_MAX_KEYLESS
from sa_inbox.brokers.options import options_of
from sa_inbox.exc import InvalidArgument
from tests.support import unconnected


def test_the_defaults_leave_each_choice_to_the_broker() -> None:
    options = DeliveryOptions()
    assert (options.max_deliveries, options.dead_letter, options.key_source) == (None, None, None)
    assert (options.retry_delay, options.on_settled) == (None, None)
    assert options.max_keyless == DEFAULT_MAX_KEYLESS
    assert options.limit() == DEFAULT_MAX_DELIVERIES and options.limit(7) == 7
    assert options.key("message_id") == "message_id"
    set_ = DeliveryOptions(max_deliveries=3, key_source="Idempotency-Key")
    assert (set_.limit(7), set_.key("message_id")) == (3, "Idempotency-Key")


def test_the_retry_delay_is_a_function_or_a_backoff() -> None:
    backoff = Backoff(base=2.0, maximum=60.0)
    assert DeliveryOptions(retry_delay=backoff).delay(lambda count: 0.0)(3) == 8.0
    assert DeliveryOptions(retry_delay=lambda count: 5.0).delay(backoff.delay)(3) == 5.0
    assert DeliveryOptions().delay(backoff.delay)(1) == 2.0


def test_the_options_are_frozen_and_keyword_only() -> None:
    options = DeliveryOptions(retry_delay=Backoff(base=1.0, maximum=60.0).delay)
    with pytest.raises(AttributeError):
        options.max_deliveries = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        DeliveryOptions(5)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        ({"max_deliveries": 0}, "max_deliveries"),
        ({"max_deliveries": True}, "max_deliveries"),
        ({"max_deliveries": "5"}, "max_deliveries"),
        ({"key_source": ""}, "key_source"),
        ({"key_source": " message_id"}, "key_source"),
        ({"key_source": 7}, "key_source"),
        ({"max_keyless": 0}, "max_keyless"),
        ({"dead_letter": ""}, "dead_letter"),
        ({"dead_letter": "  "}, "dead_letter"),
        ({"dead_letter": b"q.dead"}, "dead_letter"),
        ({"retry_delay": 5}, "retry_delay"),
        ({"retry_delay": Backoff}, "retry_delay"),
        ({"retry_delay": lambda: 1.0}, "retry_delay"),
        ({"retry_delay": lambda count, more: 1.0}, "retry_delay"),
        ({"dead_letter": " q.dead"}, "dead_letter"),
        ({"on_settled": "log"}, "on_settled"),
    ],
)
def test_a_wrong_value_is_refused_when_made(wrong: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgument, match=rf"DeliveryOptions\(\): {named}") as info:
        DeliveryOptions(**wrong)
    assert isinstance(info.value, ConfigurationError)


#: Each consumer, made with ``options=`` and its other arguments valid.
CONSUMERS: dict[str, Callable[..., Any]] = {
    "rabbitmq": unconnected.rabbitmq,
    "redis": unconnected.redis,
    "kafka": unconnected.kafka,
    "nats": unconnected.nats,
    "sqs": unconnected.sqs,
    "faststream": unconnected.faststream,
}


@pytest.mark.parametrize("broker", ["rabbitmq", "redis", "kafka", "faststream"])
def test_a_consumer_that_redelivers_at_once_refuses_a_retry_delay(broker: str) -> None:
    options = DeliveryOptions(retry_delay=Backoff(base=1.0, maximum=60.0).delay)
    with pytest.raises(InvalidArgument, match=r"options\.retry_delay cannot be served"):
        CONSUMERS[broker](options=options)


@pytest.mark.parametrize("broker", sorted(CONSUMERS))
def test_a_consumer_refuses_options_that_are_no_delivery_options(broker: str) -> None:
    with pytest.raises(InvalidArgument, match=r"options must be a sa_inbox\.brokers\.Delivery"):
        CONSUMERS[broker](options={"max_deliveries": 3})


def test_the_nats_consumer_needs_a_dead_letter_subject() -> None:
    with pytest.raises(InvalidArgument, match=r"options\.dead_letter must name"):
        unconnected.nats(options=None)
    with pytest.raises(InvalidArgument, match=r"options\.dead_letter must name"):
        unconnected.nats(options=DeliveryOptions(max_deliveries=3))
    for wildcard in ("payments.>", "payments.*"):
        with pytest.raises(InvalidArgument, match=r"options\.dead_letter must be a subject"):
            unconnected.nats(options=DeliveryOptions(dead_letter=wildcard))
    consumer = unconnected.nats(
        options=DeliveryOptions(dead_letter="payments.dead", max_deliveries=3)
    )
    assert (consumer.dead_letter_subject, consumer.max_deliveries) == ("payments.dead", 3)


def test_each_consumer_reads_its_settings_from_the_options() -> None:
    settled: list[Any] = []
    options = DeliveryOptions(
        max_deliveries=3, dead_letter="dead", key_source="Payment-Id", on_settled=settled.append
    )
    rabbit = unconnected.rabbitmq(options=options)
    assert (rabbit.dead_letter_queue, rabbit.key_header) == ("dead", "Payment-Id")
    assert rabbit.process_options["max_deliveries"] == 3
    assert rabbit.process_options["on_settled"] == settled.append
    stream = unconnected.redis(options=options)
    assert (stream.settings.dead_letter_stream, stream.settings.key_field) == ("dead", "Payment-Id")
    assert stream.settings.max_deliveries == 3
    kafka = unconnected.kafka(options=options)
    assert (kafka.dead_letter_topic, kafka.key_header, kafka.max_deliveries) == (
        "dead",
        "Payment-Id",
        3,
    )
    delay = DeliveryOptions(retry_delay=Backoff(base=2.0, maximum=60.0), dead_letter="dead")
    queue = unconnected.sqs(options=delay).settings
    assert (queue.dead_letter_queue, queue.key_attribute, queue.retry_delay(2)) == (
        "dead",
        "message_id",
        4.0,
    )
    middleware = unconnected.faststream(
        options=DeliveryOptions(key_source="Payment-Id", max_deliveries=3)
    )
    assert middleware.config.key_header == "Payment-Id"
    assert middleware.config.process.max_deliveries == 3


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        (DeliveryOptions(max_keyless=None), False),
        (DeliveryOptions(max_keyless=DEFAULT_MAX_KEYLESS), False),
        (DeliveryOptions(max_keyless=DEFAULT_MAX_KEYLESS + 1), True),
        (DeliveryOptions(dead_letter=None), False),
        (DeliveryOptions(dead_letter="dead"), True),
    ],
    ids=["keyless none", "keyless default", "keyless set", "dead letter none", "dead letter set"],
)
def test_a_consumer_refuses_a_setting_moved_from_none_or_its_default(
    options: DeliveryOptions, refused: bool
) -> None:
    why = [("max_keyless", "no keyless run here"), ("dead_letter", "no dead letter here")]
    if not refused:
        assert options_of(options, "Consumer()", refused=why) is options
        return
    with pytest.raises(InvalidArgument, match=r"^Consumer\(\): options\.\w+ cannot be served"):
        options_of(options, "Consumer()", refused=why)
