"""Every broker package names its classes alike (``Consumer``, ``AsyncConsumer``,
``Publisher``, ``AsyncPublisher``); the former names still import, as the same objects with
a DeprecationWarning; the
NATS ``AsyncConsumer`` refuses a bad argument when made, before any request or SQL, and the
``consume()`` function it replaces warns."""

from __future__ import annotations

import importlib
from typing import Any, NoReturn

import pytest
import sqlalchemy as sa
from nats.js import JetStreamContext

from sa_inbox import Inbox
from sa_inbox.brokers import Delivery
from sa_inbox.exc import ConfigurationError, InvalidArgument, InvalidSessionFactory
from tests.support.options import with_options

#: (package, former name, new name) for each rename.
RENAMED = [
    ("rabbitmq", "BlockingConsumer", "Consumer"),
    ("rabbitmq", "RabbitMQPublisher", "Publisher"),
    ("rabbitmq", "AioPikaPublisher", "AsyncPublisher"),
    ("redis", "RedisStreamConsumer", "Consumer"),
    ("redis", "AsyncRedisStreamConsumer", "AsyncConsumer"),
    ("redis", "RedisStreamPublisher", "Publisher"),
    ("nats", "JetStreamPublisher", "AsyncPublisher"),
    ("nats", "BlockingJetStreamPublisher", "Publisher"),
]


@pytest.mark.parametrize(("package", "old", "new"), RENAMED, ids=[r[1] for r in RENAMED])
def test_a_former_name_is_the_new_class_with_a_deprecation_warning(
    package: str, old: str, new: str
) -> None:
    module = importlib.import_module(f"sa_inbox.brokers.{package}")
    with pytest.warns(DeprecationWarning, match=rf"\.{old} is deprecated .*: use .*\.{new}$"):
        former = getattr(module, old)
    assert former is getattr(module, new)
    assert new in module.__all__ and old not in module.__all__
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        module.NoSuchName  # noqa: B018


@pytest.mark.parametrize("package", ["rabbitmq", "redis", "nats", "kafka", "sqs"])
def test_every_broker_package_has_the_same_class_names(package: str) -> None:
    module = importlib.import_module(f"sa_inbox.brokers.{package}")
    names = {"Consumer", "AsyncConsumer", "Publisher", "AsyncPublisher"}
    if package == "nats":
        names.discard("Consumer")  # nats-py has no synchronous client
    if package == "redis":
        names.discard("AsyncPublisher")  # its Publisher takes a sync or an asyncio client
    assert names <= set(module.__all__)
    assert all(isinstance(getattr(module, name), type) for name in names)


class NoJetStream(JetStreamContext):
    """A JetStream context that fails the test when anything of it is used."""

    def __init__(self) -> None:
        """No connection."""

    def __getattribute__(self, name: str) -> NoReturn:
        raise AssertionError(f"the JetStream context was used: {name}")


async def handler(session: Any, delivery: Delivery) -> None:
    """An asyncio handler."""


@pytest.fixture
def consumer_kw() -> dict[str, Any]:
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    return {
        "session_factory": async_sessionmaker(create_async_engine("sqlite+aiosqlite://")),
        "inbox": Inbox(sa.MetaData()),
        "handler": handler,
        "dead_letter": "payments.dead",
    }


def test_the_nats_async_consumer_is_made_without_a_request(consumer_kw: dict[str, Any]) -> None:
    from sa_inbox.brokers.nats import AsyncConsumer

    consumer = AsyncConsumer(NoJetStream(), "PAYMENTS", "billing", **with_options(consumer_kw))  # type: ignore[arg-type]
    consumer.stop()
    assert (consumer.stream, consumer.durable) == ("PAYMENTS", "billing")


@pytest.mark.parametrize(
    ("wrong", "error"),
    [
        ({"key_source": ""}, InvalidArgument),
        ({"max_keyless": 0}, InvalidArgument),
        ({"max_deliveries": 0}, InvalidArgument),
        ({"session_factory": sa.orm.sessionmaker()}, InvalidSessionFactory),
    ],
    ids=["empty key_source", "max_keyless 0", "max_deliveries 0", "sessionmaker"],
)
def test_the_nats_async_consumer_refuses_a_bad_argument_when_made(
    consumer_kw: dict[str, Any], wrong: dict[str, Any], error: type[Exception]
) -> None:
    from sa_inbox.brokers.nats import AsyncConsumer

    with pytest.raises(
        error, match=r"nats\.AsyncConsumer\(\)|DeliveryOptions\(\)|max_deliveries"
    ) as info:
        AsyncConsumer(
            NoJetStream(), "PAYMENTS", "billing", **with_options({**consumer_kw, **wrong})
        )  # type: ignore[arg-type]
    assert isinstance(info.value, ConfigurationError)


def test_the_nats_consume_function_is_deprecated_for_the_async_consumer(
    consumer_kw: dict[str, Any],
) -> None:
    import asyncio

    from sa_inbox.brokers.nats import consume

    bad = {**with_options(consumer_kw), "options": "not options"}
    with (
        pytest.warns(DeprecationWarning, match=r"consume\(\) is deprecated: use .*AsyncConsumer"),
        pytest.raises(InvalidArgument, match=r"nats\.AsyncConsumer\(\)"),
    ):
        asyncio.run(consume(NoJetStream(), "PAYMENTS", "billing", **bad))  # type: ignore[arg-type]


@pytest.mark.parametrize(("stream", "durable"), [("", "billing"), ("PAYMENTS", ""), (7, "billing")])
def test_the_nats_async_consumer_refuses_an_empty_stream_or_durable_name(
    consumer_kw: dict[str, Any], stream: Any, durable: Any
) -> None:
    from sa_inbox.brokers.nats import AsyncConsumer

    with pytest.raises(InvalidArgument, match=r"nats\.AsyncConsumer\(\): (stream|durable) must"):
        AsyncConsumer(NoJetStream(), stream, durable, **with_options(consumer_kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("given", ["connection", "None", "URL"])
def test_the_nats_publisher_refuses_what_is_no_jetstream_context(given: str) -> None:
    from nats.aio.client import Client

    from sa_inbox.brokers.nats import AsyncPublisher
    from sa_inbox.exc import InvalidObject

    wrong = {"connection": Client(), "None": None, "URL": "nats://127.0.0.1:1"}[given]
    with pytest.raises(InvalidObject, match=r"^AsyncPublisher\(\) takes a JetStream context"):
        AsyncPublisher(wrong)
    assert AsyncPublisher(Client().jetstream()).timeout > 0


@pytest.mark.parametrize(
    ("subject", "pattern", "matches"),
    [
        ("orders.dead", "orders.dead", True),
        ("orders.dead", "orders.*", True),
        ("orders.dead", "orders.>", True),
        ("orders", "orders.>", False),
        ("orders.new.eu", "orders.*", False),
        ("orders.new.eu", "orders.>", True),
        ("orders.dead", "orders.new", False),
        ("orders.dead", "*.dead", True),
    ],
)
def test_a_nats_subject_matches_a_filter_as_nats_wildcards_say(
    subject: str, pattern: str, matches: bool
) -> None:
    from sa_inbox.brokers.nats.consumer import subject_matches

    assert subject_matches(subject, pattern) is matches
