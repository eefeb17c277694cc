"""The relay: publish committed outbox rows with confirms, then mark them dispatched.

One :meth:`OutboxRelay.run_once` is three short steps:

1. **lease** up to ``batch_size`` rows in one transaction, with the inbox store's lease
   (:class:`~sa_inbox.dialects.store_claim.StoreClaimDialect`: ``FOR UPDATE SKIP LOCKED`` on
   PostgreSQL and MySQL/MariaDB, ``BEGIN IMMEDIATE`` on SQLite), so several relays never
   take the same row; each leased row gets ``processing``, a lease token and ``attempts + 1``;
2. **publish** each row and wait for the broker's confirm (no transaction is open meanwhile);
3. **mark** the confirmed rows ``dispatched`` in one ``UPDATE`` guarded by the lease token;
   a failed row goes back to ``pending`` after a back-off, or to ``dead`` at
   ``max_attempts``.

**At least once, never zero times.** A relay killed (or losing its database) after the
broker confirmed and before the mark committed leaves the row ``processing``; once
``visibility_timeout`` has passed another relay leases it and **publishes it again**, with
the same ``message_id``. The copy is dropped by the consumer's inbox (the claim of that
``message_id`` exists); JetStream also drops it by itself within its duplicate window
(``Nats-Msg-Id``). A consumer that does not deduplicate sees it twice.

**Failures.** A message the broker refused (unroutable, nacked, ``WRONGTYPE``, no stream
for the subject) is recorded against its row (``attempts``, ``last_error``, ``available_at``
after the back-off); with the defaults (10 attempts, back-off 1 s doubling to 60 s) it goes
``dead`` after about 5 minutes of refusals, and :meth:`RelayCore.replay` (``sa-inbox outbox
replay``) sends dead rows again once the cause is fixed. **A broker that cannot be reached counts
no attempt** (:func:`~sa_inbox.outbox.publisher.broker_unavailable`: the publisher's
``is_unavailable``, else any ``OSError``): the relay stops publishing the batch, gives its
unpublished rows back (``pending``, the lease's attempt taken back, ``available_at``
unchanged, so they keep their place), and waits ``outage_backoff`` (1 s doubling to 30 s)
before each next lease until a publish gets through, so an outage of any length sends no
row ``dead``; a row whose publish was cut off may have reached the broker and is sent
again, with its ``message_id``, as after a killed relay. **A database that cannot be reached
counts no attempt either** (:func:`sa_inbox.outage.is_unavailable`): the relay's
:class:`~sa_inbox.outage.OutageGate` holds the rows it published and marks them once a probe
gets through (so a confirmed row is not published again), and :meth:`OutboxRelay.run`
waits out an outage before its next lease, one WARNING when it starts and one INFO when it
ends. Another database error (a missing table) propagates from :meth:`OutboxRelay.run_once`
(``sa-inbox relay`` exits 3).

**Order.** Rows are leased in ``id`` order, but with ``ordered=False`` a row that failed
is retried after later rows of its destination were sent. With ``ordered=True`` a row is
leased only when no earlier row of its destination is ``pending`` or ``processing``
(``dead`` rows do not block), so each destination has at most one message in flight and
messages reach the broker in ``id`` order, at the cost of one round trip per message per
destination. ``id`` order is insert order, which is commit order only for rows written by
one transaction at a time (one consumer per aggregate, as for the store's ordered mode).
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from typing_extensions import deprecated

from ..backoff import Backoff
from ..checks import require
from ..dialects.store_claim import CandidateQuery, StoreClaimDialect
from ..exc import AsyncPublisherInSyncRelay, DatabaseUnavailable, InvalidArgument
from ..outage import OutageGate, Verdict, is_unavailable, probe_engine
from ..store.leases import LeasedRows, LeaseShape
from ..store.replay import ReplayFilter
from ..store.schema import utc_now
from ..validation import positive_int, positive_seconds
from .message import OutboxMessage
from .outbox import Outbox
from .publisher import Publisher, broker_unavailable, check_publisher
from .schema import DEAD, DISPATCHED, MAX_ERROR_LENGTH, PENDING, PROCESSING

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_OUTAGE_BACKOFF",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "OutboxRelay",
    "RelayBatch",
    "RelayCore",
    "add_batches",
    "describe",
    "outage_pause",
    "publish_all",
    "relay_batch",
    "unfinished",
]

logger = logging.getLogger("sa_inbox.outbox")

T = TypeVar("T")

DEFAULT_BATCH_SIZE = 100
DEFAULT_MAX_ATTEMPTS = 10
#: Seconds after which a ``processing`` row counts as abandoned (its relay died).
DEFAULT_VISIBILITY_TIMEOUT = 30.0
DEFAULT_POLL_INTERVAL = 0.5
DEFAULT_BACKOFF = Backoff(base=1.0, maximum=60.0)
#: The relay's wait before its next lease while the broker cannot be reached, doubling per
#: batch in a row that found it so.
DEFAULT_OUTAGE_BACKOFF = Backoff(base=1.0, maximum=30.0)

#: The outbox table's leased rows: one destination at a time in ``id`` order with
#: ``ordered``; a lease returns an :class:`OutboxMessage`'s columns; a replay resets dead or
#: dispatched rows, chosen by ids, status, creation time and destination. An ordered lease
#: checks nothing again: its ``NOT EXISTS`` reads the same snapshot as its candidates (see
#: :attr:`~sa_inbox.dialects.store_claim.StoreClaimDialect.find_first`).
_SHAPE = LeaseShape(
    group="destination",
    partition=("destination",),
    order=("id",),
    columns=(
        "id",
        "message_id",
        "destination",
        "payload",
        "headers",
        "attempts",
        "created_at",
        "claimed_by",
    ),
    statuses=(PENDING, PROCESSING, DISPATCHED, DEAD),
    arrived="created_at",
    finished="dispatched_at",
    replayable=(DEAD, DISPATCHED),
    error=InvalidArgument,
    recheck_ordered=False,
    pending=PENDING,
    processing=PROCESSING,
)


@dataclass(frozen=True)
class RelayBatch:
    """What one :meth:`OutboxRelay.run_once` did.

    :param claimed: rows leased.
    :param dispatched: rows confirmed by the broker and marked ``dispatched``.
    :param retried: rows whose publish failed, back to ``pending`` after the back-off.
    :param dead: rows moved to ``dead`` (failed or abandoned ``max_attempts`` times).
    :param released: rows given back unpublished because the broker could not be reached
        (``pending`` again, their attempt not counted).
    """

    claimed: int = 0
    dispatched: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0


class RelayCore:
    """The relay's database steps (lease, mark, reap) on one engine; no broker I/O.

    Shared by :class:`OutboxRelay` and :class:`~sa_inbox.asyncio.AsyncOutboxRelay` (which
    runs them in a greenlet on the async driver).

    :param engine: the outbox's database (the ``sync_engine`` of an AsyncEngine).
    :param outbox: the outbox.
    :param on_batch: called with each batch's :class:`RelayBatch` (it must not raise).
    :raises InvalidArgument: for a bad setting (see :class:`OutboxRelay`).
    """

    def __init__(
        self,
        engine: sa.Engine,
        outbox: Outbox,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT,
        backoff: Backoff = DEFAULT_BACKOFF,
        ordered: bool = False,
        outage_backoff: Backoff = DEFAULT_OUTAGE_BACKOFF,
        on_batch: Callable[[RelayBatch], None] | None = None,
    ) -> None:
        self.engine = engine
        self.outbox = require(
            outbox,
            Outbox,
            "outbox",
            entry="the outbox relay",
            instead="pass the Outbox behind it (AsyncOutbox.sync_outbox)",
        )
        self.table = outbox.table
        self.batch_size = positive_int(batch_size, "batch_size", InvalidArgument)
        self.max_attempts = positive_int(max_attempts, "max_attempts", InvalidArgument)
        self.visibility_timeout = positive_seconds(
            visibility_timeout, "visibility_timeout", InvalidArgument
        )
        for name, value in (("backoff", backoff), ("outage_backoff", outage_backoff)):
            if not isinstance(value, Backoff):
                raise InvalidArgument(f"{name} must be a Backoff, not {value!r}")
        self.backoff = backoff
        self.outage_backoff = outage_backoff
        self.ordered = bool(ordered)
        if on_batch is not None and not callable(on_batch):
            raise InvalidArgument(f"on_batch must be a callable, not {on_batch!r}")
        #: Told of each batch's counts (e.g. :class:`sa_inbox.hooks.prometheus.RelayMetrics`).
        self.on_batch = on_batch
        #: The leased-row statements on the outbox table (:mod:`sa_inbox.store.leases`).
        self.leased_rows = LeasedRows(self.table, _SHAPE)
        #: Rides out database outages; the relays set its ``sleep`` to their stoppable wait.
        self.outage = OutageGate(f"outbox relay of {self.table.name}")
        self._reachable_in_a_row = 0

    def ride_out(self, error: BaseException) -> bool:
        """If ``error`` means the database cannot be reached, wait until it answers
        (:attr:`outage`) and return True; False for any other error (or for one that looks
        like an outage while the database answered the probe twice in a row).

        :raises DatabaseUnavailable: (chained) if the relay is stopped meanwhile.
        """
        if not is_unavailable(error, self.engine.dialect.name):
            return False
        verdict = self.outage.wait(error, probe_engine(self.engine))
        if verdict is Verdict.STOPPED:
            raise DatabaseUnavailable("stopped while the database could not be reached") from error
        if verdict is Verdict.REACHABLE:
            self._reachable_in_a_row += 1
            return self._reachable_in_a_row < 2
        self._reachable_in_a_row = 0
        return True

    def retrying(self, step: Callable[[], T]) -> T:
        """``step()``, run again after each database outage it fails with (see
        :meth:`ride_out`): the bookkeeping of rows already published."""
        while True:
            try:
                result = step()
            except Exception as exc:
                if not self.ride_out(exc):
                    raise
                continue
            self._reachable_in_a_row = 0
            return result

    # -- lease ------------------------------------------------------------------------

    def lease(self, now: datetime.datetime | None = None) -> list[OutboxMessage]:
        """Lease up to ``batch_size`` rows in one short transaction (see the module).

        Leasable: ``pending`` with ``available_at <= now``, or ``processing`` whose lease
        is older than ``visibility_timeout`` with fewer than ``max_attempts`` attempts.

        :returns: the leased messages in ``id`` order.
        :raises UnsupportedBackend: if the server has no ``SKIP LOCKED``.
        """
        when = now or utc_now()
        rows = self.leased_rows.lease(
            self.engine,
            token=f"relay-{uuid.uuid4().hex}",
            limit=self.batch_size,
            now=when,
            stale_before=self._stale_before(when),
            max_attempts=self.max_attempts,
            group=None,
            ordered=self.ordered,
        )
        return [_message(row) for row in rows]

    @deprecated("RelayCore.claim() is renamed lease(); claim() goes in the next release")
    def claim(self, now: datetime.datetime | None = None) -> list[OutboxMessage]:
        """Deprecated name of :meth:`lease`; emits a :class:`DeprecationWarning`."""
        return self.lease(now)

    def candidates(self, now: datetime.datetime) -> tuple[CandidateQuery, CandidateQuery]:
        """Abandoned leases first, then pending rows: each ``SELECT id … ORDER BY id``."""
        stale_before = self._stale_before(now)
        return self.leased_rows.candidates(now, stale_before, self.max_attempts, None, self.ordered)

    def _stale_before(self, now: datetime.datetime) -> datetime.datetime:
        """A ``processing`` row leased before this time is abandoned."""
        return now - datetime.timedelta(seconds=self.visibility_timeout)

    # -- mark -------------------------------------------------------------------------

    def mark_dispatched(
        self, messages: Sequence[OutboxMessage], now: datetime.datetime | None = None
    ) -> int:
        """Mark confirmed rows ``dispatched`` in one transaction, guarded by their lease.

        :returns: the rows marked (a row whose lease was taken over by another relay after
            the visibility timeout is left to that relay, and was published twice).
        """
        values = {"status": DISPATCHED, "dispatched_at": now or utc_now(), "claimed_by": None}
        return self._update_leased(messages, values)

    def mark_failed(
        self, message: OutboxMessage, error: BaseException, now: datetime.datetime | None = None
    ) -> bool:
        """Record a failed publish: ``pending`` again after the back-off, or ``dead`` at
        ``max_attempts``.

        :returns: True if the row went ``dead``.
        """
        when = now or utc_now()
        text = describe(error)[:MAX_ERROR_LENGTH]
        values: dict[str, Any] = {"last_error": text, "claimed_by": None}
        dead = message.attempts >= self.max_attempts
        if dead:
            values["status"] = DEAD
        else:
            delay = datetime.timedelta(seconds=self.backoff.delay(message.attempts))
            values.update(status=PENDING, available_at=when + delay, claimed_at=None)
        with self.transaction() as (conn, _):
            self.leased_rows.update_leased(conn, message.id, message.claimed_by, values)
        return dead

    def release(self, messages: Sequence[OutboxMessage]) -> int:
        """Give rows back unpublished (the broker could not be reached): ``pending``
        again with the lease's attempt taken back and ``available_at`` unchanged, in one
        transaction, guarded by their lease.

        :returns: the rows given back (a row another relay took over after the visibility
            timeout is left to it).
        """
        t = self.table
        values = {"status": PENDING, "attempts": t.c.attempts - 1, "claimed_at": None}
        return self._update_leased(messages, {**values, "claimed_by": None})

    def _update_leased(self, messages: Sequence[OutboxMessage], values: dict[str, Any]) -> int:
        """Set ``values`` on the rows still leased by the messages' leases, in one
        transaction (:meth:`~sa_inbox.store.leases.LeasedRows.update_leases`)."""
        leases = [(m.claimed_by, m.id) for m in messages]
        return self.leased_rows.update_leases(self.engine, leases, values)

    def reap(self, now: datetime.datetime | None = None) -> int:
        """Move rows abandoned ``max_attempts`` times (their relays died each time) to
        ``dead``; returns how many. Taken with the lease's ``SKIP LOCKED``."""
        stale_before = self._stale_before(now or utc_now())
        candidates = self.leased_rows.abandoned(stale_before, self.max_attempts, True, None)
        lost = (
            f"abandoned: not confirmed within the visibility timeout ({self.visibility_timeout} s)"
        )
        with self.transaction() as (conn, dialect):
            values = {"status": DEAD, "last_error": lost, "claimed_by": None}
            return len(dialect.claim(conn, self.table, candidates, self.batch_size, values))

    # -- inspection and replay ------------------------------------------------------------

    def replay(
        self,
        *,
        ids: Iterable[int] | None = None,
        status: str | None = None,
        created_from: datetime.datetime | None = None,
        created_before: datetime.datetime | None = None,
        destination: str | None = None,
        now: datetime.datetime | None = None,
    ) -> int:
        """Reset chosen ``dead`` or ``dispatched`` rows to ``pending`` so relays publish
        them again, in one transaction.

        Rows are chosen by all the given filters together: ``ids`` (row ids), ``status``
        (``"dead"`` or ``"dispatched"``), ``created_at`` in ``[created_from,
        created_before)`` (aware datetimes), ``destination``. ``pending`` and ``processing``
        rows are never touched. Replayed rows get ``attempts = 0`` and ``available_at =
        now``; ``last_error`` is kept. A replayed ``dispatched`` row is published a second
        time with its ``message_id`` (the consumer's inbox drops it as a duplicate while
        its claim is kept): count first with :meth:`replayable`.

        :param now: when the rows become leasable (aware); default now.
        :returns: the number of rows reset.
        :raises InvalidArgument: if no row filter is given (``destination`` alone does
            not choose rows), ``status`` is neither ``"dead"`` nor ``"dispatched"``, or a
            time is not an aware datetime.
        """
        chosen = ReplayFilter(ids, status, created_from, created_before, destination)
        return self.leased_rows.replay(self.engine, chosen, now or utc_now())

    def replayable(
        self,
        *,
        ids: Iterable[int] | None = None,
        status: str | None = None,
        created_from: datetime.datetime | None = None,
        created_before: datetime.datetime | None = None,
        destination: str | None = None,
    ) -> int:
        """The number of rows :meth:`replay` with the same filters would reset now.

        :raises InvalidArgument: as :meth:`replay`.
        """
        chosen = ReplayFilter(ids, status, created_from, created_before, destination)
        return self.leased_rows.replayable(self.engine, chosen)

    def counts(self, destination: str | None = None) -> dict[str, int]:
        """Rows per status (every status present, 0 when none), of one destination or of
        all."""
        return self.leased_rows.counts(self.engine, destination)

    def has_unfinished(self) -> bool:
        """Whether a row is still ``pending`` or ``processing``."""
        return self.leased_rows.has_unfinished(self.engine, None)

    @contextmanager
    def transaction(self) -> Iterator[tuple[Connection, StoreClaimDialect]]:
        """A short transaction at the lease dialect's isolation level and write lock
        (:meth:`~sa_inbox.store.leases.LeasedRows.transaction`)."""
        with self.leased_rows.transaction(self.engine) as (conn, dialect):
            yield conn, dialect


