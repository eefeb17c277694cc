"""What a worker run did: :class:`WorkerSummary`, and why a run ends (its ``reason``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from .protocol import LOST, RELEASED, RETRY
from .schema import DEAD, DONE

__all__ = ["EMPTY", "ERROR", "MAX_MESSAGES", "MAX_SECONDS", "STOPPED", "WorkerSummary"]

#: Why :meth:`~sa_inbox.store.Worker.run` returned (:attr:`WorkerSummary.reason`).
EMPTY, STOPPED, MAX_MESSAGES, MAX_SECONDS, ERROR = (
    "empty",
    "stopped",
    "max_messages",
    "max_seconds",
    "error",
)

#: The :attr:`~sa_inbox.store.Worker.stats` key of each :class:`WorkerSummary` field.
_STAT_KEYS = {
    "processed": DONE,
    "retried": RETRY,
    "dead": DEAD,
    "lost": LOST,
    "released": RELEASED,
    "errors": "errors",
    "transient_retries": "transient_retries",
    "batch_reruns": "batch_reruns",
    "reaped_dead": "reaped_dead",
}


@dataclass(frozen=True)
class WorkerSummary:
    """What a worker did: the result of :meth:`~sa_inbox.store.Worker.run` (and
    :attr:`~sa_inbox.store.Worker.summary`).

    :param processed: messages whose handler committed with ``done``
        (:attr:`~sa_inbox.store.Worker.stats` key ``"done"``).
    :param retried: failed attempts sent back to ``pending`` after their back-off
        (``"retry"``).
    :param dead: failed attempts that used up ``max_attempts`` (``"dead"``).
    :param lost: messages whose lease had expired and been taken by another worker;
        nothing ran (``"lost"``).
    :param released: leased messages given back unstarted on a stop (``"released"``).
    :param errors: errors of the worker itself (not of a handler), logged and survived: a
        lease or record that failed (database unreachable), an ``on_message`` or
        ``on_lease`` hook that raised.
    :param transient_retries: transactions re-run at once after a deadlock, serialization
        failure or busy database (a message's, or a lease's).
    :param batch_reruns: batch transactions (``transaction="batch"``) rolled back and run
        again: after a deadlock or serialization failure, or, without savepoints, after a
        handler raised (the batch re-runs without that message, recorded as failed). Not
        attempts: no message's ``attempts`` changes, and no failure is recorded for them.
    :param reaped_dead: abandoned leases the reaper moved to ``dead``.
    :param reason: why :meth:`~sa_inbox.store.Worker.run` returned: :data:`EMPTY`, :data:`STOPPED`,
        :data:`MAX_MESSAGES`, :data:`MAX_SECONDS` or :data:`ERROR` (a configuration error,
        which ``run`` raises); ``None`` before the end of a run.
    """

    processed: int = 0
    retried: int = 0
    dead: int = 0
    lost: int = 0
    released: int = 0
    errors: int = 0
    transient_retries: int = 0
    batch_reruns: int = 0
    reaped_dead: int = 0
    reason: str | None = None

    @classmethod
    def from_stats(cls, stats: Mapping[str, int], reason: str | None = None) -> WorkerSummary:
        """The summary of :attr:`~sa_inbox.store.Worker.stats`-style counts (missing keys are 0)."""
        return cls(
            **{field: int(stats.get(key, 0)) for field, key in _STAT_KEYS.items()},
            reason=reason,
        )

    def as_dict(self) -> dict[str, int | str | None]:
        """The fields as a JSON-ready dict (what ``sa-inbox worker`` prints)."""
        return asdict(self)
