"""The worker: lease stored messages in batches, process each once, back off, dead-letter.

A :class:`Worker` runs on any :class:`~sa_inbox.store.MessageStore`: a database
(``InboxStore(...).bind(engine)``) or :class:`sa_inbox.testing.MemoryStore`. Each loop:

1. lease a batch in its own short transaction (the attempt is counted there, so a message
   that kills its worker still reaches ``max_attempts``);
2. for each message, run the handler and mark the row ``done`` in one transaction;
3. on an error, roll back and record it: back to ``pending`` after an exponential back-off,
   or ``dead`` once ``max_attempts`` attempts were made;
4. on a stop request (:meth:`Worker.stop`, SIGTERM, SIGINT), finish the message in hand and
   release the rest of the batch (back to ``pending``, attempt not counted).

With ``transaction="batch"``, steps 2 and 3 run for the whole leased batch in one
transaction, a failing message still failing alone (:mod:`sa_inbox.store.batch`).

Rows whose worker died come back by themselves: the lease takes ``processing`` rows older
than ``visibility_timeout``. Every ``reap_interval`` seconds the worker also calls
:meth:`~sa_inbox.store.InboxStore.reap`, which moves abandoned rows that used up their
attempts to ``dead``.

:meth:`Worker.run` returns a :class:`WorkerSummary`. It ends on a stop request, with
``until_empty`` once nothing of the consumer is ``pending`` or ``processing`` any more (a
failed message is retried after its back-off first, or goes ``dead``), after
``max_messages`` leased messages, or after ``max_seconds``; a
:class:`~sa_inbox.exc.ConfigurationError` stops every thread and is raised.

.. seealso:: ``docs/discussions/store-worker.md`` (one state machine under one lock, the
   search for abandoned leases, waiting on an event loop).
"""

from __future__ import annotations

import datetime
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

from .._signals import on_signals
from ..backoff import Backoff
from ..exc import (
    ConfigurationError,
    DatabaseUnavailable,
    InvalidArgument,
)
from ..handlers import check_handler
from ..hooks import InboxHooks, as_hooks
from ..outage import OutageGate, Verdict
from ..validation import validate_key
from .batch import BATCH_RERUNS, commit_batch
from .protocol import LOST, RELEASED, RETRY, Handler, MessageStore, StoredMessage
from .schema import DEAD, DEFAULT_CONSUMER, DONE, utc_now
from .summary import EMPTY, ERROR, MAX_MESSAGES, MAX_SECONDS, STOPPED, WorkerSummary
from .waiting import Waiting
from .worker_arguments import (
    BATCH,
    MESSAGE,
    TRANSACTION_MODES,
    check_positive_int,
    check_positive_seconds,
    check_store,
    check_transaction,
    check_waiting,
    lease_of,
    renamed_hook,
)

__all__ = [
    "BATCH",
    "BATCH_RERUNS",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_ERROR_BACKOFF",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "EMPTY",
    "ERROR",
    "LOST",
    "MAX_MESSAGES",
    "MAX_SECONDS",
    "MESSAGE",
    "RELEASED",
    "RETRY",
    "STOPPED",
    "TRANSACTION_MODES",
    "TRANSIENT_RETRIES",
    "Backoff",
    "Worker",
    "WorkerRun",
    "WorkerSummary",
]

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 10
#: Seconds after which a lease counts as abandoned (its worker died).
DEFAULT_VISIBILITY_TIMEOUT = 300.0
DEFAULT_MAX_ATTEMPTS = 5
#: Seconds a worker with nothing to do waits before it polls again.
DEFAULT_POLL_INTERVAL = 1.0
#: Seconds :meth:`Worker.run` waits for the batches in hand after a stop request.
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
#: Immediate re-runs of a message's transaction after a deadlock or serialization failure.
TRANSIENT_RETRIES = 3
#: Seconds between two looks, while a thread waits out an outage, at whether another thread
#: found the database back (:meth:`Worker._outage_sleep`).
OUTAGE_POLL_SECONDS = 0.1
#: The wait of a thread after an error of the worker itself, doubling per error in a row.
DEFAULT_ERROR_BACKOFF = Backoff(base=0.1, maximum=30.0)