class OutboxRelay:
    """Publish the outbox's committed rows to a broker, each confirmed, until stopped.

    :param engine: the outbox's database.
    :param outbox: the :class:`~sa_inbox.outbox.Outbox`.
    :param publisher: a :class:`~sa_inbox.outbox.publisher.Publisher` with a plain
        ``publish`` (e.g. :class:`~sa_inbox.brokers.rabbitmq.Publisher`).
    :param batch_size: rows leased per transaction (also the most messages a killed
        relay republishes), >= 1.
    :param max_attempts: publish attempts before a row is ``dead``, >= 1.
    :param visibility_timeout: seconds after which a leased, unmarked row is leased
        again by another relay; must exceed the time one batch takes to publish.
    :param backoff: the wait before a failed row is retried, doubling per attempt.
    :param ordered: per-destination order (see the module).
    :param outage_backoff: the wait before the next lease after a batch that found the
        broker unreachable, doubling per such batch in a row (see the module).
    :param poll_interval: seconds to wait when nothing is leasable.
    :param on_batch: called with each batch's :class:`RelayBatch`, e.g.
        :meth:`RelayMetrics.observe <sa_inbox.hooks.prometheus.RelayMetrics.observe>`.
    :raises InvalidArgument: for a bad setting.

    Example::

        relay = OutboxRelay(engine, outbox, rabbitmq.Publisher("amqp://..."))
        relay.run()                 # until relay.stop()
    """

    def __init__(
        self,
        engine: sa.Engine,
        outbox: Outbox,
        publisher: Publisher,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT,
        backoff: Backoff = DEFAULT_BACKOFF,
        ordered: bool = False,
        outage_backoff: Backoff = DEFAULT_OUTAGE_BACKOFF,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        on_batch: Callable[[RelayBatch], None] | None = None,
    ) -> None:
        engine = require(
            engine,
            sa.Engine,
            "engine",
            entry="OutboxRelay()",
            instead="for an AsyncEngine and an async publisher use "
            "sa_inbox.asyncio.AsyncOutboxRelay",
        )
        check_publisher(publisher, asynchronous=False)
        self.core = RelayCore(
            engine,
            outbox,
            batch_size=batch_size,
            max_attempts=max_attempts,
            visibility_timeout=visibility_timeout,
            backoff=backoff,
            ordered=ordered,
            outage_backoff=outage_backoff,
            on_batch=on_batch,
        )
        self.publisher = publisher
        self.poll_interval = positive_seconds(poll_interval, "poll_interval", InvalidArgument)
        self._stop = threading.Event()
        self.core.outage.sleep = self._stop.wait

    def run_once(self) -> RelayBatch:
        """Lease one batch, publish each row with confirms, mark the results (see the
        module). A refused publish is recorded against its row; a broker that cannot be
        reached gives the unpublished rows back (:attr:`RelayBatch.released`); a database
        error propagates.

        :raises AsyncPublisherInSyncRelay: if the publisher's ``publish`` returned an
            awaitable (an async publisher): the batch's rows are given back unpublished.
        """
        return relay_batch(self.core, self.publisher, _plain)

    def run(
        self, *, until_empty: bool = False, sleep: Callable[[float], None] | None = None
    ) -> RelayBatch:
        """Relay batches until :meth:`stop` (or, with ``until_empty``, until a lease finds
        nothing and no row is ``pending`` or ``processing``). After a batch that found the
        broker unreachable it waits ``outage_backoff`` before the next lease.

        :param sleep: how to wait a number of seconds; default a wait that :meth:`stop`
            ends early.
        :returns: the totals over the run.
        """
        wait = sleep or self._stop.wait
        total = RelayBatch()
        outages = 0
        while not self._stop.is_set():
            try:
                batch = self.run_once()
            except DatabaseUnavailable:
                break  # stopped during an outage
            except Exception as exc:
                if self.core.ride_out(exc):
                    continue
                raise
            total = add_batches(total, batch)
            pause, outages = outage_pause(self.core, batch, outages)
            if pause is not None:
                wait(pause)
            elif batch.claimed == 0:
                if until_empty and not unfinished(self.core):
                    break
                wait(self.poll_interval)
        return total

    def stop(self) -> None:
        """Stop after the current batch (thread-safe)."""
        self._stop.set()


