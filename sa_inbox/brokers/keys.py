"""The producer's key as every adapter reads it, and the run of keyless deliveries that stops a
consumer.

**Reading the key** (:func:`read_key`): a ``str`` is the key; ``bytes`` are decoded as
UTF-8; anything else the broker's client returns (an AMQP ``int``, ``float``, ``list``,
``bytes`` that are not UTF-8) is not a key: the delivery carries a :attr:`Delivery.key_error`
and is dead-lettered ``invalid_message_id`` with that reason, never taken as ``str(value)``
(an ``int`` 7 and a string "7" from two producers would be one message).

**A run of keyless deliveries** (:class:`KeylessStreak`). One delivery without the key is
the producer's bug: dead-lettered ``missing_message_id``. ``max_keyless`` consecutive ones
are the consumer's (a misspelled ``key_source`` would dead-letter the whole queue). The run
counts every keyless delivery since the last keyed one, however far apart they come:
time never ends a run, only a keyed delivery does. The adapter holds each keyless delivery
unsettled while more may follow at once; a keyed delivery, or no delivery for a moment (the
adapter's idle wait), settles the held ones as the producer's (dead-lettered), and the run
goes on counting. The ``max_keyless``-th keyless delivery of a run means a misconfigured
consumer: every delivery still held is given back to the broker unprocessed
(``give_back()``, each adapter's least costly redelivery) and
:class:`~sa_inbox.exc.MissingKeyHeader` is raised from ``run()`` / ``consume()``. So at most
``max_keyless - 1`` deliveries of a run are ever dead-lettered, on a busy queue (held, then
given back: none) as on a quiet one (each dead-lettered after the idle wait, the run still
counted).
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..exc import InvalidArgument, MissingKeyHeader
from ..validation import shown
from .delivery import Delivery

__all__ = [
    "DEFAULT_MAX_KEYLESS",
    "GivesBack",
    "KeylessStreak",
    "check_key_name",
    "check_max_keyless",
    "flush",
    "flush_async",
    "give_back",
    "give_back_async",
    "offer",
    "offer_async",
    "read_key",
]

#: Consecutive deliveries without the key after which a consumer stops (MissingKeyHeader).
DEFAULT_MAX_KEYLESS = 20


def check_key_name(name: object, what: str, *, entry: str) -> str:
    """``name`` if it can name a header, stream field or keyword argument.

    :param what: the argument as the message names it (``"key_header"``).
    :raises InvalidArgument: if it is not a ``str``, is empty, or has surrounding
        whitespace (no broker would deliver such a header to match it).
    """
    if not isinstance(name, str) or not name or name != name.strip():
        raise InvalidArgument(
            f"{entry}: {what} must be a non-empty header name without surrounding spaces, "
            f"not {name!r}"
        )
    return name


def check_max_keyless(value: object, *, entry: str) -> int | None:
    """``value`` if it is None (never stop) or an int >= 1.

    :raises InvalidArgument: otherwise.
    """
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise InvalidArgument(f"{entry}: max_keyless must be None or an int >= 1, not {value!r}")


def read_key(value: object) -> tuple[str | None, str | None]:
    """``(key, None)`` for a usable key value, ``(None, why)`` for an unusable one,
    ``(None, None)`` when there is none (``value`` is None).

    :param value: the header's (field's, argument's) value as the client returned it.
    """
    if value is None or isinstance(value, str):
        return value, None
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8"), None
        except UnicodeDecodeError:
            return None, f"the key is bytes that are not UTF-8 ({shown(bytes(value), 60)})"
    return None, f"the key is {type(value).__name__} {shown(value, 60)}, not a string"


class GivesBack(Protocol):
    """A settler that can hand a delivery back to the broker unprocessed and uncounted
    where the broker allows (each adapter's settler)."""

    def give_back(self) -> Awaitable[None] | None: ...


@dataclass
class KeylessStreak:
    """The keyless deliveries held by one consumer (see the module's docstring).

    :param key: the header (field, argument) the key is read from, for the error.
    :param limit: consecutive keyless deliveries that stop the consumer; None: never (each is
        dead-lettered at once).
    :param stop_deliveries: called (awaited if it returns an awaitable) before the held
        deliveries are given back, so the broker does not deliver them to this consumer
        again (RabbitMQ: close the channel, which requeues all its unacked deliveries).
    """

    key: str
    limit: int | None
    stop_deliveries: Callable[[], Any] | None = None
    held: list[tuple[Delivery, Any]] = field(default_factory=list)
    #: Keyless deliveries since the last keyed one (held, dead-lettered or given back).
    count: int = 0
    #: Of those, the ones settled (dead-lettered) as the producer's before the run reached
    #: the limit.
    settled: int = 0
    #: The header names the run's deliveries carried, and the types of key values that
    #: were not text, with their counts (for :meth:`error`).
    carried: Counter[str] = field(default_factory=Counter)
    wrong: Counter[str] = field(default_factory=Counter)

    def joins(self, delivery: Delivery) -> bool:
        """Whether ``delivery`` carries no usable key and is held."""
        return self.limit is not None and delivery.message_id is None

    def hold(self, delivery: Delivery, settler: Any) -> None:
        """Hold ``delivery`` and count it; a redelivery of a held one (same ``broker_ref``:
        taken back by the broker after its visibility timeout) replaces it, uncounted."""
        again = any(d.broker_ref == delivery.broker_ref for d, _ in self.held)
        self.held = [(d, s) for d, s in self.held if d.broker_ref != delivery.broker_ref]
        self.held.append((delivery, settler))
        if not again:
            self.count += 1
            self.carried.update(str(name) for name in delivery.headers)
            if delivery.key_error is not None:
                self.wrong[type(delivery.headers.get(self.key)).__name__] += 1

    def keyed(self) -> None:
        """A keyed delivery ends the run: the count starts again."""
        self.count = self.settled = 0
        self.carried.clear()
        self.wrong.clear()

    @property
    def full(self) -> bool:
        return self.limit is not None and self.count >= self.limit

    def release(self) -> list[tuple[Delivery, Any]]:
        """The held deliveries, in order; none are held after (the run's count stays)."""
        held, self.held = self.held, []
        return held

    def error(self) -> MissingKeyHeader:
        """The error for the run so far."""
        return MissingKeyHeader(
            self.key,
            self.count,
            dict(self.carried.most_common()),
            dict(self.wrong),
            dead_lettered=self.settled,
        )


# -- the flow, for the sync and the asyncio adapters -------------------------------------

Settle = Callable[[Delivery, Any], Any]


def offer(streak: KeylessStreak, delivery: Delivery, settler: Any, settle: Settle) -> list[Any]:
    """Settle ``delivery`` with ``settle(delivery, settler)``, or hold it if keyless.

    A keyed delivery first settles the held ones (a short run: dead-lettered).

    :returns: what ``settle`` returned, for each delivery settled now.
    :raises MissingKeyHeader: when the run reaches the limit; the held deliveries were given
        back first.
    """
    if streak.joins(delivery):
        streak.hold(delivery, settler)
        if streak.full:
            error = streak.error()
            give_back(streak)
            raise error
        return []
    settled = flush(streak, settle)
    streak.keyed()
    return [*settled, settle(delivery, settler)]


def flush(streak: KeylessStreak, settle: Settle) -> list[Any]:
    """Settle the held deliveries (the adapter was idle, or a keyed delivery came: the
    producer's), dead-lettering them; the run's count stays until a keyed delivery."""
    held = streak.release()
    streak.settled += len(held)
    return [settle(delivery, settler) for delivery, settler in held]


def give_back(streak: KeylessStreak) -> None:
    """Give the held deliveries back to the broker (the run reached the limit, or the
    consumer stops holding some: a stop decides nothing about them)."""
    if streak.stop_deliveries is not None:
        streak.stop_deliveries()
    for _, settler in streak.release():
        settler.give_back()


async def offer_async(
    streak: KeylessStreak, delivery: Delivery, settler: Any, settle: Settle
) -> list[Any]:
    """:func:`offer` with an ``async`` ``settle`` and ``give_back``."""
    if streak.joins(delivery):
        streak.hold(delivery, settler)
        if streak.full:
            error = streak.error()
            await give_back_async(streak)
            raise error
        return []
    settled = await flush_async(streak, settle)
    streak.keyed()
    return [*settled, await settle(delivery, settler)]


async def flush_async(streak: KeylessStreak, settle: Settle) -> list[Any]:
    """:func:`flush` with an ``async`` ``settle``."""
    held = streak.release()
    streak.settled += len(held)
    return [await settle(delivery, settler) for delivery, settler in held]


async def give_back_async(streak: KeylessStreak) -> None:
    """:func:`give_back` with ``async`` settlers."""
    if streak.stop_deliveries is not None:
        await _maybe_await(streak.stop_deliveries())
    for _, settler in streak.release():
        await _maybe_await(settler.give_back())


async def _maybe_await(value: object) -> None:
    if inspect.isawaitable(value):
        await value
