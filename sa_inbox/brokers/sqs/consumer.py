"""The synchronous SQS consumer, on a boto3 client; its heartbeat is a thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from ... import steps
from ...exc import MissingKeyHeader
from ..delivery import Delivery, Settlement
from ..keys import flush, give_back, offer
from ..process import process
from ..reconnect import wait_unless
from .base import PASS_ERRORS, ConsumerBase, Each, settle_each
from .core import (
    QueueInfo,
    SqsSettler,
    Step,
    delete,
    drive,
    extend,
    receive,
    resolve,
    set_visibility,
)

__all__ = ["Consumer"]

logger = logging.getLogger("sa_inbox.brokers.sqs")


class Consumer(ConsumerBase[Any, Session]):
    """The SQS consumer on a boto3 client, through :func:`sa_inbox.brokers.process`; its
    parameters and rules are :class:`~sa_inbox.brokers.sqs.base.ConsumerBase`'s.

    Example::

        consumer = Consumer(
            boto3.client("sqs"), "payments",
            session_factory=Session, inbox=inbox, handler=apply,
            options=DeliveryOptions(dead_letter="payments-dead"),
        )
        with stop_on_signals(consumer.stop):  # sa_inbox.brokers: SIGTERM, SIGINT
            consumer.run()

    boto3's low-level clients are thread-safe: the heartbeat thread extends visibility on
    the consumer's own client.
    """

    _beat: threading.Thread | None = None

    def _stop_event(self) -> threading.Event:
        return threading.Event()

    def queue(self) -> QueueInfo:
        """The queue, found and checked (once; again after a lost connection).

        :raises ConfigurationError: see :func:`~sa_inbox.brokers.sqs.core.resolve` (a
            queue that does not exist included).
        :raises botocore.exceptions.ClientError: another refusal of SQS.
        """
        if self.info is None:
            self._found(drive(resolve(self.settings), self.client))
        assert self.info is not None
        return self.info

    def check(self) -> None:
        """The queue's checks, then the database's (the inbox table exists, the session
        factory makes sessions of this half, the engine is not autocommit, the handler
        fits); returns None or raises.

        :raises ConfigurationError: see :meth:`queue` and :func:`sa_inbox.readiness.check_ready`.
        """
        self.queue()
        self.readiness.check()

    def poll(self) -> list[Settlement]:
        """Receive once (long-polling ``wait_time``) and settle each message, in order; then
        delete the committed ones. Keyless messages are held until a keyed one or an empty
        receive settles them.

        :returns: the settlements, in order (empty if nothing came).
        :raises ConfigurationError: from :func:`~sa_inbox.brokers.process`; this message and
            the rest of the receive show again after their visibility timeout.
        :raises MissingKeyHeader: at ``options.max_keyless`` keyless messages in a row; they and the
            rest of the receive are made visible again.
        :raises botocore.exceptions.BotoCoreError: a lost connection (what was received
            shows again after its visibility timeout).
        """
        info = self.queue()
        messages = drive(receive(self.settings, info), self.client)
        if not messages:
            return flush(self._streak, self._process)
        self.held.add(messages)
        self._start_heartbeat()
        run = partial(drive, client=self.client)
        done = False
        try:
            each = partial(self._each, info, run)
            settled = steps.drive(settle_each(messages, info.name), each, MissingKeyHeader)
            done = True
        finally:
            drive(delete(info, self.held.acked()), self.client)
            if not done:
                self._release_unsettled(messages)
        return settled

    def run(self, stop: threading.Event | None = None) -> None:
        """Find and check the queue, :meth:`check` the database (waiting out one that cannot
        be reached yet), then poll until ``stop`` or :meth:`stop` is set, seen within
        ``wait_time``; the receive in hand is settled first. Stops the heartbeat at the end.

        :param stop: an event to stop on, besides :meth:`stop`.
        :raises ConfigurationError: from the checks, before any receive; as :meth:`poll`.
        :raises: as :meth:`poll`, but a lost connection is waited out.
        """
        self._extra_stop = stop
        try:
            self.queue()
            if not self.readiness.start(self.gate):
                return
            while not self._stopping():
                try:
                    self.poll()
                    self.reconnects.connected()
                except PASS_ERRORS as exc:
                    if (seconds := self._wait_after(exc)) is None:
                        raise
                    self._outage_sleep(seconds)
            if not self.reconnects.lost:
                give_back(self._streak)  # a stop decides nothing about them
        finally:
            self.close()

    def close(self) -> None:
        """Stop the heartbeat thread (``run()`` does it when it returns). The client is the
        caller's."""
        beat, self._beat = self._beat, None
        if beat is not None:
            self._beat_stop.set()
            beat.join()

    def _each(
        self, info: QueueInfo, run: Callable[[Step[Any]], Any], each: Each
    ) -> list[Settlement] | None:
        """Offer a message or give it back (:func:`.base.settle_each`)."""
        offered, message = each
        if offered:
            return offer(self._streak, *self._settler(info, message, run), self._process)
        self.held.drop(message)
        drive(set_visibility(info, message, 0, "give back"), self.client)
        return None

    def _outage_sleep(self, seconds: float) -> bool:
        return wait_unless(self._stopping, self._stop.wait, seconds, 0.25)

    def _keep_alive(self) -> None:
        info = self.info
        if info is not None and len(self.held):
            drive(
                extend(info, self.held, self.held.due(None), self.settings.visibility_timeout),
                self.client,
            )

    def _start_heartbeat(self) -> None:
        if not self.settings.heartbeat or self._beat is not None:
            return
        self._beat_stop = threading.Event()
        self._beat = threading.Thread(
            target=self._heartbeat, name=f"sa-inbox-sqs-heartbeat-{self.settings.queue}"
        )
        self._beat.daemon = True
        self._beat.start()

    def _heartbeat(self) -> None:
        """Every held message's visibility set again each third of the timeout."""
        every = self.settings.heartbeat_every
        while not self._beat_stop.wait(min(every / 4, 1.0)):
            info = self.info
            due = self.held.due(every) if info is not None else []
            if not due or info is None:
                continue
            try:
                drive(extend(info, self.held, due, self.settings.visibility_timeout), self.client)
            except Exception as exc:  # a lost connection: run() sees it too
                logger.debug("SQS heartbeat failed: %s", exc)

    def _process(self, delivery: Delivery, settler: SqsSettler) -> Settlement:
        return process(delivery, settler, **self._process_kw)
