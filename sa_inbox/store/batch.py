"""The worker's batch transaction mode: one leased batch, one transaction.

``Worker(..., transaction="batch")`` (and :class:`~sa_inbox.asyncio.AsyncWorker`) handles the
messages of one lease in one transaction (:meth:`~sa_inbox.store.InboxStore.complete_batch`:
one lease-token-guarded ``UPDATE … SET status='done'`` for the batch, each handler in turn,
one COMMIT). A worker killed mid-batch commits nothing of it: its rows are leased again after
the visibility timeout.

* A failing handler fails alone: the batch runs first without savepoints; when a handler
  raises, it is rolled back and re-run with a savepoint per message
  (``session.begin_nested()``) and without the failed message, which is recorded as a failed
  attempt in that transaction.
* A transient error (deadlock, serialization failure, busy SQLite) anywhere in the batch
  rolls it back and re-runs it, at most :data:`BATCH_RERUNS` times, counted as
  ``batch_reruns``, never as attempts (a MariaDB deadlock victim loses its savepoints too:
  MySQL manual, "InnoDB Error Handling"). After that, or on any other error of the batch
  transaction, the batch is processed one transaction per message.
* A stop request is checked before each handler; the messages not started are given back in
  the batch's own transaction.
* A re-run repeats the handlers before the failed message: a handler with outside side
  effects belongs in ``transaction="message"``, the default.

.. seealso:: ``docs/discussions/batch-transactions.md`` (why this hybrid, its row locks, why
   the default stays ``"message"``); ``benchmarks/RESULTS.md``, "Batch transaction mode".
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