class Worker:
    """Process stored messages with ``handler`` until stopped.

    :param store: where the messages are (``InboxStore(...).bind(engine)``, or a
        :class:`~sa_inbox.testing.MemoryStore`).
    :param handler: ``handler(session, message)``: the business change, in the transaction
        that marks the message ``done``; it must not commit. Raising rolls back and counts
        as a failed attempt (a deadlock or serialization failure is first re-run at once,
        up to :data:`TRANSIENT_RETRIES` times), except a
        :class:`~sa_inbox.exc.ConfigurationError`, which stops the worker (see :meth:`run`).
    :param consumer_name: the consumer whose messages are processed; ``None`` processes
        every consumer's messages (the handler tells them apart by
        ``message.consumer_name``; ordering stays per consumer and aggregate).
    :param batch_size: messages leased at once, per thread.
    :param concurrency: threads, each leasing and processing its own batches.
    :param visibility_timeout: seconds after which another worker may lease a message
        whose lease was not finished (a crashed worker). A row being processed stays locked
        and cannot be leased again however long its handler takes; the timeout only has to
        exceed the time between a lease and the start of its processing (one batch).
    :param max_attempts: attempts before a message is ``dead``.
    :param ordered: per-aggregate ordering: a message is leased only once every earlier
        message of its aggregate is ``done`` or ``dead``.
    :param backoff: a :class:`Backoff` (not a number): the wait before a failed message is
        retried, ``Backoff(base, maximum)`` in seconds, doubling per attempt; default
        ``Backoff()`` (1 s, at most 300 s). The CLI's ``--backoff`` and ``--max-backoff``
        are its ``base`` and ``maximum`` in seconds.
    :param poll_interval: seconds to wait when nothing is leasable. Also how often, at
        most, a lease looks for abandoned leases (``processing`` past the visibility
        timeout): at the worker's first lease, then at most once per ``poll_interval`` (or
        ``visibility_timeout``, if shorter) of its clock; the leases in between take
        pending rows only: a crashed worker's message is leased again within
        ``poll_interval`` of its timeout.
    :param error_backoff: a :class:`Backoff`: the wait of a thread after an error of the
        worker itself (a lease the database aborted, a database that cannot be reached),
        doubling with each error in a row and reset by the next successful lease; default
        :data:`DEFAULT_ERROR_BACKOFF` (0.1 s, at most 30 s), each wait shortened by a
        random jitter of up to half.
    :param reap_interval: seconds between :meth:`reap` calls (default: the visibility
        timeout).
    :param name: the worker's name in lease tokens (default ``host:pid:random``).
    :param clock: returns the current aware UTC time (tests pass a fake).
    :param on_lease: called with ``(token, batch)`` after each non-empty lease.
    :param on_claim: the deprecated name of ``on_lease`` (a :class:`DeprecationWarning`).
    :param on_message: called with ``(message, outcome)`` once a leased message's outcome
        is final: ``"done"``, ``"retry"``, ``"dead"``, ``"lost"`` or ``"released"``, in the
        thread that processed it, after its transaction ended. An exception it raises is
        logged and counted in :attr:`WorkerSummary.errors`; the message is unaffected.
    :param transaction: ``"message"`` (:data:`MESSAGE`, the default): one transaction per
        message; ``"batch"`` (:data:`BATCH`): the messages of one leased batch in one
        transaction, a failing one still failing alone (:mod:`sa_inbox.store.batch`).
    :param waiting: how the loops wait for a stop request and sleep
        (:class:`~sa_inbox.store.waiting.Waiting`); default a
        :class:`~sa_inbox.store.waiting.ThreadWaiting` (threads).
        :class:`~sa_inbox.asyncio.AsyncWorker` passes its event loop's.
    :raises InvalidArgument: for a non-positive size, count or time, a ``backoff``
        that is not a :class:`Backoff`, a ``transaction`` that is neither mode, or
        ``"batch"`` on a store without ``complete_batch``.
    :raises InvalidHandler: if ``handler`` cannot be called as ``handler(session,
        message)`` (checked with :func:`inspect.signature`).
    :raises SyncAsyncMismatch: for a store bound to an AsyncEngine (use
        :class:`~sa_inbox.asyncio.AsyncWorker`), or an event loop's ``waiting`` with a
        synchronous store; :class:`~sa_inbox.exc.InvalidObject` for an unbound
        :class:`~sa_inbox.InboxStore`, an object that is no store (an ``Inbox``, an
        Engine, a session factory), or a ``waiting`` that is not a
        :class:`~sa_inbox.store.waiting.Waiting`.
    :raises InvalidMessageId: for an empty ``consumer_name``, or one with leading or
        trailing whitespace.

    The same ``visibility_timeout`` and ``max_attempts`` must be used by every worker of a
    consumer.
    """

    def __init__(
        self,
        store: MessageStore,
        handler: Handler,
        *,
        consumer_name: str | None = DEFAULT_CONSUMER,
        batch_size: int = DEFAULT_BATCH_SIZE,
        concurrency: int = 1,
        visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        ordered: bool = False,
        backoff: Backoff | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        error_backoff: Backoff | None = None,
        reap_interval: float | None = None,
        name: str | None = None,
        clock: Callable[[], datetime.datetime] = utc_now,
        on_lease: Callable[[str, Sequence[StoredMessage]], None] | None = None,
        on_message: Callable[[StoredMessage, str], None] | None = None,
        hooks: InboxHooks | None = None,
        transaction: str = MESSAGE,
        on_claim: Callable[[str, Sequence[StoredMessage]], None] | None = None,
        waiting: Waiting | None = None,
    ) -> None:
        on_lease = renamed_hook(on_lease, on_claim)
        #: How the loops wait and sleep (:mod:`sa_inbox.store.waiting`).
        self.waiting: Waiting = check_waiting(waiting, store)
        if not self.waiting.on_event_loop:
            check_store(store)
        check_handler(handler, ("session", "message"))
        check_transaction(transaction, store)
        for label, count in (
            ("batch_size", batch_size),
            ("concurrency", concurrency),
            ("max_attempts", max_attempts),
        ):
            check_positive_int(count, label)
        for label, seconds in (
            ("visibility_timeout", visibility_timeout),
            ("poll_interval", poll_interval),
            ("reap_interval", visibility_timeout if reap_interval is None else reap_interval),
        ):
            check_positive_seconds(seconds, label)
        for label, given in (("backoff", backoff), ("error_backoff", error_backoff)):
            if given is not None and not isinstance(given, Backoff):
                raise InvalidArgument(
                    f"{label} must be a Backoff(base=seconds, maximum=seconds), not {given!r}"
                )
        if consumer_name is not None and not isinstance(consumer_name, str):
            raise InvalidArgument(f"consumer_name must be a str or None, not {consumer_name!r}")
        if consumer_name is not None:
            validate_key(consumer_name, "consumer_name", None)
        self.store = store
        self._store_lease = lease_of(store)
        self.handler = handler
        self.consumer_name = consumer_name
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.visibility_timeout = float(visibility_timeout)
        self.max_attempts = max_attempts
        self.ordered = ordered
        self.backoff = backoff or Backoff()
        self.poll_interval = float(poll_interval)
        #: The longest a worker goes without looking for abandoned leases, and when it last
        #: did (its clock), or ``None`` before its first lease.
        self._abandoned_every = datetime.timedelta(
            seconds=min(self.poll_interval, float(visibility_timeout))
        )
        self._abandoned_searched: datetime.datetime | None = None
        self.error_backoff = error_backoff or DEFAULT_ERROR_BACKOFF
        self.reap_interval = float(visibility_timeout if reap_interval is None else reap_interval)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.clock = clock
        self.on_lease = on_lease
        self.on_message = on_message
        #: Told of each handler run and transient retry (:mod:`sa_inbox.hooks`).
        self.hooks: InboxHooks = as_hooks(hooks)
        self.transaction = transaction
        #: Set to stop: by :meth:`stop`, SIGTERM/SIGINT during :meth:`run`, or the caller
        #: (:attr:`waiting` itself: a :class:`threading.Event` by default).
        self.stop_event: Waiting = self.waiting
        #: Counts since the worker was made, keyed by outcome (``done``, ``retry``,
        #: ``dead``, ``lost``, ``released``) and ``errors``, ``transient_retries``,
        #: ``reaped_dead``: the same numbers as :attr:`summary`, updated live.
        self.stats: Counter[str] = Counter()
        self._sequence = itertools.count(1)
        self._lock = threading.Lock()
        #: Per batch in hand (by lease token): its messages not started yet.
        self._unstarted: dict[str, Sequence[StoredMessage]] = {}
        self._run: _Run | None = None
        #: A stop signal received in this run, before its thread set :attr:`stop_event`.
        self._signalled = False
        self._fatal: ConfigurationError | None = None
        self._reason: str | None = None
        #: Rides out database outages, for every thread (:mod:`sa_inbox.outage`).
        self.outage = OutageGate(
            consumer_name or self.name, hooks=self.hooks, sleep=self._outage_sleep
        )

    @property
    def summary(self) -> WorkerSummary:
        """:attr:`stats` as a :class:`WorkerSummary`, with the reason the last run ended."""
        with self._lock:
            return WorkerSummary.from_stats(self.stats, self._reason)

    # -- one step -----------------------------------------------------------------------

    def run_once(self, thread: int = 0) -> int:
        """Lease one batch and process it; return the number of messages leased.

        Stops early if :attr:`stop_event` is set, releasing the messages not yet started.
        A transient database error during the lease (deadlock, busy SQLite) leases nothing.

        :raises ConfigurationError: from the store or the handler (the batch in hand is
            released first, if the store allows it; no attempt is counted as failed).
        """
        batch = self._lease(thread, self.batch_size)
        if batch:
            self._process_batch(batch)
        return len(batch or ())

    def _lease(self, thread: int, limit: int) -> list[StoredMessage] | None:
        """One lease; ``None`` if the database aborted it (retry), else the batch."""
        token = f"{self.name}/{thread}#{next(self._sequence)}"
        now = self.clock()
        try:
            batch = self._store_lease(
                consumer_name=self.consumer_name,
                claimed_by=token,
                limit=limit,
                visibility_timeout=self.visibility_timeout,
                max_attempts=self.max_attempts,
                ordered=self.ordered,
                now=now,
                abandoned=self._abandoned_due(now),
            )
        except Exception as exc:
            if not self._skipped_transient(exc, "lease", "retrying"):
                raise
            return None
        if batch:
            logger.debug("leased", extra={"action": "lease", "token": token, "count": len(batch)})
            if self.on_lease is not None:
                self._call_hook("on_lease", self.on_lease, token, batch)
        return batch

    def _skipped_transient(self, exc: Exception, action: str, then: str) -> bool:
        """Whether ``exc`` is a transient database error (the store's ``is_transient``) that
        aborted ``action`` (``"lease"``, ``"reap"``); if so it is logged, with what happens
        ``then``, and counted in ``transient_retries``."""
        if not self.store.is_transient(exc):
            return False
        logger.info(
            f"{action} aborted by a transient database error, {then}: %s",
            exc,
            extra={"action": action, "error": str(exc)},
        )
        self.count("transient_retries")
        return True

    def _abandoned_due(self, now: datetime.datetime) -> bool:
        """Whether the lease at ``now`` looks for abandoned leases too (see
        ``poll_interval``); if so, that search is recorded. A clock that went back counts
        as due. Never while this worker's leases may look abandoned after an outage
        (:meth:`_after_outage`)."""
        if self._after_outage():
            return False
        last = self._abandoned_searched
        if last is not None and datetime.timedelta(0) <= now - last < self._abandoned_every:
            return False
        self._abandoned_searched = now
        return True

    def _process_batch(self, batch: Sequence[StoredMessage]) -> None:
        token = batch[0].claimed_by
        try:
            if self.transaction == BATCH:
                self._commit_batch(token, batch)
            else:
                self._process_messages(token, batch)
        finally:
            with self._lock:
                self._unstarted.pop(token, None)

    def _commit_batch(self, token: str, batch: Sequence[StoredMessage]) -> None:
        """Process a leased batch in one transaction (:func:`~sa_inbox.store.batch.commit_batch`),
        or one transaction per message if that transaction cannot commit.

        :raises ConfigurationError: from the store or a handler: every thread stops, the
            batch is released (attempts not counted), nothing committed.
        """
        if self.stopping():
            self._release(batch)
            return
        with self._lock:  # locked by the batch transaction: never released from outside
            self._unstarted[token] = ()
        start = time.perf_counter()
        try:
            result = commit_batch(self, token, batch)
        except ConfigurationError as exc:
            self._configuration_error(exc)
            self._release(batch, quietly=True)
            raise
        if result is None:
            self._process_messages(token, batch)
            return
        # Handlers of one transaction are not timed apart: each gets its share.
        seconds = (time.perf_counter() - start) / len(batch)
        for message in result.done:
            self.count(DONE)
            self._notify(message, DONE)
            self.hooks.handled(message.consumer_name, seconds=seconds, failed=False)
        for failure in result.failed:
            self.hooks.handled(failure.message.consumer_name, seconds=seconds, failed=True)
            outcome = self._log_failure(failure.message, failure.error, failure.retry_at, True)
            self.count(outcome)
            self._notify(failure.message, outcome)
        for message in result.lost:
            self.count(LOST)
            self._notify(message, LOST)
        if result.released:
            self.count(RELEASED, len(result.released))
            for message in result.released:
                self._notify(message, RELEASED)

    def _process_messages(self, token: str, batch: Sequence[StoredMessage]) -> None:
        for index, message in enumerate(batch):
            if self.stopping():
                self._release(batch[index:])
                return
            with self._lock:  # what a shutdown may give back if this handler outlasts it
                self._unstarted[token] = batch[index + 1 :]
            try:
                outcome = self.process(message)
            except ConfigurationError as exc:
                # not the message's fault: stop the other threads first (so they do not
                # lease what is given back), then give it back with its attempt uncounted
                self._configuration_error(exc)
                self._release(batch[index:], quietly=True)
                raise
            except BaseException:
                # its failure could not be recorded (database gone), or the run is stopping
                # at once (a second Ctrl-C, a handler's SystemExit, a cancelled task): the
                # message waits for the visibility timeout; the unstarted rest is given back
                # if possible, unless a shutdown gave it back already (_abandon)
                with self._lock:
                    rest = list(self._unstarted.pop(token, ()))
                self._release(rest, quietly=True)
                raise
            self.count(outcome)
            self._notify(message, outcome)

    def process(self, message: StoredMessage) -> str:
        """Run the handler for one leased message; return the outcome.

        A transient database error in its transaction (deadlock, serialization failure,
        busy SQLite: see :func:`sa_inbox.runner.is_transient`) is retried at once, up to
        :data:`TRANSIENT_RETRIES` times, before it counts as a failed attempt.

        :returns: ``"done"``; ``"retry"`` (rolled back, pending again after the back-off);
            ``"dead"`` (rolled back, ``max_attempts`` reached); ``"lost"`` (the lease had
            expired and was taken by another worker: nothing ran).
        :raises ConfigurationError: raised by the store or the handler: rolled back and
            not recorded as a failed attempt (the message is still leased).
        """
        start = time.perf_counter()
        retry = reachable = 0
        while True:
            try:
                if self.store.complete(message, self.handler, now=self.clock()):
                    self._handled(message, start, failed=False)
                    return DONE
                logger.warning(
                    "message %s (row %s): lease lost (expired and taken by another worker), "
                    "nothing ran",
                    message.message_id,
                    message.id,
                    extra={"action": "lost", "id": message.id, "message_id": message.message_id},
                )
                return LOST
            except ConfigurationError:
                raise
            except Exception as exc:
                verdict = self._ride_out(exc)
                if verdict is Verdict.RECOVERED or (verdict is Verdict.REACHABLE and not reachable):
                    reachable += verdict is Verdict.REACHABLE
                    continue  # the database's outage, not the message's: run it again
                if retry == TRANSIENT_RETRIES or not self.store.is_transient(exc):
                    self._handled(message, start, failed=True)
                    return self._failed(message, exc)
                self.hooks.retried(message.consumer_name, attempt=retry + 1)
                logger.info(
                    "message %s (row %s): transient error, re-running its transaction: %s",
                    message.message_id,
                    message.id,
                    exc,
                    extra={"action": "retry", "message_id": message.message_id, "error": str(exc)},
                )
                self.count("transient_retries")
                self.waiting.sleep(random.uniform(0, 0.05 * 2**retry))
                retry += 1

    def _ride_out(self, exc: Exception) -> Verdict | None:
        """If ``exc`` means the database cannot be reached (the store's ``is_unavailable``),
        wait until it answers (:attr:`outage`); else None.

        :raises DatabaseUnavailable: (chained to ``exc``) if the worker is stopped meanwhile.
        """
        unavailable = getattr(self.store, "is_unavailable", None)
        probe = getattr(self.store, "probe", None)
        if unavailable is None or probe is None or not unavailable(exc):
            return None
        verdict = self.outage.wait(exc, probe)
        if verdict is Verdict.STOPPED:
            raise DatabaseUnavailable("stopped while the database could not be reached") from exc
        if verdict is Verdict.RECOVERED:
            self._renew_leases()
        return verdict

    def _renew_leases(self) -> None:
        """After an outage: start again the leases of the batches this worker's threads hold
        (the store's ``renew``, where it has one), so that no worker, this one or another,
        takes them over as abandoned and counts a second attempt for messages the outage
        only delayed. A renewal that fails leaves them to :meth:`_after_outage`'s guard."""
        renew = getattr(self.store, "renew", None)
        with self._lock:
            tokens = list(self._unstarted)
        if renew is None or not tokens:
            return
        try:
            renewed = renew(tokens, now=self.clock())
        except Exception as exc:
            logger.info("leases not renewed after the outage: %s", exc, extra={"action": "renew"})
            return
        logger.debug("renewed %d leases after the outage", renewed, extra={"action": "renew"})

    def _after_outage(self) -> bool:
        """Whether a database outage is in progress or ended less than ``visibility_timeout``
        ago: the unstarted rest of the batches this worker's threads hold then looks
        abandoned (their leases' time ran out while the database could not be reached),
        and taking them over or reaping them would count a second attempt for messages that
        never ran. Another worker process may still take them over, counted (the store's
        rule for an abandoned lease)."""
        gate = self.outage
        return gate.in_outage or time.monotonic() - gate.ended_at < self.visibility_timeout

    def _outage_sleep(self, seconds: float) -> bool:
        """The outage gate's wait: :meth:`_wait`, cut short once another thread found the
        database back; whether the worker stops.

        Each thread waits its own jittered back-off (up to the gate's maximum, 15 s): a
        thread holding a batch that slept on after another thread ended the outage came
        back past :meth:`_after_outage`'s guard, and its batch, leased before the outage,
        was taken over as abandoned, each message's attempt counted twice.
        """
        gate = self.outage
        began = gate.clock()
        left = seconds
        while left > 0 and not self.stopping():
            self._wait(min(left, OUTAGE_POLL_SECONDS))
            if not gate.in_outage and gate.ended_at >= began:
                break  # another thread found the database back: probe now
            left = seconds - (gate.clock() - began)
        return self.stopping()

    def reap(self) -> None:
        """Move abandoned leases back to pending, or to dead once their attempts are used.

        A transient database error (see :func:`sa_inbox.runner.is_transient`) skips this reap, the
        next one comes ``reap_interval`` seconds later: on a MariaDB Galera cluster the
        reap's locking read is aborted with error 1213 when a write-set from another node
        touches the same rows (MariaDB KB, "MariaDB Galera Cluster - Known Limitations"),
        which is no error of the worker. Skipped while this worker's own leases may look
        abandoned after an outage (:meth:`_after_outage`).
        """
        if self._after_outage():
            return
        try:
            result = self.store.reap(
                consumer_name=self.consumer_name,
                visibility_timeout=self.visibility_timeout,
                max_attempts=self.max_attempts,
                now=self.clock(),
            )
        except Exception as exc:
            if not self._skipped_transient(exc, "reap", "reaping next time"):
                raise
            return
        if result.released or result.dead:
            logger.info(
                "reaped abandoned leases: %d back to pending, %d dead",
                result.released,
                result.dead,
                extra={"action": "reap", "released": result.released, "dead": result.dead},
            )
        if result.dead:
            self.count("reaped_dead", result.dead)

    # -- the loop ---------------------------------------------------------------------

    def stop(self) -> None:
        """Ask every thread to finish the message in hand, release the rest and return."""
        self.stop_event.set()

    def run(
        self,
        *,
        until_empty: bool = False,
        max_messages: int | None = None,
        max_seconds: float | None = None,
        handle_signals: bool = True,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    ) -> WorkerSummary:
        """Process messages until stopped, empty, or a limit is reached; return a summary.

        The limits work as RQ's burst mode and ``max_jobs``, Celery's
        ``--max-tasks-per-child`` and procrastinate's ``wait=False`` do: whichever comes
        first ends the run, and none of them interrupts a handler.

        :param until_empty: return once nothing of the consumer is ``pending`` or
            ``processing`` (:meth:`~sa_inbox.store.MessageStore.has_unfinished`), checked
            each time a lease finds nothing. So the run waits for rows that other workers
            hold, and for a failed message's back-off, then processes it (or sees it go
            ``dead``) before it returns. Bound the wait with ``max_seconds``: a row held by
            a hung worker is only leased again after the visibility timeout.
        :param max_messages: lease at most this many messages in this run (a positive
            int), then return once they are processed; ``None``: no limit. Threads share
            the budget, so no batch is leased beyond it.
        :param max_seconds: stop leasing this many seconds after the start (a positive
            number): the message in hand is finished, the rest of its batch released, and
            the run returns; ``None``: no limit. A handler that runs past it is not
            interrupted, so the run can last longer by one handler.
        :param handle_signals: in the main thread, turn SIGTERM and SIGINT into
            :meth:`stop` while running (the previous handlers are restored after); a
            second SIGINT raises :class:`KeyboardInterrupt` at once, the rest of each
            leased batch given back first.
        :param shutdown_timeout: seconds to wait for the threads after a stop; a handler
            still running then is abandoned, and its message is leased again after the
            visibility timeout.
        :returns: the counts of this run (:class:`WorkerSummary`) and why it ended;
            :attr:`stats` and :attr:`summary` keep counting across runs.
        :raises InvalidArgument: for a bad ``max_messages`` or ``max_seconds``.
        :raises ConfigurationError: raised by the store (a missing table, an autocommit
            connection) or by the handler: the same error would fail every message, so it
            is never counted as a failed attempt. Every thread stops, the batches in hand
            are released (if the store allows it), one error is logged, and it is raised
            here.
        :raises ConsumerNameTaken: before anything is leased, if another handler owns
            ``consumer_name`` (see :mod:`sa_inbox.consumers`).
        """
        run = self.begin_run(
            until_empty=until_empty, max_messages=max_messages, max_seconds=max_seconds
        )
        if run.owns_consumer_name():
            with self._signals(handle_signals):
                try:
                    if self.concurrency == 1:
                        run.loop(0)
                    else:
                        self._run_threads(shutdown_timeout)
                except KeyboardInterrupt:  # a second Ctrl-C (or one without our handlers)
                    self._abandon("stopped at once")
                    raise
        return run.finish()

    def begin_run(
        self,
        *,
        until_empty: bool = False,
        max_messages: int | None = None,
        max_seconds: float | None = None,
    ) -> WorkerRun:
        """Begin a run with these limits (as :meth:`run`'s) and return it, for a caller that
        runs the loops itself (:class:`~sa_inbox.asyncio.AsyncWorker` runs them as tasks):
        :meth:`WorkerRun.owns_consumer_name`, then :meth:`WorkerRun.loop` once per thread
        or task, :meth:`WorkerRun.abandon` for loops that outlast the shutdown, and
        :meth:`WorkerRun.finish`.

        :raises InvalidArgument: for a bad ``max_messages`` or ``max_seconds``.
        """
        return WorkerRun(self, self._start(until_empty, max_messages, max_seconds))

    def own_consumer_name(self) -> None:
        """Make this worker's handler the owner of its ``consumer_name``, or check that it is
        (:mod:`sa_inbox.consumers`), on stores that record owners; :meth:`run` does it first.
        A worker of every consumer (``consumer_name=None``) takes no name and is not checked.

        :raises ConsumerNameTaken: if another handler owns the name.
        """
        ensure = getattr(self.store, "ensure_owner", None)
        if ensure is not None and self.consumer_name is not None:
            ensure(self.consumer_name, self.handler)

    def _owns_consumer_name(self) -> bool:
        """:meth:`own_consumer_name` at the start of a run; False (the run stops, and
        :meth:`run` raises) on a configuration error, or if the worker is stopped while it
        waits out a database that cannot be reached (:attr:`outage`, as a message would:
        a worker started during an outage waits for the database, it does not stop). A
        failure that looks like an outage while the database answers, twice in a row, is
        raised."""
        reachable = 0
        while True:
            try:
                self.own_consumer_name()
                return True
            except ConfigurationError as exc:
                self._configuration_error(exc)
                return False
            except Exception as exc:
                try:
                    verdict = self._ride_out(exc)
                except DatabaseUnavailable:
                    return False
                if verdict is None or (verdict is Verdict.REACHABLE and reachable):
                    raise
                reachable = reachable + 1 if verdict is Verdict.REACHABLE else 0

    def _start(
        self, until_empty: bool, max_messages: int | None, max_seconds: float | None
    ) -> Counter[str]:
        """Check a run's limits and begin it; return the counts before it."""
        if max_messages is not None:
            check_positive_int(max_messages, "max_messages")
        if max_seconds is not None:
            check_positive_seconds(max_seconds, "max_seconds")
        deadline = None if max_seconds is None else time.monotonic() + float(max_seconds)
        with self._lock:
            before = Counter(self.stats)
            self._run = _Run(until_empty, deadline, max_messages)
            self._fatal = None
            self._reason = None
        return before

    def _run_threads(self, shutdown_timeout: float) -> None:
        threads = [
            threading.Thread(target=self._loop, args=(i,), name=f"sa-inbox-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads) and not self.stop_event.is_set():
            self.stop_event.wait(0.1)
        deadline = time.monotonic() + shutdown_timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            self._abandon()

    def _abandon(self, why: str = "shutdown timeout") -> None:
        """Give back the unstarted messages of the batches whose handler is abandoned (it
        outlasted the shutdown timeout, or the run was stopped at once): the message in
        hand is leased again after the visibility timeout."""
        with self._lock:
            rests = [list(rest) for rest in self._unstarted.values() if rest]
            self._unstarted.clear()
        if rests:
            logger.warning(
                "%s: %d handler(s) still running are abandoned; their messages are leased "
                "again after the visibility timeout",
                why,
                len(rests),
                extra={"action": "abandon", "count": len(rests)},
            )
        for rest in rests:
            self._release(rest, quietly=True)

    def _finish(self, before: Counter[str]) -> WorkerSummary:
        """Record why the run ended; return its summary, or raise its configuration error."""
        with self._lock:
            run, fatal = self._run, self._fatal
            assert run is not None
            if fatal is not None:
                reason = ERROR
            elif run.halted_by is not None:
                reason = run.halted_by
            elif self.stop_event.is_set() or self._signalled:
                reason = STOPPED
            elif run.budget is not None and run.budget == 0:
                reason = MAX_MESSAGES
            else:
                reason = EMPTY
            if run.halted_by is not None:
                self.stop_event.clear()  # set by this run's limit, not by a stop request
            self._reason = reason
            counts = Counter(self.stats)
            counts.subtract(before)
            self._run = None
        summary = WorkerSummary.from_stats(counts, reason)
        logger.info(
            "worker run ended (%s): %s",
            reason,
            ", ".join(f"{k} {v}" for k, v in summary.as_dict().items() if k != "reason"),
            extra={"action": "summary", **summary.as_dict()},
        )
        if fatal is not None:
            raise fatal
        return summary

    def _loop(self, thread: int) -> None:
        """One thread's loop: reap (thread 0), lease within the budget, process, wait."""
        run = self._run
        assert run is not None
        next_reap = 0.0
        errors_in_a_row = 0
        while not self.stopping():
            try:
                if thread == 0 and time.monotonic() >= next_reap:
                    next_reap = time.monotonic() + self.reap_interval
                    self.reap()
                limit = self._reserve(run)
                if limit == 0:
                    return  # max_messages leased (by this thread or others)
                batch: list[StoredMessage] | None = None
                try:
                    batch = self._lease(thread, limit)
                finally:
                    self._give_back(run, limit - len(batch or ()))
                if batch:
                    errors_in_a_row = 0
                    self._process_batch(batch)
                    continue
                if batch is None:  # aborted by a deadlock or a busy database: retry soon
                    errors_in_a_row += 1
                    self._wait(self._error_delay(errors_in_a_row))
                    continue
                errors_in_a_row = 0
                if run.until_empty and not self.store.has_unfinished(
                    consumer_name=self.consumer_name
                ):
                    return
            except ConfigurationError as exc:
                self._configuration_error(exc)
                return
            except DatabaseUnavailable:
                return  # stopped during an outage: what is leased comes back after the timeout
            except Exception as exc:
                try:
                    if self._ride_out(exc) is Verdict.RECOVERED:
                        errors_in_a_row = 0
                        continue
                except DatabaseUnavailable:
                    return
                errors_in_a_row += 1
                self._step_failed(exc, errors_in_a_row)
                continue
            self._wait(self.poll_interval)

    def stopping(self) -> bool:
        """Whether the loops should stop: a stop request, or the run's time is up (which
        ends the run for every thread)."""
        if self.stop_event.is_set() or self._signalled:
            return True
        run = self._run
        if run is not None and run.deadline is not None and time.monotonic() >= run.deadline:
            self._halt(MAX_SECONDS)
            return True
        return False

    def _halt(self, reason: str) -> None:
        """End the run for every thread, because of ``reason`` (the first one wins)."""
        with self._lock:
            if self._run is None:
                return  # run_once(), outside a run: the caller gets the error
            if self._run.halted_by is None:
                self._run.halted_by = reason
        self.stop_event.set()

    def _wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or less: until a stop request or the run's deadline."""
        run = self._run
        if run is not None and run.deadline is not None:
            seconds = min(seconds, max(0.0, run.deadline - time.monotonic()))
        self.waiting.wait(seconds)

    def _error_delay(self, errors_in_a_row: int) -> float:
        delay = self.error_backoff.delay(errors_in_a_row)
        return delay * random.uniform(0.5, 1.0)

    def _reserve(self, run: _Run) -> int:
        """The lease limit of the next batch: the batch size, within ``max_messages``."""
        with self._lock:
            if run.budget is None:
                return self.batch_size
            limit = min(self.batch_size, run.budget)
            run.budget -= limit
            return limit

    def _give_back(self, run: _Run, unused: int) -> None:
        with self._lock:
            if run.budget is not None:
                run.budget += unused

    def _step_failed(self, exc: Exception, errors_in_a_row: int) -> None:
        """Log an error of the worker itself (full traceback only the first time in a
        row), count it, and wait before the next try."""
        self.count("errors")
        delay = self._error_delay(errors_in_a_row)
        if errors_in_a_row == 1:
            logger.exception(
                "worker step failed, retrying in %.1f s", delay, extra={"action": "error"}
            )
        else:
            logger.error(
                "worker step failed again (%d in a row), retrying in %.1f s: %s: %s",
                errors_in_a_row,
                delay,
                type(exc).__name__,
                exc,
                extra={"action": "error", "error": str(exc)},
            )
        self._wait(delay)

    def _configuration_error(self, exc: ConfigurationError) -> None:
        """Stop every thread because of ``exc``; log it once; :meth:`run` raises it."""
        with self._lock:
            if self._run is None or exc is self._fatal:
                return  # run_once() outside a run raises it; or already reported
            first = self._fatal is None
            if first:
                self._fatal = exc
        if first:
            logger.error(
                "worker stopped by a configuration error (no message is at fault, no "
                "attempt counted as failed): %s: %s",
                type(exc).__name__,
                exc,
                extra={"action": "stop", "error": str(exc)},
            )
        else:
            logger.debug("another thread stopped by: %s", exc, extra={"action": "stop"})
        self._halt(ERROR)

    def _handled(self, message: StoredMessage, start: float, *, failed: bool) -> None:
        self.hooks.handled(
            message.consumer_name, seconds=time.perf_counter() - start, failed=failed
        )

    def _notify(self, message: StoredMessage, outcome: str) -> None:
        if self.on_message is not None:
            self._call_hook("on_message", self.on_message, message, outcome)

    def _call_hook(self, name: str, hook: Callable[..., object], *args: object) -> None:
        """Call a hook; an exception it raises is logged and counted, never propagated."""
        try:
            hook(*args)
        except Exception:
            self.count("errors")
            logger.exception("%s hook raised", name, extra={"action": "error"})

    @contextmanager
    def _signals(self, enabled: bool) -> Iterator[None]:
        if not enabled:
            yield
            return
        self._signalled = False
        with on_signals(self._on_signal, at_once=self._note_signal):
            yield

    def _note_signal(self, signum: int) -> None:
        # In the signal handler: no lock (see sa_inbox._signals); stopping() reads it.
        if self._signalled and signum == signal.SIGINT:
            # a second Ctrl-C: stop now, in the main thread (the handler's transaction
            # there rolls back; the messages in hand are leased again after the timeout)
            raise KeyboardInterrupt
        self._signalled = True

    def _on_signal(self, signum: int) -> None:
        logger.info(
            "stop requested (signal %s)", signum, extra={"action": "stop", "signal": signum}
        )
        self.stop()

    # -- helpers ----------------------------------------------------------------------

    def retry_at(self, message: StoredMessage) -> datetime.datetime | None:
        """When ``message``, failed on this attempt, may be leased again; ``None``: dead."""
        if message.attempts >= self.max_attempts:
            return None
        return self.clock() + datetime.timedelta(seconds=self.backoff.delay(message.attempts))

    def _failed(self, message: StoredMessage, exc: BaseException) -> str:
        retry_at = self.retry_at(message)
        error = f"{type(exc).__name__}: {exc}"
        recorded = self.store.fail(message, error, retry_at=retry_at, now=self.clock())
        return self._log_failure(message, exc, retry_at, recorded)

    def _log_failure(
        self,
        message: StoredMessage,
        exc: BaseException,
        retry_at: datetime.datetime | None,
        recorded: bool,
    ) -> str:
        """Log a failed attempt; its outcome (``"retry"``, ``"dead"``, or ``"lost"`` if
        it could not be recorded)."""
        error = f"{type(exc).__name__}: {exc}"
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

    def _release(self, messages: Sequence[StoredMessage], *, quietly: bool = False) -> None:
        """Give back unstarted leases; with ``quietly``, a failure to do so is only logged
        (the rows come back after the visibility timeout)."""
        if not messages:
            return
        try:
            released = self.store.release(messages)
        except Exception as exc:
            if not quietly:
                raise
            logger.warning(
                "could not release %d leased messages (back after the visibility timeout): %s: %s",
                len(messages),
                type(exc).__name__,
                exc,
                extra={"action": "release", "error": str(exc)},
            )
            return
        logger.info(
            "released %d unstarted messages",
            released,
            extra={"action": "release", "count": released},
        )
        self.count(RELEASED, released)
        for message in messages:
            self._notify(message, RELEASED)

    def count(self, key: str, amount: int = 1) -> None:
        """Add ``amount`` to :attr:`stats` under ``key`` (an outcome, ``errors``,
        ``transient_retries``, ``batch_reruns``, ``reaped_dead``); thread-safe."""
        with self._lock:
            self.stats[key] += amount


class WorkerRun:
    """One run of a :class:`Worker` (:meth:`Worker.begin_run`): the steps of
    :meth:`Worker.run` for a caller that runs the loops itself."""

    def __init__(self, worker: Worker, before: Counter[str]) -> None:
        self.worker = worker
        self._before = before

    def owns_consumer_name(self) -> bool:
        """Take or check the consumer name (:meth:`Worker.own_consumer_name`); False when a
        configuration error ended the run (:meth:`finish` raises it)."""
        return self.worker._owns_consumer_name()

    def loop(self, thread: int) -> None:
        """One thread's (or task's) loop: reap (thread 0), lease, process, wait; returns
        when the run ends (a stop, a limit, a configuration error)."""
        self.worker._loop(thread)

    def abandon(self, why: str = "shutdown timeout") -> None:
        """Give back the unstarted messages of the batches whose loops are abandoned (they
        outlasted the shutdown timeout, or the run stops at once: ``why``, for the log)."""
        self.worker._abandon(why)

    def finish(self) -> WorkerSummary:
        """End the run: its :class:`WorkerSummary`.

        :raises ConfigurationError: the one that stopped the run.
        """
        return self.worker._finish(self._before)


@dataclass
class _Run:
    """The state of one :meth:`Worker.run`, shared by its threads (under the worker's lock).

    :param until_empty: return once nothing is pending or processing.
    :param deadline: :func:`time.monotonic` time to stop at, or ``None``.
    :param budget: messages that may still be leased, or ``None`` (no limit).
    """

    until_empty: bool
    deadline: float | None
    budget: int | None
    halted_by: str | None = None


def _outcome_text(outcome: str, retry_at: datetime.datetime | None, recorded: bool) -> str:
    """The outcome of a failed attempt, for the log line."""
    if not recorded:
        return "lease lost meanwhile, nothing recorded"
    if retry_at is None:
        return "dead (max attempts reached)"
    return f"retry at {retry_at.isoformat(timespec='seconds')}"
