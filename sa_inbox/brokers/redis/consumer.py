"""The synchronous Redis Streams consumer, on redis-py's ``redis.Redis``."""

from __future__ import annotations

import threading
from functools import partial

import redis
from sqlalchemy.orm import Session

from ..delivery import Settlement
from ..process import process
from .core import ConsumerBase, Entry, drive, run_call

__all__ = ["RedisStreamConsumer"]


class RedisStreamConsumer(ConsumerBase[redis.Redis, Session]):
    """The Redis Streams consumer on a sync ``redis.Redis``, through
    :func:`sa_inbox.brokers.process`; its parameters and rules are
    :class:`~sa_inbox.brokers.redis.core.ConsumerBase`'s.

    Example::

        consumer = RedisStreamConsumer(
            redis.Redis.from_url("redis://localhost/0"), "payments",
            group="billing", session_factory=Session, inbox=inbox, handler=apply,
        )
        consumer.run()  # until consumer.stop(), e.g. from a SIGTERM handler
    """

    def _stop_event(self) -> threading.Event:
        return threading.Event()

    def ensure_group(self) -> None:
        """Create the group (and the stream) if missing; an existing group is kept.

        :raises redis.RedisError: if the server refuses (other than "exists already").
        """
        drive(self._core.ensure_group(), self.client)
        self._group_ready = True

    def poll(self, *, block: bool = True) -> list[Settlement]:
        """Read one batch (taken-over entries first, then new ones) and settle each entry.

        :param block: wait up to ``block_timeout`` for new entries when none are ready.
        :returns: the settlements, in order (empty if nothing came).
        :raises ConfigurationError: from :func:`~sa_inbox.brokers.process`; this entry and
            the rest of the batch stay pending, taken over after the visibility timeout.
        :raises redis.RedisError: on a connection or server error (entries not acked stay
            pending, and come back).
        """
        if not self._group_ready:
            self.ensure_group()
        entries = drive(self._core.next_batch(block=block), self.client)
        return [self._settle(entry) for entry in entries]

    def run(self, stop: threading.Event | None = None) -> None:
        """Poll until ``stop`` or :meth:`stop` is set, seen within ``block_timeout``; the
        batch in hand is settled first, so a graceful stop leaves none of it pending. Then
        the member leaves the group (``XGROUP DELCONSUMER``) if nothing is pending to it;
        failed entries waiting for their retry keep it, to be taken over.

        :param stop: an event to stop on, besides :meth:`stop`.
        :raises: as :meth:`poll`.
        """
        while not self._stop.is_set() and not (stop is not None and stop.is_set()):
            self.poll()
        drive(self._core.leave_group(), self.client)

    def _settle(self, entry: Entry) -> Settlement:
        return process(**self._delivery(entry, partial(run_call, self.client)))
