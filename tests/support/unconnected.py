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


def _objects(asynchronous: bool, given: dict[str, Any], **defaults: Any) -> dict[str, Any]:
    """The session factory, inbox and handler (of the ``asynchronous`` half), ``defaults``,
    then ``given``."""
    return {
        "session_factory": async_sessionmaker() if asynchronous else sessionmaker(),
        "inbox": Inbox(sa.MetaData()),
        "handler": lambda session, delivery: None,
        **defaults,
        **given,
    }


def rabbitmq(*, asynchronous: bool = False, url: Any = AMQP_URL, **given: Any) -> Any:
    """A RabbitMQ ``Consumer`` (or ``AsyncConsumer``) of the queue ``payments``."""
    from sa_inbox.brokers.rabbitmq import AsyncConsumer, Consumer

    made = AsyncConsumer if asynchronous else Consumer
    return made(url, "payments", **_objects(asynchronous, given, consumer_name="billing"))


def faststream(**given: Any) -> Any:
    """FastStream's ``InboxMiddleware``."""
    from sa_inbox.brokers.faststream import InboxMiddleware

    objects = _objects(True, given, consumer_name="billing")
    del objects["handler"]
    return InboxMiddleware(**objects)


def celery(*, app: Any = None, **given: Any) -> Any:
    """Celery's ``inbox_task`` decorator, on an in-memory app unless ``app`` is given."""
    from celery import Celery

    from sa_inbox.brokers.celery import inbox_task

    objects = _objects(False, given, consumer_name="billing")
    del objects["handler"]
    return inbox_task(Celery("unconnected", broker="memory://") if app is None else app, **objects)


def redis(**given: Any) -> Any:
    """A Redis Streams ``Consumer`` of the group ``billing``, on a client of a closed port."""
    import redis

    from sa_inbox.brokers.redis import Consumer

    return Consumer(redis.Redis(port=1), "payments", group="billing", **_objects(False, given))


def kafka(**given: Any) -> Any:
    """A Kafka ``AsyncConsumer`` of the group ``billing``."""
    from sa_inbox.brokers.kafka import AsyncConsumer

    return AsyncConsumer(
        "payments",
        bootstrap_servers="127.0.0.1:1",
        group_id="billing",
        **_objects(True, given),
    )


def nats(**given: Any) -> Any:
    """A NATS ``AsyncConsumer`` of the durable ``billing``, on an unconnected client's
    JetStream context."""
    from nats.aio.client import Client

    from sa_inbox.brokers.nats import AsyncConsumer

    return AsyncConsumer(Client().jetstream(), "PAYMENTS", "billing", **_objects(True, given))


def sqs(**given: Any) -> Any:
    """An SQS ``Consumer`` of the queue ``payments``, on a boto3 client of a closed port."""
    import boto3

    from sa_inbox.brokers.sqs import Consumer

    client = boto3.client(
        "sqs",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    return Consumer(client, "payments", **_objects(False, given))