def relay_batch(core: RelayCore, publisher: Publisher, resolve: Callable[[Any], Any]) -> RelayBatch:
    """One lease, publish, mark round: the logic both relays share.

    :param publisher: the publisher; its ``publish_many`` is used when it has one.
    :param resolve: turns what the publisher returned into its result (the identity for a
        plain publisher; awaiting it on the loop for an async one, from a greenlet).
    """
    dead = core.reap()
    messages = core.lease()
    try:
        published = publish_all(publisher, messages, resolve)
    except AsyncPublisherInSyncRelay:
        core.release(messages)  # nothing was published: the rows keep their attempt
        raise
    outcomes = list(zip(messages, published, strict=True))
    unreachable: list[tuple[OutboxMessage, Exception]] = []
    refused: list[tuple[OutboxMessage, Exception]] = []
    for message, error in outcomes:
        if error is not None:
            unavailable = broker_unavailable(publisher, error)
            (unreachable if unavailable else refused).append((message, error))
    # published rows are marked even across a database outage: not published again
    went_dead = sum(core.retrying(partial(_record_refusal, core, m, e)) for m, e in refused)
    confirmed = [m for m, error in outcomes if error is None]
    dispatched = core.retrying(lambda: core.mark_dispatched(confirmed))
    released = core.retrying(lambda: _give_back(core, unreachable))
    batch = RelayBatch(
        len(messages), dispatched, len(refused) - went_dead, dead + went_dead, released
    )
    if core.on_batch is not None:
        core.on_batch(batch)
    return batch


