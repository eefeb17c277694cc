"""Broker adapters as the exactly-once checks run them: each adapter's settings and its own
key reading, without a broker.

A profile (:class:`AdapterProfile`) takes from a consumer object made as in production
(``rabbitmq.Consumer(url, "payments", session_factory=..., inbox=..., handler=...,
options=DeliveryOptions(key_source=...))``; making one connects to nothing) what
:func:`sa_inbox.brokers.process` needs, and turns a
:class:`~sa_inbox.testing.BrokerDelivery` into the broker's own message fields and then into
a :class:`~sa_inbox.brokers.Delivery` through the adapter's own mapping: the same key
reading as in production, fed deliveries whose broker metadata differ.

Profiles exist for the RabbitMQ consumers (pika and aio-pika) and the Redis Streams
consumers. An adapter package adds its own with :func:`register_adapter` (a Kafka or SQS
adapter maps ``partition``/``offset`` or ``receipt_handle``/``delivery_count`` of the
delivery onto its client's record); the registry holds class paths, so nothing here imports
a broker's client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..brokers.delivery import Delivery
from ..brokers.process import DEFAULT_MAX_DELIVERIES
from ..exc import InvalidObject
from .messages import BrokerDelivery

__all__ = ["AdapterProfile", "profile_of", "register_adapter"]


@dataclass(frozen=True)
class AdapterProfile:
    """What the checks need of one broker adapter.

    :param name: the adapter, for the report (``"Consumer of payments"``).
    :param session_factory: its session factory.
    :param inbox: its inbox.
    :param consumer_name: its consumer name.
    :param handler: its ``handler(session, delivery)``.
    :param asynchronous: whether it runs on asyncio (``process_async``).
    :param to_delivery: the adapter's own mapping of a broker delivery (its key reading).
    :param max_deliveries: its delivery limit.

    The checks refuse, before any SQL, a profile whose objects the adapter could not run
    (as :func:`sa_inbox.brokers.startup.check_consumer` refuses a consumer's).
    """

    name: str
    session_factory: Callable[[], Any]
    inbox: Any
    consumer_name: str
    handler: Callable[..., Any]
    asynchronous: bool
    to_delivery: Callable[[BrokerDelivery], Delivery]
    max_deliveries: int = DEFAULT_MAX_DELIVERIES


#: Adapter class path (``module.QualName``) -> its profile maker.
_PROFILES: dict[str, Callable[[Any], AdapterProfile]] = {}


def register_adapter(class_path: str, profile: Callable[[Any], AdapterProfile]) -> None:
    """Make adapters of the class ``class_path`` (and its subclasses) checkable.

    :param class_path: ``"package.module.ClassName"`` as the class's ``__module__`` and
        ``__qualname__`` name it.
    :param profile: ``profile(adapter)`` returns its :class:`AdapterProfile`.
    """
    _PROFILES[class_path] = profile


def profile_of(adapter: object) -> AdapterProfile | None:
    """The profile of ``adapter``, or None when it is no registered adapter."""
    for cls in type(adapter).__mro__:
        maker = _PROFILES.get(f"{cls.__module__}.{cls.__qualname__}")
        if maker is not None:
            return maker(adapter)
    return None


def _readiness(adapter: Any) -> Any:
    readiness = getattr(adapter, "readiness", None)
    if readiness is None or readiness.handler is None or readiness.consumer_name is None:
        raise InvalidObject(
            f"{type(adapter).__name__} runs no handler(session, delivery) of its own: pass "
            "handler=, session_factory=, inbox= and consumer_name= to the check instead"
        )
    return readiness


def _profile(
    adapter: Any,
    readiness: Any,
    source: str,
    delivery: Callable[[BrokerDelivery], Delivery],
    max_deliveries: int,
) -> AdapterProfile:
    """The profile of ``adapter`` (its :func:`_readiness`), which reads ``source`` (a
    queue, a stream), maps deliveries with ``delivery`` and stops at ``max_deliveries``."""
    return AdapterProfile(
        f"{type(adapter).__name__} of {source}",
        readiness.session_factory,
        readiness.inbox,
        readiness.consumer_name,
        readiness.handler,
        readiness.asynchronous,
        delivery,
        max_deliveries,
    )


def _rabbitmq(adapter: Any) -> AdapterProfile:
    """The RabbitMQ ``Consumer`` (pika) and ``AsyncConsumer`` (aio-pika): the ``message_id``
    property (or the ``options.key_source`` header), a quorum queue's ``x-delivery-count``."""
    from ..brokers.rabbitmq.message import DELIVERY_COUNT_HEADER, to_delivery

    readiness = _readiness(adapter)

    def delivery(bd: BrokerDelivery) -> Delivery:
        headers = dict(bd.headers)
        if bd.delivery_count > 1:
            headers[DELIVERY_COUNT_HEADER] = bd.delivery_count - 1
        return to_delivery(
            message_id=bd.message_id,
            headers=headers,
            body=bd.body,
            redelivered=bd.redelivered,
            delivery_tag=bd.delivery_tag,
            key_header=adapter.key_header,
        )

    return _profile(
        adapter, readiness, adapter.queue, delivery, adapter.process_options["max_deliveries"]
    )


def _redis(adapter: Any) -> AdapterProfile:
    """The Redis Streams consumers: the entry's fields (the producer's id in the field
    ``options.key_source`` names, as :class:`~sa_inbox.brokers.redis.Publisher` writes it),
    the group's times-delivered counter."""
    from ..brokers.redis.core import Entry, to_delivery

    readiness = _readiness(adapter)
    settings = adapter.settings

    def delivery(bd: BrokerDelivery) -> Delivery:
        fields: dict[str, Any] = {}
        if bd.message_id is not None:
            fields[settings.key_field] = bd.message_id
        fields.update(bd.headers)
        fields[settings.body_field] = bd.body
        return to_delivery(Entry(bd.entry_id, fields, bd.delivery_count), settings)

    return _profile(adapter, readiness, settings.stream, delivery, settings.max_deliveries)


register_adapter("sa_inbox.brokers.rabbitmq.consumer.QueueConsumer", _rabbitmq)
register_adapter("sa_inbox.brokers.redis.core.ConsumerBase", _redis)
