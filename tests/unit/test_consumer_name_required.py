"""The adapters that take no default consumer name refuse None when made, as they refuse an
empty one, before connecting to the broker or the database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox
from sa_inbox.exc import InvalidMessageId


def _pika(name: Any) -> object:
    from sa_inbox.brokers.rabbitmq import Consumer

    return Consumer(
        "amqp://127.0.0.1:1/",
        "payments",
        session_factory=sessionmaker(),
        inbox=Inbox(sa.MetaData()),
        consumer_name=name,
        handler=lambda session, delivery: None,
    )


def _aio_pika(name: Any) -> object:
    from sa_inbox.brokers.rabbitmq import AsyncConsumer

    return AsyncConsumer(
        "amqp://127.0.0.1:1/",
        "payments",
        session_factory=async_sessionmaker(),
        inbox=Inbox(sa.MetaData()),
        consumer_name=name,
        handler=lambda session, delivery: None,
    )


def _faststream(name: Any) -> object:
    from sa_inbox.brokers.faststream import InboxMiddleware

    return InboxMiddleware(
        session_factory=async_sessionmaker(), inbox=Inbox(sa.MetaData()), consumer_name=name
    )


def _celery(name: Any) -> object:
    from celery import Celery

    from sa_inbox.brokers.celery import inbox_task

    return inbox_task(
        Celery("names", broker="memory://"),
        session_factory=sessionmaker(),
        inbox=Inbox(sa.MetaData()),
        consumer_name=name,
    )


MADE: dict[str, Callable[[Any], object]] = {
    "rabbitmq.Consumer": _pika,
    "rabbitmq.AsyncConsumer": _aio_pika,
    "faststream.InboxMiddleware": _faststream,
    "celery.inbox_task": _celery,
}


@pytest.mark.parametrize("made", sorted(MADE))
@pytest.mark.parametrize("name", [None, ""], ids=["None", "empty"])
def test_a_consumer_without_a_default_name_refuses_none_when_made(
    made: str, name: str | None
) -> None:
    with pytest.raises(InvalidMessageId, match="consumer_name"):
        MADE[made](name)


@pytest.mark.parametrize("made", sorted(MADE))
def test_a_named_consumer_is_made(made: str) -> None:
    assert MADE[made]("billing") is not None
