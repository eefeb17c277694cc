"""Broker consumers made, never run: on an unbound Inbox and session factory and an
unreachable broker, for the checks a consumer makes when it is made (no server needed).

Each takes the keyword arguments it passes on; the defaults are valid ones.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox

#: A broker URL nothing listens on.
AMQP_URL = "amqp://127.0.0.1:1/"


def _objects(asynchronous: bool, given: dict[str, Any]) -> dict[str, Any]:
    """The session factory, inbox, handler (of the ``asynchronous`` half) and consumer name,
    then ``given``."""
    return {
        "session_factory": async_sessionmaker() if asynchronous else sessionmaker(),
        "inbox": Inbox(sa.MetaData()),
        "handler": lambda session, delivery: None,
        "consumer_name": "billing",
        **given,
    }


def rabbitmq(*, asynchronous: bool = False, url: Any = AMQP_URL, **given: Any) -> Any:
    """A RabbitMQ ``Consumer`` (or ``AsyncConsumer``) of the queue ``payments``."""
    from sa_inbox.brokers.rabbitmq import AsyncConsumer, Consumer

    made = AsyncConsumer if asynchronous else Consumer
    return made(url, "payments", **_objects(asynchronous, given))


def faststream(**given: Any) -> Any:
    """FastStream's ``InboxMiddleware``."""
    from sa_inbox.brokers.faststream import InboxMiddleware

    objects = _objects(True, given)
    del objects["handler"]
    return InboxMiddleware(**objects)


def celery(*, app: Any = None, **given: Any) -> Any:
    """Celery's ``inbox_task`` decorator, on an in-memory app unless ``app`` is given."""
    from celery import Celery

    from sa_inbox.brokers.celery import inbox_task

    objects = _objects(False, given)
    del objects["handler"]
    return inbox_task(Celery("unconnected", broker="memory://") if app is None else app, **objects)
