"""Who owns a consumer name when the handler's own name cannot tell: lambdas, FastStream's
subscribers behind the middleware, Celery's tasks behind the task wrapper; on SQLite,
PostgreSQL and MariaDB (the asyncio ones on each async driver), with the live RabbitMQ for
FastStream.

A lambda is refused as an owner (every lambda of a scope is ``module.<lambda>``) unless
:func:`~sa_inbox.consumers.owned_as` names it. FastStream's owner is the subscriber's
function and Celery's the task's name, never the adapter's wrapper that every subscriber or
task shares. Business state (effect rows per handler, claims, owner rows) is asserted.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

import sa_inbox
from sa_inbox import ConfigurationError, Outcome
from sa_inbox.consumers import handler_name, owned_as
from sa_inbox.exc import AnonymousHandler, ConsumerNameTaken
from tests.backends.asyncio.conftest import async_url as async_url
from tests.backends.asyncio.conftest import sync_url as sync_url
from tests.backends.consumers import orders
from tests.backends.consumers.orders import CONSUMER, Broker, Orders, create_order
from tests.conftest import broker_url, importorskip

faststream = importorskip("faststream", "faststream")
Context = faststream.Context

pytestmark = pytest.mark.backend


@pytest.fixture
def service(engine: sa.Engine) -> Iterator[Orders]:
    sa.Table("inbox_consumers", sa.MetaData()).drop(engine, checkfirst=True)
    service = orders.ORDERS
    service.reset(engine)
    yield service
    service.metadata.drop_all(engine, checkfirst=True)


def _handle(engine: sa.Engine, service: Orders, message_id: str, handler: Any, broker: Broker):  # type: ignore[no-untyped-def]
    return sa_inbox.handle(
        sessionmaker(engine),
        service.inbox,
        message_id,
        CONSUMER,
        handler,
        ack=broker.ack,
        nack=broker.nack,
    )


# -- lambdas --------------------------------------------------------------------------------


def test_a_lambda_is_refused_as_owner_before_anything_is_claimed(
    engine: sa.Engine, service: Orders
) -> None:
    """Two lambdas of one scope (the issue's ``create_order`` and ``send_invoice``) would
    both be ``<lambda>``: each is refused, neither acked nor nacked, nothing claimed."""
    broker = Broker()
    create = lambda session: orders.create_order(session, "evt-1")  # noqa: E731
    invoice = lambda session: orders.send_invoice(session, "evt-1")  # noqa: E731
    assert handler_name(create) == handler_name(invoice)
    for handler in (create, invoice):
        with pytest.raises(AnonymousHandler, match="is a lambda") as info:
            _handle(engine, service, "evt-1", handler, broker)
        assert isinstance(info.value, ConfigurationError)
    assert (broker.acks, broker.nacks) == (0, 0)
    assert service.claims(engine) == 0 and service.owners(engine) == []
    assert service.effects_by_handler(engine) == {}


def test_lambdas_named_with_owned_as_own_the_name_each_by_its_own_name(
    engine: sa.Engine, service: Orders
) -> None:
    broker = Broker()
    create = owned_as("orders.create", lambda session: orders.create_order(session, "evt-1"))
    invoice = owned_as("orders.invoice", lambda session: orders.send_invoice(session, "evt-1"))
    assert _handle(engine, service, "evt-1", create, broker).outcome is Outcome.PROCESSED
    with pytest.raises(ConsumerNameTaken) as info:
        _handle(engine, service, "evt-1", invoice, broker)
    assert (info.value.owner, info.value.handler) == ("orders.create", "orders.invoice")
    # the same lambda made again for a redelivery (a new closure) is the same owner
    again = owned_as("orders.create", lambda session: orders.create_order(session, "evt-1"))
    assert _handle(engine, service, "evt-1", again, broker).outcome is Outcome.DUPLICATE
    assert (broker.acks, broker.nacks) == (2, 0)
    assert service.owners(engine) == [(CONSUMER, "orders.create")]
    assert service.effects_by_handler(engine) == {"create_order": 1}
    assert service.claims(engine) == 1


def test_a_named_function_given_the_message_by_partial_owns_by_its_name(
    engine: sa.Engine, service: Orders
) -> None:
    """What the README shows instead of a lambda."""
    broker = Broker()
    for message_id in ("evt-1", "evt-2", "evt-1"):
        handler = functools.partial(create_order, message_id=message_id)
        _handle(engine, service, message_id, handler, broker)
    assert service.owners(engine) == [(CONSUMER, handler_name(create_order))]
    assert service.effects_by_handler(engine) == {"create_order": 2}
    assert (broker.acks, broker.nacks) == (3, 0)


# -- Celery: the task's name ---------------------------------------------------------------


def test_celery_tasks_own_the_name_by_the_task_name(engine: sa.Engine, service: Orders) -> None:
    """Two tasks under one consumer name: the first owns it by its task name (not the
    adapter's wrapper, which every task shares), the second is refused, claiming nothing."""
    importorskip("celery", "celery")
    from celery import Celery

    from sa_inbox.brokers.celery import inbox_task

    app = Celery("owners", broker=broker_url("rabbitmq"))
    options = {"session_factory": sessionmaker(engine), "inbox": service.inbox}

    @inbox_task(app, consumer_name=CONSUMER, name="orders.create", **options)
    def create(session: Session, idempotency_key: str) -> None:
        orders.create_order(session, idempotency_key)

    @inbox_task(app, consumer_name=CONSUMER, name="orders.invoice", **options)
    def invoice(session: Session, idempotency_key: str) -> None:
        orders.send_invoice(session, idempotency_key)

    create.apply(kwargs={"idempotency_key": "evt-1"}, throw=True)  # what the worker runs
    create.apply(kwargs={"idempotency_key": "evt-1"}, throw=True)  # a duplicate
    with pytest.raises(ConsumerNameTaken) as info:
        invoice.apply(kwargs={"idempotency_key": "evt-2"}, throw=True)
    assert (info.value.owner, info.value.handler) == ("orders.create", "orders.invoice")
    assert service.owners(engine) == [(CONSUMER, "orders.create")]
    assert service.effects_by_handler(engine) == {"create_order": 1}
    assert service.claims(engine) == 1


# -- FastStream: the subscriber's function, over the live RabbitMQ ---------------------------


#: The handlers the FastStream subscribers ran, in order.
RAN: list[str] = []


async def fs_create_order(
    body: dict[str, Any], session: Annotated[AsyncSession, Context("inbox_session")]
) -> None:
    """A FastStream subscriber of the module, as an application's are."""
    RAN.append("create_order")
    await orders.create_order_async(session, body["id"])


async def fs_send_invoice(
    body: dict[str, Any], session: Annotated[AsyncSession, Context("inbox_session")]
) -> None:
    """Another subscriber, given the same consumer name."""
    RAN.append("send_invoice")
    await orders.send_invoice_async(session, body["id"])


async def _two_subscribers(url: str, async_db_url: str) -> list[str]:
    """One RabbitMQ broker, one InboxMiddleware (consumer name ``orders``), two subscribers
    on two queues; one message to each, the create_order one first. Returns the errors
    FastStream logged."""
    import logging

    from faststream import AckPolicy
    from faststream.rabbit import RabbitBroker, RabbitQueue

    from sa_inbox.brokers.faststream import InboxMiddleware

    engine = create_async_engine(async_db_url, poolclass=NullPool)
    errors: list[str] = []
    logger = logging.getLogger(f"owners_{uuid.uuid4().hex}")
    recorder = logging.Handler(logging.ERROR)
    recorder.emit = lambda record: errors.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(recorder)
    middleware = InboxMiddleware(
        session_factory=async_sessionmaker(engine),
        inbox=orders.ORDERS.inbox,
        consumer_name=CONSUMER,
    )
    broker = RabbitBroker(url, middlewares=[middleware], logger=logger)
    queues = [RabbitQueue(f"owners_{uuid.uuid4().hex[:10]}", auto_delete=True) for _ in "ab"]
    broker.subscriber(queues[0], ack_policy=AckPolicy.MANUAL)(fs_create_order)
    broker.subscriber(queues[1], ack_policy=AckPolicy.MANUAL)(fs_send_invoice)
    try:
        async with broker:
            await broker.start()
            for expected, (queue, key) in enumerate(((queues[0], "evt-1"), (queues[1], "evt-2"))):
                await broker.publish({"id": key}, queue.name, headers={"idempotency-key": key})
                deadline = asyncio.get_running_loop().time() + 20
                while len(RAN) + len(errors) <= expected:
                    assert asyncio.get_running_loop().time() < deadline, (RAN, errors)
                    await asyncio.sleep(0.05)
    finally:
        await engine.dispose()
    return errors


def test_faststream_subscribers_own_the_name_by_their_function(
    async_url: str, sync_url: str
) -> None:
    engine = sa.create_engine(sync_url)
    service = orders.ORDERS
    sa.Table("inbox_consumers", sa.MetaData()).drop(engine, checkfirst=True)
    service.reset(engine)
    try:
        RAN.clear()
        errors = asyncio.run(_two_subscribers(broker_url("rabbitmq"), async_url))
        owner = f"{__name__}.fs_create_order"
        assert RAN == ["create_order"], "the second subscriber was refused before its handler"
        assert any("ConsumerNameTaken" in e and "fs_send_invoice" in e for e in errors), errors
        assert service.owners(engine) == [(CONSUMER, owner)]
        assert service.effects_by_handler(engine) == {"create_order": 1}
        assert service.claims(engine) == 1
    finally:
        service.metadata.drop_all(engine, checkfirst=True)
        engine.dispose()
