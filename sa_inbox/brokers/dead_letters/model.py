"""What every broker's dead-letter reader shares: a :class:`DeadLetter`, the replay's
choice and result, and the :class:`DeadLetterQueue` protocol each broker implements."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...exc import InvalidArgument, SourceRefused
from ...validation import positive_int, positive_seconds
from ..delivery import DeadLetterReason
from .target import DeadLetterTarget

__all__ = [
    "DEFAULT_TIMEOUT",
    "Choice",
    "DeadLetter",
    "DeadLetterQueue",
    "ReplayResult",
    "SourceRefused",
    "Tally",
    "check_timeout",
]

#: Seconds to connect to the broker and to wait for each of its replies.
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter, as its queue / stream holds it.

    :param ref: where it is: the Redis entry id, the JetStream stream sequence, RabbitMQ's
        delivery tag on the reading channel (RabbitMQ has no address for a queued message).
    :param message_id: the producer's key as the dead letter records it (AMQP
        ``message_id`` property; NATS ``Sa-Inbox-Message-Id``; Redis the ``message_id``
        field), or None.
    :param reason: the :class:`~sa_inbox.brokers.DeadLetterReason` value the adapter
        recorded, or None for a message the broker dead-lettered by itself (a
        ``basic.reject``, FastStream's and Celery's dead letters, an ``x-delivery-limit``).
    :param detail: the adapter's one-line detail, or what the broker recorded (``x-death``).
    :param source: the queue / stream / subject it came from and goes back to, or None when
        the dead letter does not say (it is then never moved).
    :param body: the body, bytes (Redis: the body field, else ``b""``).
    :param headers: its headers (Redis: its fields), as the client returned them.
    """

    ref: str
    message_id: str | None
    reason: str | None
    detail: str | None
    source: str | None
    body: bytes
    headers: Mapping[str, Any]
    #: The reader's own handle on the message (a pika frame, an entry's fields, a raw
    #: stream message), for :meth:`DeadLetterQueue.move`.
    handle: Any = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields above, the body's length instead of the body."""
        return {
            "ref": self.ref,
            "message_id": self.message_id,
            "reason": self.reason,
            "detail": self.detail,
            "source": self.source,
            "body_bytes": len(self.body),
        }


class DeadLetterQueue(Protocol):
    """One broker's dead-letter queue / stream, open (``sa_inbox.brokers.dead_letters.<broker>``
    each implement it). Client errors are raised as
    :class:`~sa_inbox.exc.DeadLetterQueueUnavailable`."""

    target: DeadLetterTarget

    def count(self) -> int:
        """The dead letters it holds (RabbitMQ: ready ones; unacked ones are in a reader's
        hands)."""
        ...

    def scan(self) -> Iterator[DeadLetter]:
        """The dead letters it holds, oldest first, read without removing them; never the
        ones this reader moved and that were dead-lettered again (Redis and NATS: only
        those held when called; RabbitMQ: until the queue is empty)."""
        ...

    def move(self, letter: DeadLetter) -> bool:
        """Publish ``letter`` to its source, confirmed by the broker, then remove it.

        :returns: False if another reader removed it meanwhile (a copy may then have been
            published twice: a duplicate the inbox skips).
        :raises SourceRefused: the source refused it; it is left in place.
        """
        ...

    def close(self) -> None:
        """Close the connection (RabbitMQ returns the dead letters read and not moved)."""
        ...


@dataclass(frozen=True)
class Choice:
    """Which dead letters a list or a replay takes: those of ``reason`` (all for None), at
    most ``limit`` (all for None).

    :raises InvalidArgument: for a reason that is no
        :class:`~sa_inbox.brokers.DeadLetterReason` (or its value), a limit that is not an
        int >= 1.
    """

    reason: DeadLetterReason | None = None
    limit: int | None = None

    @classmethod
    def of(cls, reason: object, limit: object) -> Choice:
        return cls(_reason(reason), _limit(limit))

    def takes(self, letter: DeadLetter) -> bool:
        return self.reason is None or letter.reason == self.reason.value

    def full(self, taken: int) -> bool:
        return self.limit is not None and taken >= self.limit


