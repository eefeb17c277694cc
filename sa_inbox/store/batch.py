"""The worker's batch transaction mode: one leased batch, one transaction.

``Worker(..., transaction="batch")`` (and :class:`~sa_inbox.asyncio.AsyncWorker`, which runs
the same code in greenlets) handles the messages of one lease in ONE transaction
(:meth:`~sa_inbox.store.InboxStore.complete_batch`): one ``UPDATE … SET status='done' WHERE
id IN (…) AND status='processing' AND claimed_by=:token`` for the whole batch (the lease-token
guard; built once per backend, ``id = ANY(:ids)`` with one array parameter on PostgreSQL),
each handler in turn, one COMMIT. A worker killed mid-batch commits nothing of it: the
rows stay ``processing`` with their attempt counted at lease, and are leased again after the
visibility timeout.

**One failing message fails alone.** The batch first runs without savepoints (the fast path:
no per-message round trips). When a handler raises, the transaction is rolled back as a
whole, and the batch is re-run *with a savepoint per message* (``session.begin_nested()``)
and without the failed message, which is recorded as a failed attempt (``pending`` after
its back-off, or ``dead``) in that same transaction. So the failing handler runs once per
attempt; any further failure in the re-run is isolated by its savepoint and causes no third
run; the others commit together.

Why this hybrid, by measurement (``benchmarks/batch_savepoints.py``, one worker, batches of
100, the variants alternating, 3 rounds of 2,000 messages, medians, load average 4-5 on 2
cores; ``benchmarks/RESULTS.md``, "Batch transaction mode"): a savepoint costs two more
statements per message (``SAVEPOINT`` and ``RELEASE SAVEPOINT``: PostgreSQL manual,
"SAVEPOINT"; MariaDB manual, "SAVEPOINT"), and through the ORM session
(``session.begin_nested()`` flushes first) that was, per message:

============  ==========================  ==================================
database      no-op handler               one-insert handler
============  ==========================  ==================================
PostgreSQL    131 → 204 µs (+73, x1.55)   478 → 1,120 µs (+641, x2.34)
MariaDB       216 → 232 µs (+16, x1.07)   399 → 648 µs (+248, x1.62)
============  ==========================  ==================================

A re-run costs the handlers before the failed message once more, plus a rollback: at most
one batch's worth of handlers (the table's first column), and only when a handler fails,
which is rare (a bug or a poisoned message, retried only after its back-off). Savepoints
always would pay up to x2.3 on every message for that rare case; the hybrid pays it only in
the re-run of a batch that had a failure, where the savepoints guarantee no third run. A
handler with outside side effects (an HTTP call, an e-mail) sees them repeated for the
messages before the failed one in that re-run, and after a deadlock: use the default
``transaction="message"`` for such handlers.

**Transient errors** (a deadlock, a serialization failure, a busy SQLite), from any
statement of the batch, a handler's included, or the commit: the whole transaction is rolled
back and the batch is re-run, counted in :attr:`~sa_inbox.store.WorkerSummary.batch_reruns`,
never as an attempt nor a failure. Verified on the live servers: a MariaDB 10.11 deadlock
victim loses its whole transaction, savepoints included (``ROLLBACK TO SAVEPOINT`` then
fails with 1305 "SAVEPOINT does not exist"; MySQL manual, "InnoDB Error Handling": "A
transaction deadlock causes InnoDB to roll back the entire transaction"), so a savepoint
cannot contain it; PostgreSQL 15 keeps the transaction up to the savepoint (manual,
"ROLLBACK TO SAVEPOINT"; "Explicit Locking", "Deadlocks"), but the batch is re-run there
too, one rule for every database. After :data:`BATCH_RERUNS` re-runs, or on any other error
of the batch transaction itself (a handler that ended the transaction, a lost connection),
the batch is processed one transaction per message, exactly as ``transaction="message"``
would: each message then gets its own transient re-runs, and a failure is its own.

**Row locks.** The batch's rows are leased with ``FOR UPDATE SKIP LOCKED`` in the lease's
own short transaction (PostgreSQL manual, SELECT, "The Locking Clause"; MariaDB manual,
"SELECT ... SKIP LOCKED"), then locked again by the batch's ``UPDATE`` until it commits;
that ``UPDATE`` reaches them by primary key (``FORCE INDEX (PRIMARY)`` on MariaDB, see
:meth:`~sa_inbox.dialects.store_claim.StoreClaimDialect.by_primary_key`): through a
secondary index, InnoDB's next-key
locks at the handler session's REPEATABLE READ made every other worker's lease wait for
the whole batch (measured: 6 s, the batch's length, against 0.05 s).

**Stops.** A stop request (``Worker.stop``, SIGTERM) is checked before each handler: the
messages not started are given back (``pending``, attempt not counted) in the batch's own
transaction, and the ones done commit. A batch in hand is never given back from outside
(its rows are locked by its transaction): a shutdown timeout abandons it to the visibility
timeout.

**The default stays** ``"message"``. Measured (``benchmarks/RESULTS.md``, "Batch
transaction mode"), ``"batch"`` drained faster in every cell: x4.4-9.7 with a no-op handler,
x1.4-5.1 with a ledger insert and a balance update, on PostgreSQL 15 and MariaDB 10.11 with
1 and 4 worker processes, and no deadlock reached the user. Speed does not decide a
default, though, because the costs are not in the figures: a batch holds its rows' locks
(the store's and every business row its handlers touch) until the whole batch commits, so
a slow handler delays its batch and every transaction waiting on those rows; and every
handler of a re-run batch runs again, so a handler with outside side effects (an HTTP call,
an e-mail) repeats them. ``"message"`` is right for every handler; ``"batch"`` is the
choice for short, database-only handlers.
"""

