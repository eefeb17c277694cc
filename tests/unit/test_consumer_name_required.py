"""The adapters that take no default consumer name refuse None when made, as they refuse an
empty one; those that default it (to the group, durable or queue) refuse an empty one, which
is no default. Both before connecting to the broker or the database."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from sa_inbox.brokers import DeliveryOptions
from sa_inbox.exc import InvalidMessageId
from tests.support import unconnected

MADE: dict[str, Callable[..., Any]] = {
    "rabbitmq.Consumer": unconnected.rabbitmq,
    "rabbitmq.AsyncConsumer": partial(unconnected.rabbitmq, asynchronous=True),
    "faststream.InboxMiddleware": unconnected.faststream,
    "celery.inbox_task": unconnected.celery,
}


@pytest.mark.parametrize("made", sorted(MADE))
@pytest.mark.parametrize("name", [None, ""], ids=["None", "empty"])
def test_a_consumer_without_a_default_name_refuses_none_when_made(
    made: str, name: str | None
) -> None:
    with pytest.raises(InvalidMessageId, match="consumer_name"):
        MADE[made](consumer_name=name)


@pytest.mark.parametrize("made", sorted(MADE))
def test_a_named_consumer_is_made(made: str) -> None:
    assert MADE[made](consumer_name="billing") is not None


DEFAULTED: dict[str, Callable[..., Any]] = {
    "redis.Consumer": unconnected.redis,
    "kafka.AsyncConsumer": unconnected.kafka,
    "nats.AsyncConsumer": unconnected.nats,
    "sqs.Consumer": unconnected.sqs,
}


@pytest.mark.parametrize("made", sorted(DEFAULTED))
def test_a_consumer_with_a_default_name_refuses_an_empty_one(made: str) -> None:
    options = DeliveryOptions(dead_letter="payments.dead")
    with pytest.raises(InvalidMessageId, match="consumer_name"):
        DEFAULTED[made](consumer_name="", options=options)
    assert DEFAULTED[made](options=options).readiness.consumer_name == (
        "payments" if made == "sqs.Consumer" else "billing"
    )
