"""The worker: claim stored messages in batches, process each once, back off, dead-letter.

A :class:`Worker` runs on any :class:`~sa_inbox.store.MessageStore`: a database
(``InboxStore(...).bind(engine)``) or :class:`sa_inbox.testing.MemoryStore`. Each loop:

1. claim a batch in its own short transaction (the attempt is counted there, so a message
   that kills its worker still reaches ``max_attempts``);
2. for each message, run the handler and mark the row ``done`` in one transaction;
3. on an error, roll back and record it: back to ``pending`` after an exponential back-off,
   or ``dead`` once ``max_attempts`` attempts were made;
4. on a stop request (:meth:`Worker.stop`, SIGTERM, SIGINT), finish the message in hand and
   release the rest of the batch (back to ``pending``, attempt not counted).

Rows whose worker died come back by themselves: the claim takes ``processing`` rows older
than ``visibility_timeout``. Every ``reap_interval`` seconds the worker also calls
:meth:`~sa_inbox.store.InboxStore.reap`, which moves abandoned rows that used up their
attempts to ``dead``.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

from .exc import InvalidStoreArgument
from .store import (
    DEAD,
    DEFAULT_CONSUMER,
    DONE,
    Handler,
    MessageStore,
    StoredMessage,
    utc_now,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "LOST",
    "RETRY",
    "TRANSIENT_RETRIES",
    "Backoff",
    "Worker",
]

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 10
#: Seconds after which a claim counts as abandoned (its worker died).
DEFAULT_VISIBILITY_TIMEOUT = 300.0
DEFAULT_MAX_ATTEMPTS = 5
#: Seconds a worker with nothing to do waits before it polls again.
DEFAULT_POLL_INTERVAL = 1.0
#: Seconds :meth:`Worker.run` waits for the batches in hand after a stop request.
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
#: Immediate re-runs of a message's transaction after a deadlock or serialization failure.
TRANSIENT_RETRIES = 3
#: Outcomes of one message besides ``done`` and ``dead``: retried later, claim lost.
RETRY, LOST = "retry", "lost"


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off between attempts: ``base * 2 ** (attempts - 1)``, capped.

    :param base: seconds before the second attempt.
    :param maximum: the longest wait in seconds.
    """

    base: float = 1.0
    maximum: float = 300.0

    def delay(self, attempts: int) -> float:
        """Seconds to wait after the ``attempts``-th failed attempt (1-based)."""
        return float(min(self.maximum, self.base * 2 ** max(0, attempts - 1)))


