"""The RabbitMQ consumers and publishers refuse a broker URL that is no ``amqp://`` or
``amqps://`` URL when they are made, before connecting, without echoing the URL (it may
hold a password)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sa_inbox.exc import InvalidArgument
from tests.support import unconnected


def _publisher(url: Any) -> object:
    from sa_inbox.brokers.rabbitmq import Publisher

    return Publisher(url)


def _async_publisher(url: Any) -> object:
    from sa_inbox.brokers.rabbitmq import AsyncPublisher

    return AsyncPublisher(url)


MADE: dict[str, Callable[[Any], object]] = {
    "Consumer": lambda url: unconnected.rabbitmq(url=url),
    "AsyncConsumer": lambda url: unconnected.rabbitmq(url=url, asynchronous=True),
    "Publisher": _publisher,
    "AsyncPublisher": _async_publisher,
}


@pytest.mark.parametrize("made", sorted(MADE))
@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("htp://guest:s3cret@127.0.0.1/", "not htp://"),
        ("127.0.0.1:5672", "not 127.0.0.1://|not no scheme"),
        ("", "not no scheme"),
    ],
    ids=["misspelled scheme", "no scheme", "empty"],
)
def test_a_url_that_is_not_amqp_is_refused_when_made(made: str, url: str, said: str) -> None:
    with pytest.raises(InvalidArgument, match=r"broker URL must start with amqp://") as info:
        MADE[made](url)
    assert any(part in str(info.value) for part in said.split("|"))
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize("made", ["Consumer", "Publisher"])
def test_a_url_pika_cannot_parse_is_refused_when_made(made: str) -> None:
    with pytest.raises(InvalidArgument, match="refused by pika"):
        MADE[made]("amqp://guest:guest@127.0.0.1:port/")


@pytest.mark.parametrize("made", sorted(MADE))
@pytest.mark.parametrize("url", ["amqp://guest:guest@127.0.0.1:1/", "amqps://127.0.0.1:1/"])
def test_an_amqp_url_is_taken(made: str, url: str) -> None:
    assert MADE[made](url) is not None
