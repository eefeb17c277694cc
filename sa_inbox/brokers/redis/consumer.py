"""The synchronous Redis Streams consumer, on redis-py's ``redis.Redis``."""

from __future__ import annotations

import threading
from functools import partial

import redis
from sqlalchemy.orm import Session

from ...exc import DatabaseUnavailable, MissingKeyHeader
from ..delivery import Delivery, Settlement
from ..keys import flush, give_back, offer
from ..process import process
from ..reconnect import wait_unless
from .core import ConsumerBase, RedisSettler, drive, run_call, touch_call

__all__ = ["Consumer"]


class Consumer(ConsumerBase[redis.Redis, Session]):
    """The Redis Streams consumer on a sync ``redis.Redis``, through
    :func:`sa_inbox.brokers.process`; its parameters and rules are
    :class:`~sa_inbox.brokers.redis.core.ConsumerBase`'s.

    Example::

        consumer = Consumer(
            redis.Redis.from_url("redis://localhost/0"), "payments",
            group="billing", session_factory=Session, inbox=inbox, handler=apply,
        )
        with stop_on_signals(consumer.stop):  # sa_inbox.brokers: SIGTERM, SIGINT
            consumer.run()
    """

    def _stop_event(self) -> threading.Event:
        return threading.Event()

    def ensure_group(self) -> None:
        """Create the group (and the stream) if missing; an existing group is kept.

        :raises redis.RedisError: if the server refuses (other than "exists already").
        """
        drive(self._core.ensure_group(), self.client)
        self._group_ready = True

    def check(self) -> None:
        """Check the consumer can process entries (see
        :class:`~sa_inbox.brokers.redis.core.ConsumerBase`); returns None or raises.

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready`.
        """
        self.readiness.check()

    def poll(self, *, block: bool = True) -> list[Settlement]:
        """Read one batch (taken-over entries first, then new ones) and settle each entry;
        keyless entries are held until a keyed one or an empty read settles them.

        :param block: wait up to ``block_timeout`` for new entries when none are ready.
        :returns: the settlements, in order (empty if nothing came).
        :raises ConfigurationError: from :func:`~sa_inbox.brokers.process`; this entry and
            the rest of the batch stay pending, taken over after the visibility timeout.
        :raises MissingKeyHeader: at ``options.max_keyless`` keyless entries in a row; they and the
            rest of the batch are given back.
        :raises redis.RedisError: on a connection or server error (entries not acked stay
            pending, and come back).
        """
        if not self._group_ready:
            self.ensure_group()
        entries = drive(self._core.next_batch(block=block), self.client)
        if not entries:
            return flush(self._streak, self._process)
        run = partial(run_call, self.client)
        settled: list[Settlement] = []
        for n, entry in enumerate(entries):
            self._unsettled = entries[n:]
            try:
                settled += offer(self._streak, *self._delivery(entry, run), self._process)
            except MissingKeyHeader:
                if entries[n + 1 :]:
                    run(self._give_back_calls(entries[n + 1 :]))
                raise
        self._unsettled = ()
        return settled

    def run(self, stop: threading.Event | None = None) -> None:
        """:meth:`check`, then poll until ``stop`` or :meth:`stop` is set, seen within
        ``block_timeout``; the batch in hand is settled first, so a graceful stop leaves
        none of it pending. Then the member leaves the group (``XGROUP DELCONSUMER``) if
        nothing is pending to it; failed entries waiting for their retry keep it, to be
        taken over.

        :param stop: an event to stop on, besides :meth:`stop`.
        :raises ConfigurationError: from :meth:`check`, before any command; as :meth:`poll`.
        :raises: as :meth:`poll`.
        """
        self._extra_stop = stop
        if not self.readiness.start(self._process_kw["outage"]):
            return
        while not self._stopping():
            try:
                self.poll()
                self.reconnects.connected()
            except (DatabaseUnavailable, redis.RedisError) as exc:
                if (seconds := self._wait_after(exc)) is None:
                    raise
                self._outage_sleep(seconds)
        if self.reconnects.lost:
            return  # the server is gone: what is held stays pending
        give_back(self._streak)  # a stop decides nothing about them
        drive(self._core.leave_group(), self.client)

    def _outage_sleep(self, seconds: float) -> bool:
        return wait_unless(self._stopping, self._stop.wait, seconds, 0.25)

    def _keep_alive(self) -> None:
        if self._unsettled:
            run_call(self.client, touch_call(self.settings, self._unsettled))

    def _process(self, delivery: Delivery, settler: RedisSettler) -> Settlement:
        return process(delivery, settler, **self._process_kw)