def _record_refusal(core: RelayCore, message: OutboxMessage, error: Exception) -> bool:
    """Record a publish the broker refused as a failed attempt; True if it went ``dead``."""
    logger.warning(
        "outbox message %s to %s: publish failed (attempt %d): %s",
        message.message_id,
        message.destination,
        message.attempts,
        error,
        extra={"action": "publish_failed", "message_id": message.message_id},
    )
    return core.mark_failed(message, error)


def _give_back(core: RelayCore, unreachable: Sequence[tuple[OutboxMessage, Exception]]) -> int:
    """Release the rows the broker could not be reached for; returns how many."""
    if not unreachable:
        return 0
    released = core.release([message for message, _ in unreachable])
    error = unreachable[0][1]
    logger.warning(
        "broker unavailable: %d outbox messages given back unpublished, no attempt counted: %s",
        len(unreachable),
        describe(error),
        extra={"action": "broker_unavailable", "released": released},
    )
    return released


def publish_all(
    publisher: Publisher, messages: Sequence[OutboxMessage], resolve: Callable[[Any], Any]
) -> list[Exception | None]:
    """Publish ``messages``; per message None (confirmed) or the exception that refused it.

    With the publisher's optional ``publish_many(messages)`` (confirms pipelined, e.g.
    :class:`~sa_inbox.brokers.rabbitmq.AsyncPublisher`) in one call; else one ``publish``
    after the other, each waiting for its confirm, until one finds the broker unreachable
    (:func:`~sa_inbox.outbox.publisher.broker_unavailable`): the messages after it are not
    tried and get the same exception.
    """
    if not messages:
        return []
    many = getattr(publisher, "publish_many", None)
    if many is not None:
        try:
            return list(resolve(many(list(messages))))
        except AsyncPublisherInSyncRelay:
            raise
        except Exception as exc:  # the whole batch failed (the broker is unreachable)
            return [exc] * len(messages)
    outcomes: list[Exception | None] = []
    for message in messages:
        try:
            resolve(publisher.publish(message))
        except AsyncPublisherInSyncRelay:
            raise
        except Exception as exc:  # the broker's error: recorded against the row
            outcomes.append(exc)
            if broker_unavailable(publisher, exc):  # the rest is not tried: the same outcome
                return outcomes + [exc] * (len(messages) - len(outcomes))
        else:
            outcomes.append(None)
    return outcomes


