"""One poll, one transaction: the claim of every record, the handlers, the failed attempts
and (``offsets="database"``) the offsets, committed together.

Written once in synchronous code: the sync consumer runs it on its thread, the asyncio
consumer in a greenlet on its event loop (SQLAlchemy's own bridge,
:mod:`sa_inbox.asyncio._bridge`), where the handler's ``AsyncSession`` work and the
dead-letter publishes are awaited on the loop.

:meth:`PollRunner.run`, for the records of one poll that carry a valid key:

1. **the transaction**: :meth:`~sa_inbox.Inbox.claim_batch` claims the poll in one
   statement and returns the first record of each id newly claimed; their failed attempts
   are read from the attempts table (one ``SELECT``; the delivery count is that plus one);
   each handler runs; the attempts of failed records are written, those of processed and
   dead-lettered ones cleared (a dead letter republished, a replay, starts at delivery 1);
   with ``offsets="database"`` the partitions' next offsets are stored; one ``COMMIT``. A
   record already claimed by a committed transaction is a duplicate.
2. **a handler fails** (or a record is past ``max_deliveries``, rule 2 of
   :mod:`sa_inbox.brokers.process`, or its handler ended the poll's transaction: a commit
   refused, a rollback detected, :mod:`sa_inbox.guard`): the transaction is rolled back,
   the record is a failed attempt, retried (its partition is sought back to it after the
   commit) or, at the limit, published to the dead-letter topic at once; the poll runs
   again without it, with a savepoint per handler, so a further failure is isolated (its
   savepoint rolled back, its claim deleted) without a third run: the shape of the inbox
   store's batch mode
   (:mod:`sa_inbox.store.batch`). One transaction per poll rather than per record was
   chosen by ``benchmarks/kafka_poll.py`` (``benchmarks/RESULTS.md``, "Kafka: a poll in
   one transaction"); its cost is the batch mode's: the poll holds the locks of every row
   its handlers touch until it commits.
3. **the database cannot be reached** (:func:`sa_inbox.outage.is_unavailable`): the
   consumer's :class:`~sa_inbox.outage.OutageGate` probes with back-off and the same poll
   runs again, uncounted (nothing was committed, no attempt written); a consumer stopped or
   losing the partitions meanwhile gets :class:`~sa_inbox.exc.DatabaseUnavailable`.
4. **a deadlock or serialization failure**: the poll runs again, up to
   :data:`~sa_inbox.store.batch.BATCH_RERUNS` times; then, or on another error of the
   transaction itself, each record runs in a transaction of its own, where such an error is
   that record's failed attempt.
5. a :class:`~sa_inbox.exc.ConfigurationError` is raised to the caller, nothing committed.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from ...claim import Inbox
from ...exc import (
    ConfigurationError,
    DatabaseUnavailable,
    DeliveryLimitExceeded,
    HandlerEndedTransaction,
)
from ...guard import check_intact, owned_transaction
from ...outage import OutageGate, Verdict, guarded, is_unavailable
from ...runner import is_transient, new_session
from ...store.batch import BATCH_RERUNS
from ..delivery import DeadLetterReason, Delivery, Disposition, Settlement
from ..process import _detail
from .records import Record, by_partition
from .state import Attempts, Offsets, savepoint

__all__ = ["Failure", "PollResult", "PollRunner", "next_offsets"]

logger = logging.getLogger("sa_inbox.brokers.kafka")

Position = tuple[str, int]


@dataclass(frozen=True)
class Failure:
    """A record whose attempt failed: retried (``dead`` False) or dead-lettered."""

    record: Record
    error: BaseException
    dead: bool

    def settlement(self) -> Settlement:
        delivery = self.record.delivery
        if self.dead:
            return Settlement(
                Disposition.DEAD_LETTERED, delivery, DeadLetterReason.DELIVERY_LIMIT, self.error
            )
        return Settlement(Disposition.RETRY, delivery, error=self.error)


@dataclass
class PollResult:
    """What one poll's committed transaction settled, in poll order per kind."""

    processed: list[Record] = field(default_factory=list)
    duplicates: list[Record] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)

    def settlements(self) -> list[Settlement]:
        """Each record's settlement, in offset order per partition."""
        settled = [
            *((r, Settlement(Disposition.PROCESSED, r.delivery)) for r in self.processed),
            *((r, Settlement(Disposition.DUPLICATE, r.delivery)) for r in self.duplicates),
            *((f.record, f.settlement()) for f in self.failures),
        ]
        settled.sort(key=lambda pair: (pair[0].position, pair[0].offset))
        return [settlement for _, settlement in settled]

    @property
    def retried(self) -> list[Record]:
        """The records to fetch again (failed below the limit)."""
        return [f.record for f in self.failures if not f.dead]

    def extend(self, other: PollResult) -> None:
        self.processed += other.processed
        self.duplicates += other.duplicates
        self.failures += other.failures