from __future__ import annotations

import datetime
import logging
import random
from collections.abc import Callable, Sequence
from typing import Protocol

from ..exc import ConfigurationError, HandlerFailed
from ..hooks import InboxHooks
from .protocol import BatchFailure, BatchResult, Handler, MessageStore, StoredMessage
from .waiting import Waiting

__all__ = ["BATCH_RERUNS", "SAVEPOINTS_FIRST", "BatchWorker", "commit_batch"]

logger = logging.getLogger(__name__)

#: Re-runs of a batch transaction after a deadlock or serialization failure, before its
#: messages are processed one transaction each.
BATCH_RERUNS = 5
#: Whether the first run of a batch already has a savepoint per message (see the module's
#: docstring: it does not).
SAVEPOINTS_FIRST = False


class BatchWorker(Protocol):
    """What :func:`commit_batch` needs of its worker (:class:`~sa_inbox.store.Worker` has
    it): the store, handler, clock, hooks and waiting it runs the batch with, whether to
    stop, when a failed message may be retried, and its counters."""

    @property
    def store(self) -> MessageStore: ...
    @property
    def handler(self) -> Handler: ...
    @property
    def clock(self) -> Callable[[], datetime.datetime]: ...
    @property
    def hooks(self) -> InboxHooks: ...
    @property
    def waiting(self) -> Waiting: ...

    def stopping(self) -> bool: ...
    def retry_at(self, message: StoredMessage) -> datetime.datetime | None: ...
    def count(self, key: str, amount: int = 1) -> None: ...


def commit_batch(
    worker: BatchWorker, token: str, batch: Sequence[StoredMessage]
) -> BatchResult | None:
    """Run one leased batch's transaction until it commits: re-run without a failed handler's
    message (with savepoints), or after a transient error (at most :data:`BATCH_RERUNS`
    times; each counted as ``batch_reruns`` and told to the hooks as a retry).

    :param worker: the worker (its store, handler, clock, hooks, waiting, counters).
    :param token: the batch's lease token.
    :param batch: the leased messages, in lease order.
    :returns: what the committed transaction did; ``None`` if it failed otherwise, or
        transiently once too often (logged): process the batch one transaction per message.
    :raises ConfigurationError: from the store or a handler (nothing committed).
    """
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
                retry_at=worker.retry_at,
                stopping=worker.stopping,
            )
        except ConfigurationError:
            raise
        except HandlerFailed as exc:
            failed.append(BatchFailure(exc.message, exc.error, worker.retry_at(exc.message)))
            _log_rerun(token, "a handler raised; re-run without it, with savepoints", exc)
        except Exception as exc:
            if reruns == BATCH_RERUNS or not worker.store.is_transient(exc):
                _log_fall_back(token, batch, exc)
                return None
            reruns += 1
            _log_rerun(token, "transient error; re-run", exc)
            worker.hooks.retried(batch[0].consumer_name, attempt=reruns)
            worker.waiting.sleep(random.uniform(0, 0.01 * 2**reruns))
        worker.count("batch_reruns")


def _log_fall_back(token: str, batch: Sequence[StoredMessage], exc: BaseException) -> None:
    logger.warning(
        "batch %s: its transaction failed (%s: %s); processing its %d messages one "
        "transaction each",
        token,
        type(exc).__name__,
        exc,
        len(batch),
        extra={"action": "batch_fallback", "token": token, "error": str(exc)},
    )


def _log_rerun(token: str, why: str, exc: BaseException) -> None:
    logger.info(
        "batch %s: %s: %s: %s",
        token,
        why,
        type(exc).__name__,
        exc,
        extra={"action": "batch_rerun", "token": token, "error": str(exc)},
    )