def unfinished(core: RelayCore) -> bool:
    """Whether a row is still ``pending`` or ``processing``."""
    return core.has_unfinished()


def add_batches(a: RelayBatch, b: RelayBatch) -> RelayBatch:
    """The sum of two batches' counts."""
    pairs = zip(dataclasses.astuple(a), dataclasses.astuple(b), strict=True)
    return RelayBatch(*(x + y for x, y in pairs))


def outage_pause(core: RelayCore, batch: RelayBatch, outages: int) -> tuple[float | None, int]:
    """The relay loops' wait after ``batch``: ``(seconds, outages in a row)``.

    :param outages: batches in a row before this one that found the broker unreachable.
    :returns: ``core.outage_backoff`` for this count when ``batch`` released rows (the
        broker could not be reached), else ``None`` (no outage wait) and a count of 0.
    """
    if not batch.released:
        return None, 0
    return core.outage_backoff.delay(outages + 1), outages + 1


def _message(row: Mapping[Any, Any]) -> OutboxMessage:
    return OutboxMessage(
        id=int(row["id"]),
        message_id=row["message_id"],
        destination=row["destination"],
        payload=bytes(row["payload"]),
        headers=dict(row["headers"] or {}),
        attempts=int(row["attempts"]),
        created_at=row["created_at"],
        claimed_by=row["claimed_by"] or "",
    )


def _plain(value: Any) -> Any:
    """The synchronous relay's ``resolve``: a plain publisher's result as it is.

    :raises AsyncPublisherInSyncRelay: for an awaitable (closed first, so that Python does
        not warn of a coroutine never awaited): taking it for a confirm would mark the row
        dispatched although nothing was published.
    """
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()
        raise AsyncPublisherInSyncRelay(
            "OutboxRelay needs a publisher whose publish returns once the broker confirmed;"
            " this one returned an awaitable (an async publisher or client): use"
            " sa_inbox.asyncio.AsyncOutboxRelay, or a plain publisher"
        )
    return value


def describe(error: BaseException) -> str:
    """``Type: message`` of an error, or its ``repr`` when its message is empty (pika's
    connection errors carry their cause in their arguments only: ``str()`` is ``''``)."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else repr(error)