def next_offsets(
    records: Sequence[Record], retried: Sequence[Record], held: Mapping[Position, int]
) -> dict[Position, int]:
    """Each partition's next offset after a poll: past its last record, but never past a
    record to retry nor a record held unsettled (``held``: the first such offset per
    partition). A contiguous watermark: every offset below it is settled.

    :param records: every record of the poll (settled or not).
    :param retried: the records that failed below the limit.
    :param held: partition -> first offset held back (keyless records awaiting a verdict).
    """
    stops: dict[Position, int] = dict(held)
    for record in retried:
        stops[record.position] = min(stops.get(record.position, record.offset), record.offset)
    marks: dict[Position, int] = {}
    for position, group in by_partition(records).items():
        mark = group[-1].offset + 1
        if position in stops:
            mark = min(mark, stops[position])
        marks[position] = mark
    return marks


class _HandlerFailed(Exception):
    def __init__(self, record: Record, error: BaseException) -> None:
        super().__init__(str(error))
        self.record = record
        self.error = error


#: ``dead_letter(record, reason, detail)``: publish to the dead-letter topic and wait for
#: the broker's acknowledgement.
DeadLetter = Callable[[Record, DeadLetterReason, str], None]


class PollRunner:
    """Runs one poll's transaction (see the module's docstring).

    :param session_factory: a ``sessionmaker`` (for the asyncio consumer, the one behind its
        ``async_sessionmaker``, run in a greenlet).
    :param inbox: the inbox to claim in.
    :param consumer_name: the consumer's name.
    :param handler: ``handler(session, delivery)``, sync (the asyncio consumer passes one
        that awaits the user's on the loop).
    :param max_deliveries: deliveries allowed per message.
    :param attempts: the attempts table's statements.
    :param offsets: the offsets table's statements (``offsets="database"``), or None.
    :param dead_letter: publishes one dead letter, returning once the broker stored it.
    :param gate: the consumer's outage gate (its sleep sees the consumer's stop and the
        loss of its partitions).
    :param probe: the gate's probe of the database.
    :param sleep: ``sleep(seconds)`` between transient re-runs.
    """

    def __init__(
        self,
        *,
        session_factory: Callable[[], Session],
        inbox: Inbox,
        consumer_name: str,
        handler: Callable[[Session, Delivery], Any],
        max_deliveries: int,
        attempts: Attempts,
        offsets: Offsets | None,
        dead_letter: DeadLetter,
        gate: OutageGate,
        probe: Callable[[], object],
        sleep: Callable[[float], Any],
    ) -> None:
        self.session_factory = session_factory
        self.inbox = inbox
        self.consumer_name = consumer_name
        self.handler = handler
        self.max_deliveries = max_deliveries
        self.attempts = attempts
        self.offsets = offsets
        self.dead_letter = dead_letter
        self.gate = gate
        self.probe = probe
        self.sleep = sleep

    def run(
        self,
        keyed: Sequence[Record],
        everything: Sequence[Record],
        held: Mapping[Position, int],
        failed: Sequence[Failure] = (),
    ) -> PollResult:
        """Settle ``keyed`` (the poll's records with a valid key) in one transaction.

        :param everything: every record of the poll, for the offsets stored with
            ``offsets="database"`` (see :func:`next_offsets`).
        :param held: partition -> first offset held back (not settled by this poll).
        :param failed: records of the poll that already failed this attempt (not run;
            their attempts written in this transaction).
        :raises ConfigurationError: nothing committed.
        :raises DatabaseUnavailable: stopped (or the partitions lost) during an outage.
        """
        failures: list[Failure] = list(failed)
        reruns = reachable = 0
        while True:
            try:
                with guarded():
                    return self._transaction(keyed, everything, held, failures)
            except _HandlerFailed as failed:
                failures.append(self._failed(failed.record, failed.error))
                continue
            except ConfigurationError:
                raise
            except Exception as exc:
                error = exc
            if is_unavailable(error):
                verdict = self.gate.wait(error, self.probe)
                if verdict is Verdict.STOPPED:
                    raise DatabaseUnavailable(
                        f"consumer {self.consumer_name}: stopped while the database could not "
                        "be reached; the poll is left uncommitted"
                    ) from error
                reachable = reachable + 1 if verdict is Verdict.REACHABLE else 0
                if reachable < 2:
                    continue
            elif is_transient(error, None) and reruns < BATCH_RERUNS:
                reruns += 1
                logger.info(
                    "consumer %s: poll re-run after a transient error: %s",
                    self.consumer_name,
                    error,
                    extra={"action": "poll_rerun"},
                )
                self.sleep(random.uniform(0, 0.01 * 2**reruns))
                continue
            return self._one_by_one(keyed, everything, held, failures, error)

    def _one_by_one(
        self,
        keyed: Sequence[Record],
        everything: Sequence[Record],
        held: Mapping[Position, int],
        failures: list[Failure],
        error: BaseException,
    ) -> PollResult:
        """Each record in a transaction of its own, after the poll's transaction failed;
        a record alone whose transaction fails so is a failed attempt of its own."""
        done = {_where(f.record) for f in failures}
        pending = [r for r in keyed if _where(r) not in done]
        if len(pending) <= 1:
            if pending:
                failures.append(self._failed(pending[0], error))
            return self._transaction([], everything, held, failures)
        logger.warning(
            "consumer %s: the poll's transaction failed (%s: %s); one transaction per record",
            self.consumer_name,
            type(error).__name__,
            error,
            extra={"action": "poll_fallback", "error": str(error)},
        )
        result = PollResult()
        for record in pending:  # no offsets stored: a retried record may precede it
            result.extend(self.run([record], [], {}))
        # the earlier failures' attempts, and the poll's offsets once every record is
        # settled (not past a record to retry)
        settled = self.run([], everything, held, [*failures, *result.failures])
        return PollResult(result.processed, result.duplicates, settled.failures)

    # -- the transaction -----------------------------------------------------------------

    def _transaction(
        self,
        keyed: Sequence[Record],
        everything: Sequence[Record],
        held: Mapping[Position, int],
        failures: list[Failure],
    ) -> PollResult:
        savepoints = bool(failures)
        failed = {_where(f.record) for f in failures}
        to_run = [r for r in keyed if _where(r) not in failed]
        result = PollResult()
        with new_session(self.session_factory) as session, owned_transaction(session):
            new = self.inbox.claim_batch(session, to_run, self.consumer_name, key=_message_id)
            claimed = {id(r) for r in new}
            result.duplicates = [r for r in to_run if id(r) not in claimed]
            counts = self.attempts.read(session, [_message_id(r) for r in new])
            cleared: list[str] = []
            for record in new:
                stored = counts.get(_message_id(record), 0)
                if stored:  # a delivery's count is 1 unless an attempt failed before
                    record = record.counted(stored + 1)
                if self._handle(session, record, savepoints, failures):
                    result.processed.append(record)
                    if stored:
                        cleared.append(_message_id(record))
            for failure in failures:
                if failure.dead:  # its dead letter carries the count: a replay starts anew
                    cleared.append(_message_id(failure.record))
                    continue
                self.attempts.record(
                    session,
                    _message_id(failure.record),
                    failure.record.delivery.delivery_count,
                    f"{type(failure.error).__name__}: {failure.error}",
                )
            self.attempts.clear(session, cleared)
            if self.offsets is not None:
                retried = [f.record for f in failures if not f.dead]
                self.offsets.advance(session, next_offsets(everything, retried, held))
        result.failures = list(failures)
        return result

    def _handle(
        self, session: Session, record: Record, savepoints: bool, failures: list[Failure]
    ) -> bool:
        """Run the handler of one newly claimed record; True if it succeeded. Without
        savepoints a failure ends the transaction; with them it is rolled back to the
        record's savepoint, its claim deleted, and the record recorded as failed. A
        handler that ended the poll's transaction (:func:`~sa_inbox.guard.check_intact`)
        fails the transaction in both cases."""
        nested = savepoint(session) if savepoints else None
        try:
            delivery = record.delivery
            if delivery.delivery_count > self.max_deliveries:
                raise DeliveryLimitExceeded(
                    f"delivered {delivery.delivery_count} times, more than max_deliveries="
                    f"{self.max_deliveries}"
                )
            self.handler(session, delivery)
            check_intact(session)
            if nested is not None:
                nested.commit()
            return True
        except ConfigurationError:
            raise
        except HandlerEndedTransaction as exc:
            # the poll's transaction is over, savepoints and claims with it
            raise _HandlerFailed(record, exc) from exc
        except Exception as exc:
            if is_unavailable(exc) or is_transient(exc, None):
                raise  # the database's, not the record's: the whole poll runs again
            if nested is None:
                raise _HandlerFailed(record, exc) from exc
            nested.rollback()
            self._unclaim(session, record)
            failures.append(self._failed(record, exc))
            return False

    def _unclaim(self, session: Session, record: Record) -> None:
        """Delete this transaction's own claim of ``record`` (its handler failed)."""
        table = self.inbox.table
        session.execute(
            table.delete().where(
                table.c.message_id == _message_id(record),
                table.c.consumer_name == self.consumer_name,
            )
        )

    def _failed(self, record: Record, error: BaseException) -> Failure:
        """A failed attempt: dead-lettered now at the limit (the publish awaited), else
        retried."""
        dead = record.delivery.delivery_count >= self.max_deliveries
        failure = Failure(record, error, dead)
        if dead:
            self.dead_letter(record, DeadLetterReason.DELIVERY_LIMIT, _detail(failure.settlement()))
        return failure


def _message_id(record: Record) -> str:
    message_id = record.delivery.message_id
    assert message_id is not None  # only keyed records reach the transaction
    return message_id


def _where(record: Record) -> tuple[str, int, int]:
    """The record's coordinates, which tell two records of one poll apart."""
    return record.topic, record.partition, record.offset
