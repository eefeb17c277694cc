"""The worker's batch transaction mode: one claimed batch, one transaction.

``Worker(..., transaction="batch")`` (and :class:`~sa_inbox.asyncio.AsyncWorker`, which runs
the same code in greenlets) handles the messages of one claim in ONE transaction
(:meth:`~sa_inbox.store.InboxStore.complete_batch`): one ``UPDATE … SET status='done' WHERE
id IN (…) AND status='processing' AND claimed_by=:token`` for the whole batch (the claim-token
guard), each handler in turn, one COMMIT. A worker killed mid-batch commits nothing of it: the
rows stay ``processing`` with their attempt counted at claim, and are claimed again after the
visibility timeout.

**One failing message fails alone.** The batch first runs without savepoints (the fast path:
no per-message round trips). When a handler raises, the transaction is rolled back as a
whole, and the batch is re-run *with a savepoint per message* (``session.begin_nested()``)
and without the failed message, which is recorded as a failed attempt (``pending`` after
its back-off, or ``dead``) in that same transaction. So the failing handler runs once per
attempt; any further failure in the re-run is isolated by its savepoint and causes no third
run; the others commit together.

Why this hybrid, by measurement (``benchmarks/RESULTS.md``, "Batch transaction mode"): a
savepoint costs two extra round trips per message (``SAVEPOINT``, ``RELEASE SAVEPOINT``;
PostgreSQL manual, "SAVEPOINT"; MariaDB manual, "SAVEPOINT"), which cost more than a no-op
handler's whole share of a batch transaction (see the measured per-message figures there),
while a handler failure is rare (it is a bug or a poisoned message, and each one is
retried only after its back-off). Savepoints always would pay on every message for the
rare failure; a re-run without savepoints pays only when a message fails, once. A handler
with outside side effects (an HTTP call, an e-mail) sees them repeated for the messages
before the failed one in that rare re-run, and after a deadlock: use the default
``transaction="message"`` for such handlers.

**Transient errors** (a deadlock, a serialization failure, a busy SQLite), from any
statement of the batch, a handler's included, or the commit: the whole transaction is rolled
back (InnoDB rolls back the whole transaction of a deadlock victim, savepoints included:
MariaDB manual, "InnoDB Deadlocks"; PostgreSQL aborts the transaction: manual, "Serialization
Failure Handling") and the batch is re-run, counted in
:attr:`~sa_inbox.store.WorkerSummary.batch_reruns`, never as an attempt nor a failure. After
:data:`BATCH_RERUNS` re-runs, or on any other error of the batch
transaction itself (a handler that ended the transaction, a lost connection), the batch is
processed one transaction per message, exactly as ``transaction="message"`` would: each
message then gets its own transient re-runs, and a failure is its own.

**Stops.** A stop request (``Worker.stop``, SIGTERM) is checked before each handler: the
messages not started are given back (``pending``, attempt not counted) in the batch's own
transaction, and the ones done commit. A batch in hand is never given back from outside
(its rows are locked by its transaction): a shutdown timeout abandons it to the visibility
timeout.

**The trade-off of the mode** (the default stays ``"message"``): a batch transaction holds
its rows' locks (the store's and the handlers' business rows) until it commits, i.e. for the
whole batch's handlers; a slow handler delays every other message of its batch and any
transaction waiting on their business rows; and every message of a re-run batch runs its
handler again. Take ``"batch"`` for short, database-only handlers, where it multiplies the
drain rate (the figures in ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..exc import ConfigurationError
from .protocol import LOST, RELEASED, BatchFailure, BatchResult, HandlerFailed, StoredMessage
from .schema import DONE

if TYPE_CHECKING:
    from .worker import Worker

__all__ = ["BATCH_RERUNS", "SAVEPOINTS_FIRST", "run_batch"]

logger = logging.getLogger(__name__)

#: Re-runs of a batch transaction after a deadlock or serialization failure, before its
#: messages are processed one transaction each.
BATCH_RERUNS = 5
#: Whether the first run of a batch already has a savepoint per message (see the module's
#: docstring: measured, it does not).
SAVEPOINTS_FIRST = False


def run_batch(worker: Worker, token: str, batch: Sequence[StoredMessage]) -> None:
    """Process one claimed batch in one transaction and count and report its outcomes.

    :param worker: the worker (its store, handler, clock, counters and hooks).
    :param token: the batch's claim token.
    :param batch: the claimed messages, in claim order.
    :raises ConfigurationError: from the store or a handler: every thread stops, the batch
        is released (attempts not counted), nothing committed.
    :raises Exception: as :meth:`Worker._process_messages`, when the batch fell back to one
        transaction per message and a failure could not be recorded there.
    """
    if worker._stopping():
        worker._release(batch)
        return
    with worker._lock:  # locked by the batch transaction: never released from outside
        worker._unstarted[token] = ()
    result = _commit(worker, token, batch)
    if result is not None:
        _report(worker, result)


def _commit(worker: Worker, token: str, batch: Sequence[StoredMessage]) -> BatchResult | None:
    """Run the batch's transaction until it commits; ``None`` if it fell back to one
    transaction per message (done then)."""
    failed: list[BatchFailure] = []
    reruns = 0
    while True:
        try:
            return worker.store.complete_batch(
                batch,
                worker.handler,
                now=worker.clock(),
                savepoints=SAVEPOINTS_FIRST or bool(failed),
                failed=failed,
                retry_at=worker._retry_at,
                stopping=worker._stopping,
            )
        except ConfigurationError as exc:
            worker._configuration_error(exc)
            worker._release(batch, quietly=True)
            raise
        except HandlerFailed as exc:
            failed.append(BatchFailure(exc.message, exc.error, worker._retry_at(exc.message)))
            _log_rerun(worker, token, "a handler raised; re-run without it, with savepoints", exc)
        except Exception as exc:
            if reruns == BATCH_RERUNS or not worker.store.is_transient(exc):
                _fall_back(worker, token, batch, exc)
                return None
            reruns += 1
            _log_rerun(worker, token, "transient error; re-run", exc)
            worker._sleep(random.uniform(0, 0.01 * 2**reruns))
        worker._count("batch_reruns")


def _fall_back(
    worker: Worker, token: str, batch: Sequence[StoredMessage], exc: BaseException
) -> None:
    """Process the batch one transaction per message, after its transaction failed."""
    logger.warning(
        "batch %s: its transaction failed (%s: %s); processing its %d messages one "
        "transaction each",
        token,
        type(exc).__name__,
        exc,
        len(batch),
        extra={"action": "batch_fallback", "token": token, "error": str(exc)},
    )
    worker._process_messages(token, batch)


def _log_rerun(worker: Worker, token: str, why: str, exc: BaseException) -> None:
    logger.info(
        "batch %s: %s: %s: %s",
        token,
        why,
        type(exc).__name__,
        exc,
        extra={"action": "batch_rerun", "token": token, "error": str(exc)},
    )


def _report(worker: Worker, result: BatchResult) -> None:
    """Count, log and notify every outcome of a committed batch."""
    for message in result.done:
        worker._count(DONE)
        worker._notify(message, DONE)
    for failure in result.failed:
        outcome = worker._log_failure(failure.message, failure.error, failure.retry_at, True)
        worker._count(outcome)
        worker._notify(failure.message, outcome)
    for message in result.lost:
        worker._count(LOST)
        worker._notify(message, LOST)
    if result.released:
        worker._count(RELEASED, len(result.released))
        for message in result.released:
            worker._notify(message, RELEASED)