def _reason(value: object) -> DeadLetterReason | None:
    if value is None or isinstance(value, DeadLetterReason):
        return value
    if isinstance(value, str):
        try:
            return DeadLetterReason(value)
        except ValueError:
            pass
    choices = ", ".join(r.value for r in DeadLetterReason)
    raise InvalidArgument(f"reason must be one of {choices} (or None), not {value!r}")


def _limit(value: object) -> int | None:
    return None if value is None else positive_int(value, "limit", InvalidArgument)


def check_timeout(value: object) -> float:
    """``value`` as seconds if it is a finite number > 0.

    :raises InvalidArgument: otherwise.
    """
    seconds = positive_seconds(value, "timeout", InvalidArgument)
    if not math.isfinite(seconds):
        raise InvalidArgument(f"timeout must be a finite number of seconds: {value!r}")
    return seconds


@dataclass(frozen=True)
class ReplayResult:
    """What :func:`~sa_inbox.brokers.dead_letters.replay` did (or would do: ``dry_run``).

    :param queue: the dead-letter queue, as ``<broker URL>/<queue>`` (password hidden).
    :param dry_run: nothing was moved; ``chosen`` is what a replay would move.
    :param chosen: dead letters the reason and limit chose that name a source.
    :param moved: those published to their source (confirmed) and removed; 0 on a dry run.
    :param reasons: ``chosen`` per reason (``"unknown"``: none recorded).
    :param sources: ``chosen`` per source queue / stream / subject.
    :param passed_over: dead letters of other reasons the replay read (it stops reading
        at the limit): left in place.
    :param unsourced: dead letters the reason chose that name no source: left in place.
    :param refused: one line per chosen dead letter its source refused: left in place.
    :param gone: chosen dead letters another reader removed meanwhile.
    """

    queue: str
    dry_run: bool
    chosen: int
    moved: int
    reasons: dict[str, int]
    sources: dict[str, int]
    passed_over: int
    unsourced: int
    refused: list[str]
    gone: int

    @property
    def complete(self) -> bool:
        """Whether every chosen dead letter was moved (or, on a dry run, could be tried)."""
        return not self.refused and not self.unsourced

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``would_replay`` (dry run) or ``replayed``, and the counts."""
        head = {"would_replay": self.chosen} if self.dry_run else {"replayed": self.moved}
        return {
            **head,
            "queue": self.queue,
            "dry_run": self.dry_run,
            "chosen": self.chosen,
            "reasons": self.reasons,
            "sources": self.sources,
            "passed_over": self.passed_over,
            "unsourced": self.unsourced,
            "refused": self.refused,
            "gone": self.gone,
        }


@dataclass
class Tally:
    """The counts of a replay as it goes."""

    chosen: Counter[tuple[str, str]] = field(default_factory=Counter)
    moved: int = 0
    passed_over: int = 0
    unsourced: int = 0
    refused: list[str] = field(default_factory=list)
    gone: int = 0

    def choose(self, letter: DeadLetter) -> None:
        self.chosen[(letter.reason or "unknown", letter.source or "")] += 1

    def result(self, queue: DeadLetterTarget, dry_run: bool) -> ReplayResult:
        reasons: Counter[str] = Counter()
        sources: Counter[str] = Counter()
        for (reason, source), n in self.chosen.items():
            reasons[reason] += n
            sources[source] += n
        return ReplayResult(
            queue=queue.display,
            dry_run=dry_run,
            chosen=self.chosen.total(),
            moved=self.moved,
            reasons=dict(sorted(reasons.items())),
            sources=dict(sorted(sources.items())),
            passed_over=self.passed_over,
            unsourced=self.unsourced,
            refused=self.refused,
            gone=self.gone,
        )
