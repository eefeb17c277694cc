"""A consumer's broker connection lost and made again: the back-off and the log lines.

Every consumer whose ``run()`` outlives its connection (RabbitMQ pika and aio-pika, Redis
sync and asyncio, NATS) keeps one :class:`Reconnects`: on a lost connection it logs one
WARNING (the first failure of a loss), waits with capped exponential back-off and full
jitter between attempts (each failed attempt logged at DEBUG only), and logs one INFO with
the loss's duration once it consumes again. The deliveries in hand when the connection
died are the broker's again: it redelivers what was unsettled (RabbitMQ requeues a dead
channel's unacked deliveries, a Redis entry stays pending, a JetStream message comes back
after ``ack_wait``); a committed one comes back as a duplicate. Only a connection that was
made once is made again: a consumer whose first connection fails (a wrong URL, nothing
listening) raises at once, as a configuration error would.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from ..backoff import Backoff
from ..exc import DatabaseUnavailable

__all__ = [
    "DEFAULT_RECONNECT_BACKOFF",
    "Reconnecting",
    "Reconnects",
    "Stoppable",
    "sleep_unless",
    "wait_unless",
]

logger = logging.getLogger("sa_inbox.brokers")

#: The wait between two connection attempts: 0.5 s doubling to 10 s, full jitter.
DEFAULT_RECONNECT_BACKOFF = Backoff(base=0.5, maximum=10.0)


class Reconnects:
    """The state of one consumer's broker connection (see the module).

    :param what: the consumer, as the log lines name it (``"RabbitMQ consumer of payments"``).
    :param backoff: the waits between attempts.
    :param clock: monotonic seconds.
    """

    def __init__(
        self,
        what: str,
        *,
        backoff: Backoff = DEFAULT_RECONNECT_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.backoff = backoff
        self.clock = clock
        self._lost_at: float | None = None
        self._attempts = 0
        #: Losses seen.
        self.losses = 0
        #: Whether a connection was ever made: a consumer that never connected is set up
        #: wrongly (a wrong URL, a port nothing listens on) and fails at once instead.
        self.ever_connected = False

    @property
    def lost(self) -> bool:
        """Whether the connection is lost and not made again yet."""
        return self._lost_at is not None

    def failed(self, error: BaseException) -> float:
        """Record a lost connection or a failed attempt; returns the seconds to wait."""
        self._attempts += 1
        if self._lost_at is None:
            self._lost_at = self.clock()
            self.losses += 1
            logger.warning(
                "%s: connection lost (%s); reconnecting with back-off",
                self.what,
                _describe(error),
                extra={"action": "connection_lost", "error": _describe(error)},
            )
        else:
            logger.debug(
                "%s: reconnect attempt %d failed: %s", self.what, self._attempts, _describe(error)
            )
        return self.backoff.jittered(self._attempts)

    def connected(self) -> None:
        """Record a connection made (or a broker that answers again); logs the end of a
        loss once."""
        lost_at, self._lost_at, self._attempts = self._lost_at, None, 0
        self.ever_connected = True
        if lost_at is not None:
            logger.info(
                "%s: reconnected after %.1f s",
                self.what,
                self.clock() - lost_at,
                extra={"action": "reconnected", "seconds": self.clock() - lost_at},
            )


def _describe(error: BaseException) -> str:
    text = " ".join(str(error).split())[:300]
    return f"{type(error).__name__}: {text}" if text else repr(error)


class Stoppable:
    """A consumer's stop: :meth:`stop` sets its own event (``_stop``, a ``threading.Event``
    or an ``asyncio.Event``); ``run(stop=...)`` may add the caller's (``_extra_stop``)."""

    _stop: Any
    _extra_stop: Any = None

    def _stopping(self) -> bool:
        extra = self._extra_stop
        return bool(self._stop.is_set() or (extra is not None and extra.is_set()))


class Reconnecting(Stoppable, abc.ABC):
    """A consumer whose ``run()`` loop outlives a lost connection (RabbitMQ, Redis Streams,
    SQS): :meth:`_wait_after` is that loop's rule for an error that ended one pass."""

    reconnects: Reconnects

    @abc.abstractmethod
    def _connection_lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a lost connection (each broker's own test)."""

    @abc.abstractmethod
    def _lost(self, exc: BaseException) -> float:
        """Forget what died with the connection; the seconds to wait (:meth:`Reconnects.failed`)."""

    def _wait_after(self, exc: BaseException) -> float | None:
        """The seconds to wait before the next pass after one raised ``exc``, or None to
        raise it: 0 for a :class:`~sa_inbox.exc.DatabaseUnavailable` of a stop (the loop
        ends); :meth:`_lost`'s back-off for a lost connection of a consumer that connected
        once and is not stopping."""
        if isinstance(exc, DatabaseUnavailable):
            return 0.0 if self._stopping() else None
        if not self._connection_lost(exc) or not self.reconnects.ever_connected:
            return None
        return None if self._stopping() else self._lost(exc)


def wait_unless(
    stopping: Callable[[], bool], wait: Callable[[float], Any], seconds: float, step: float
) -> bool:
    """Wait ``seconds`` (``wait(s)`` at most ``step`` s at a time), less once ``stopping()``;
    whether it is."""
    deadline = time.monotonic() + seconds
    while not stopping() and (left := deadline - time.monotonic()) > 0:
        wait(min(left, step))
    return stopping()


async def sleep_unless(stopping: Callable[[], bool], seconds: float, step: float = 0.1) -> bool:
    """:func:`wait_unless` on the running event loop (``asyncio.sleep``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not stopping() and (left := deadline - loop.time()) > 0:
        await asyncio.sleep(min(left, step))
    return stopping()
