"""The settings every broker consumer shares: the delivery limit, the back-off, the dead
letter, where the key is read, and the settlement callback.

Each consumer takes them as one :class:`DeliveryOptions` (``options=``), beside the few
arguments of its own broker (its connection, queue or stream, and its poll settings).

.. seealso:: :doc:`/how-to/brokers` for what each broker does with each setting.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

from ..backoff import Backoff
from ..exc import InvalidArgument
from ..validation import positive_int, shown
from .keys import DEFAULT_MAX_KEYLESS, check_key_name, check_max_keyless
from .process import DEFAULT_MAX_DELIVERIES, OnSettled

__all__ = ["DeliveryOptions", "RetryDelay", "options_of"]

#: ``delay(delivery count) -> seconds`` before a failed message comes back, such as
#: :meth:`sa_inbox.backoff.Backoff.delay`.
RetryDelay = Callable[[int], float]


@dataclass(frozen=True, kw_only=True)
class DeliveryOptions:
    """What a broker consumer does with each delivery, whatever the broker.

    Example::

        options = DeliveryOptions(max_deliveries=5, dead_letter="payments.dead")
        Consumer(url, "payments", ..., options=options)

    :param max_deliveries: deliveries allowed per message (the broker's count; on Kafka the
        failed attempts counted in the database), an int >= 1, before it is dead-lettered;
        None: 5, or on SQS the queue's redrive policy's ``maxReceiveCount``.
    :param retry_delay: ``delay(delivery count) -> seconds`` (>= 0) a failed message waits
        before it comes back, or a :class:`~sa_inbox.backoff.Backoff` (its ``delay``); None:
        the broker's default. NATS (``nak`` with a delay), SQS (the message's visibility)
        and Celery (the retry's ``countdown``) can delay one message; the other consumers
        refuse it.
    :param dead_letter: the dead-letter queue (RabbitMQ, SQS), stream (Redis), topic (Kafka)
        or subject (NATS, required there); None: the broker's default
        (``<queue>.dead-letter``, ``<stream>:dead``, ``<topic>.dead``, the SQS queue's
        redrive policy).
    :param key_source: the header (RabbitMQ, Kafka, NATS, FastStream), entry field (Redis),
        message attribute (SQS) or keyword argument (Celery) holding the producer's key, the
        message_id; None: the broker's default (RabbitMQ: the AMQP ``message_id`` property;
        Kafka, Redis, SQS: ``message_id``; NATS: ``Nats-Msg-Id``; FastStream:
        ``idempotency-key``; Celery: ``idempotency_key``).
    :param max_keyless: keyless messages since the last keyed one after which the consumer
        gives back those it holds and raises :class:`~sa_inbox.exc.MissingKeyHeader` (a
        misspelled ``key_source``); None: each keyless message is dead-lettered at once
        (see :mod:`sa_inbox.brokers.keys`).
    :param on_settled: called with each :class:`~sa_inbox.brokers.Settlement`.
    :raises InvalidArgument: when made, for a value of the wrong type or range.
    """

    max_deliveries: int | None = None
    retry_delay: RetryDelay | Backoff | None = None
    dead_letter: str | None = None
    key_source: str | None = None
    max_keyless: int | None = DEFAULT_MAX_KEYLESS
    on_settled: OnSettled | None = None

    def __post_init__(self) -> None:
        entry = "DeliveryOptions()"
        if self.max_deliveries is not None:
            positive_int(self.max_deliveries, f"{entry}: max_deliveries", InvalidArgument)
        if self.key_source is not None:
            check_key_name(self.key_source, "key_source", entry=entry)
        dead = self.dead_letter
        if dead is not None and (not isinstance(dead, str) or not dead or dead != dead.strip()):
            raise InvalidArgument(
                f"{entry}: dead_letter must be a non-empty name without surrounding spaces, "
                f"or None, not {shown(dead)}"
            )
        check_max_keyless(self.max_keyless, entry=entry)
        if not isinstance(self.retry_delay, Backoff):
            _check_function(self.retry_delay, "retry_delay", entry)
        _check_function(self.on_settled, "on_settled", entry)

    def limit(self, default: int = DEFAULT_MAX_DELIVERIES) -> int:
        """``max_deliveries``, or ``default`` when it is None."""
        return default if self.max_deliveries is None else self.max_deliveries

    def delay(self, default: RetryDelay) -> RetryDelay:
        """``retry_delay`` (a Backoff's :meth:`~sa_inbox.backoff.Backoff.delay`), or
        ``default`` when it is None."""
        if self.retry_delay is None:
            return default
        return self.retry_delay.delay if isinstance(self.retry_delay, Backoff) else self.retry_delay

    def key(self, default: str) -> str:
        """``key_source``, or ``default`` when it is None."""
        return default if self.key_source is None else self.key_source


def _check_function(value: object, name: str, entry: str) -> None:
    """Refuse ``value`` unless it is None or a function taking one positional argument (a
    class is refused: calling it makes an object, not seconds or a report).

    :raises InvalidArgument: otherwise.
    """
    if value is None:
        return
    takes_one = callable(value) and not isinstance(value, type)
    if callable(value) and takes_one:
        try:
            inspect.signature(value).bind(None)
        except TypeError:
            takes_one = False
        except ValueError:  # a builtin without a signature: taken as it is
            pass
    if not takes_one:
        raise InvalidArgument(
            f"{entry}: {name} must be a function of one argument or None, not {shown(value)}"
        )


def options_of(
    value: object, entry: str, *, refused: Iterable[tuple[str, str]] = ()
) -> DeliveryOptions:
    """``value`` if it is a :class:`DeliveryOptions` (None: the defaults) that sets none of
    ``refused`` to a value other than None or its default.

    :param entry: the consumer, for the messages (``"Consumer()"``).
    :param refused: ``(setting, why)`` pairs the consumer cannot serve when set.
    :raises InvalidArgument: for anything else, before any request or SQL.
    """
    if value is None:
        return DeliveryOptions()
    if not isinstance(value, DeliveryOptions):
        raise InvalidArgument(
            f"{entry}: options must be a sa_inbox.brokers.DeliveryOptions, not {shown(value)}"
        )
    defaults = {field.name: field.default for field in fields(DeliveryOptions)}
    for name, why in refused:
        if getattr(value, name) not in (None, defaults[name]):
            raise InvalidArgument(f"{entry}: options.{name} cannot be served: {why}")
    return value