class Worker:
    """Process stored messages with ``handler`` until stopped.

    :param store: where the messages are (``InboxStore(...).bind(engine)``, or a
        :class:`~sa_inbox.testing.MemoryStore`).
    :param handler: ``handler(session, message)``: the business change, in the transaction
        that marks the message ``done``; it must not commit. Raising rolls back and counts
        as a failed attempt (a deadlock or serialization failure is first re-run at once,
        up to :data:`TRANSIENT_RETRIES` times).
    :param consumer_name: the consumer whose messages are processed.
    :param batch_size: messages claimed at once, per thread.
    :param concurrency: threads, each claiming and processing its own batches.
    :param visibility_timeout: seconds after which another worker may claim a message
        whose claim was not finished (a crashed worker). A row being processed stays locked
        and cannot be claimed again however long its handler takes; the timeout only has to
        exceed the time between a claim and the start of its processing (one batch).
    :param max_attempts: attempts before a message is ``dead``.
    :param ordered: per-aggregate ordering: a message is claimed only once every earlier
        message of its aggregate is ``done`` or ``dead``.
    :param backoff: a :class:`Backoff` (not a number): the wait before a failed message is
        retried, ``Backoff(base, maximum)`` in seconds, doubling per attempt; default
        ``Backoff()`` (1 s, at most 300 s). The CLI's ``--backoff`` and ``--max-backoff``
        are its ``base`` and ``maximum`` in seconds.
    :param poll_interval: seconds to wait when nothing is claimable.
    :param reap_interval: seconds between :meth:`reap` calls (default: the visibility
        timeout).
    :param name: the worker's name in claim tokens (default ``host:pid:random``).
    :param clock: returns the current aware UTC time (tests pass a fake).
    :param on_claim: called with ``(token, batch)`` after each non-empty claim.
    :raises InvalidStoreArgument: for a non-positive size, count or time, or a ``backoff``
        that is not a :class:`Backoff`.

    The same ``visibility_timeout`` and ``max_attempts`` must be used by every worker of a
    consumer.
    """

    def __init__(
        self,
        store: MessageStore,
        handler: Handler,
        *,
        consumer_name: str = DEFAULT_CONSUMER,
        batch_size: int = DEFAULT_BATCH_SIZE,
        concurrency: int = 1,
        visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        ordered: bool = False,
        backoff: Backoff | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        reap_interval: float | None = None,
        name: str | None = None,
        clock: Callable[[], datetime.datetime] = utc_now,
        on_claim: Callable[[str, Sequence[StoredMessage]], None] | None = None,
    ) -> None:
        for label, count in (
            ("batch_size", batch_size),
            ("concurrency", concurrency),
            ("max_attempts", max_attempts),
        ):
            if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
                raise InvalidStoreArgument(f"{label} must be a positive int, not {count!r}")
        for label, seconds in (
            ("visibility_timeout", visibility_timeout),
            ("poll_interval", poll_interval),
            ("reap_interval", visibility_timeout if reap_interval is None else reap_interval),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
                raise InvalidStoreArgument(f"{label} must be positive seconds, not {seconds!r}")
        self.store = store
        self.handler = handler
        self.consumer_name = consumer_name
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.visibility_timeout = float(visibility_timeout)
        self.max_attempts = max_attempts
        self.ordered = ordered
        if backoff is not None and not isinstance(backoff, Backoff):
            raise InvalidStoreArgument(
                f"backoff must be a Backoff(base=seconds, maximum=seconds), not {backoff!r}"
            )
        self.backoff = backoff or Backoff()
        self.poll_interval = float(poll_interval)
        self.reap_interval = float(visibility_timeout if reap_interval is None else reap_interval)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.clock = clock
        self.on_claim = on_claim
        #: Set to stop: by :meth:`stop`, SIGTERM/SIGINT during :meth:`run`, or the caller.
        self.stop_event = threading.Event()
        #: Messages per outcome (``done``, ``retry``, ``dead``, ``lost``, ``released``).
        self.stats: Counter[str] = Counter()
        self._sequence = itertools.count(1)
        self._lock = threading.Lock()

    # -- one step -----------------------------------------------------------------------

    def run_once(self, thread: int = 0) -> int:
        """Claim one batch and process it; return the number of messages claimed.

        Stops early if :attr:`stop_event` is set, releasing the messages not yet started.
        A transient database error during the claim (deadlock, busy SQLite) claims nothing.
        """
        batch = self._claim(thread)
        if batch:
            self._process_batch(batch)
        return len(batch or ())

    def _claim(self, thread: int) -> list[StoredMessage] | None:
        """One claim; ``None`` if the database aborted it (retry), else the batch."""
        token = f"{self.name}/{thread}#{next(self._sequence)}"
        try:
            batch = self.store.claim(
                consumer_name=self.consumer_name,
                claimed_by=token,
                limit=self.batch_size,
                visibility_timeout=self.visibility_timeout,
                max_attempts=self.max_attempts,
                ordered=self.ordered,
                now=self.clock(),
            )
        except Exception as exc:
            if not self.store.is_transient(exc):
                raise
            logger.info(
                "claim aborted by a transient database error, retrying: %s",
                exc,
                extra={"action": "claim", "error": str(exc)},
            )
            return None
        if batch:
            logger.debug("claimed", extra={"action": "claim", "token": token, "count": len(batch)})
            if self.on_claim is not None:
                self.on_claim(token, batch)
        return batch

    def _process_batch(self, batch: Sequence[StoredMessage]) -> None:
        for index, message in enumerate(batch):
            if self.stop_event.is_set():
                self._release(batch[index:])
                break
            self._count(self.process(message))

    def process(self, message: StoredMessage) -> str:
        """Run the handler for one claimed message; return the outcome.

        A transient database error in its transaction (deadlock, serialization failure,
        busy SQLite: see :func:`sa_inbox.is_transient`) is retried at once, up to
        :data:`TRANSIENT_RETRIES` times, before it counts as a failed attempt.

        :returns: ``"done"``; ``"retry"`` (rolled back, pending again after the back-off);
            ``"dead"`` (rolled back, ``max_attempts`` reached); ``"lost"`` (the claim had
            expired and was taken by another worker: nothing ran).
        """
        for retry in range(TRANSIENT_RETRIES + 1):
            try:
                if self.store.complete(message, self.handler, now=self.clock()):
                    return DONE
                logger.warning(
                    "message %s (row %s): claim lost (expired and taken by another worker), "
                    "nothing ran",
                    message.message_id,
                    message.id,
                    extra={"action": "lost", "id": message.id, "message_id": message.message_id},
                )
                return LOST
            except Exception as exc:
                if retry == TRANSIENT_RETRIES or not self.store.is_transient(exc):
                    return self._failed(message, exc)
                logger.info(
                    "message %s (row %s): transient error, re-running its transaction: %s",
                    message.message_id,
                    message.id,
                    exc,
                    extra={"action": "retry", "message_id": message.message_id, "error": str(exc)},
                )
                time.sleep(random.uniform(0, 0.05 * 2**retry))
        raise AssertionError("unreachable")  # pragma: no cover

    def reap(self) -> None:
        """Move abandoned claims back to pending, or to dead once their attempts are used."""
        result = self.store.reap(
            consumer_name=self.consumer_name,
            visibility_timeout=self.visibility_timeout,
            max_attempts=self.max_attempts,
            now=self.clock(),
        )
        if result.released or result.dead:
            logger.info(
                "reaped abandoned claims: %d back to pending, %d dead",
                result.released,
                result.dead,
                extra={"action": "reap", "released": result.released, "dead": result.dead},
            )
        if result.dead:
            self._count("reaped_dead", result.dead)

    # -- the loop ---------------------------------------------------------------------

    def stop(self) -> None:
        """Ask every thread to finish the message in hand, release the rest and return."""
        self.stop_event.set()

    def run(
        self,
        *,
        until_empty: bool = False,
        handle_signals: bool = True,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    ) -> None:
        """Process messages until stopped (or, with ``until_empty``, until none is claimable).

        :param until_empty: return once a claim finds nothing (each thread on its own).
        :param handle_signals: in the main thread, turn SIGTERM and SIGINT into
            :meth:`stop` while running (the previous handlers are restored after).
        :param shutdown_timeout: seconds to wait for the threads after a stop; a handler
            still running then is abandoned, and its message is claimed again after the
            visibility timeout.
        """
        with self._signals(handle_signals):
            if self.concurrency == 1:
                self._loop(0, until_empty)
                return
            threads = [
                threading.Thread(
                    target=self._loop, args=(i, until_empty), name=f"sa-inbox-{i}", daemon=True
                )
                for i in range(self.concurrency)
            ]
            for thread in threads:
                thread.start()
            while any(t.is_alive() for t in threads) and not self.stop_event.is_set():
                time.sleep(0.1)
            deadline = time.monotonic() + shutdown_timeout
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self, thread: int, until_empty: bool) -> None:
        next_reap = 0.0
        while not self.stop_event.is_set():
            if thread == 0 and time.monotonic() >= next_reap:
                next_reap = time.monotonic() + self.reap_interval
                self._guarded(self.reap)
            batch = self._guarded(lambda: self._claim(thread))
            if batch:
                self._guarded(functools.partial(self._process_batch, batch))
                continue
            if batch is not None and until_empty:
                return  # nothing claimable (not merely a claim aborted by the database)
            self.stop_event.wait(self.poll_interval)

    def _guarded(self, step: Callable[[], Any]) -> Any:
        """Run one step; log and swallow an unexpected error so the worker keeps going."""
        try:
            return step()
        except Exception:
            logger.exception("worker step failed", extra={"action": "error"})
            return None

    @contextmanager
    def _signals(self, enabled: bool) -> Iterator[None]:
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, frame: FrameType | None) -> None:
            logger.info(
                "stop requested (signal %s)", signum, extra={"action": "stop", "signal": signum}
            )
            self.stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # -- helpers ----------------------------------------------------------------------

    def _failed(self, message: StoredMessage, exc: Exception) -> str:
        error = f"{type(exc).__name__}: {exc}"
        now = self.clock()
        if message.attempts >= self.max_attempts:
            retry_at = None
        else:
            retry_at = now + datetime.timedelta(seconds=self.backoff.delay(message.attempts))
        recorded = self.store.fail(message, error, retry_at=retry_at, now=now)
        outcome = DEAD if retry_at is None else RETRY
        logger.warning(
            "message %s (row %s) failed on attempt %d of %d: %s; %s",
            message.message_id,
            message.id,
            message.attempts,
            self.max_attempts,
            error,
            _outcome_text(outcome, retry_at, recorded),
            extra={
                "action": outcome,
                "id": message.id,
                "message_id": message.message_id,
                "attempts": message.attempts,
                "error": error,
                "recorded": recorded,
            },
        )
        return outcome if recorded else LOST

    def _release(self, messages: Sequence[StoredMessage]) -> None:
        released = self.store.release(messages)
        logger.info(
            "released %d unstarted messages",
            released,
            extra={"action": "release", "count": released},
        )
        self._count("released", released)

    def _count(self, outcome: str, amount: int = 1) -> None:
        with self._lock:
            self.stats[outcome] += amount


def _outcome_text(outcome: str, retry_at: datetime.datetime | None, recorded: bool) -> str:
    """The outcome of a failed attempt, for the log line."""
    if not recorded:
        return "claim lost meanwhile, nothing recorded"
    if retry_at is None:
        return "dead (max attempts reached)"
    return f"retry at {retry_at.isoformat(timespec='seconds')}"
