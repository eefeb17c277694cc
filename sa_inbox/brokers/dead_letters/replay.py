"""Count, list and replay the dead letters of one queue / stream, on any of the brokers.

The flow exists once, here; each broker's module (:mod:`.rabbitmq`, :mod:`.redis`,
:mod:`.nats`) opens its :class:`~.model.DeadLetterQueue` and does the broker's part of a
move. Every argument is checked before connecting.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from ...exc import DeadLetterQueueUnavailable, InvalidArgument, MissingExtra, SourceRefused
from ...stats import DeadLetterQueueStats
from .model import (
    DEFAULT_TIMEOUT,
    Choice,
    DeadLetter,
    DeadLetterQueue,
    ReplayResult,
    Tally,
    check_timeout,
)
from .target import DeadLetterTarget

__all__ = ["count", "open_queue", "peek", "replay", "sample"]

logger = logging.getLogger("sa_inbox.brokers.dead_letters")


@contextmanager
def open_queue(target: DeadLetterTarget, timeout: float) -> Iterator[DeadLetterQueue]:
    """The open :class:`~.model.DeadLetterQueue` of ``target`` for the ``with`` block,
    closed after it.

    :raises MissingExtra: if the broker's client library (its extra) is not installed.
    :raises DeadLetterQueueUnavailable: if the broker cannot be reached.
    """
    module = importlib.import_module(f"{__package__}.{target.broker}")
    queue: DeadLetterQueue = module.open_queue(target, timeout)
    try:
        yield queue
    finally:
        queue.close()


def count(url: str, queue: str, *, timeout: float = DEFAULT_TIMEOUT) -> int:
    """How many dead letters ``queue`` holds (RabbitMQ: ready ones; Redis ``XLEN``, 0 for a
    stream that does not exist yet; JetStream the stream's message count).

    :param url: the broker's URL (``amqp://``, ``redis://``, ``nats://``...).
    :param queue: the dead-letter queue / stream.
    :param timeout: seconds to connect and for each reply.
    :raises UnsupportedBroker: for another URL scheme.
    :raises InvalidArgument: for a bad name or timeout (before connecting).
    :raises DeadLetterQueueUnavailable: broker unreachable, RabbitMQ queue or NATS stream
        missing, Redis key that is no stream.
    """
    target = DeadLetterTarget.of(url, queue)
    with open_queue(target, check_timeout(timeout)) as dead:
        return dead.count()


def sample(
    targets: Iterable[DeadLetterTarget], *, timeout: float = DEFAULT_TIMEOUT
) -> list[DeadLetterQueueStats]:
    """Count each target's dead letters for ``sa-inbox stats``
    (:attr:`sa_inbox.stats.InboxStats.dead_letter_queues`): a target that cannot be read
    (unreachable, missing, its broker's extra not installed) gets its error instead of a
    count, never 0.

    :param targets: e.g. ``[DeadLetterTarget.parse("amqp://host/payments.dead-letter")]``.
    :param timeout: seconds to connect to each broker and for each reply.
    :raises InvalidArgument: for a bad timeout (before connecting).
    """
    seconds = check_timeout(timeout)
    found = []
    for target in targets:
        try:
            with open_queue(target, seconds) as dead:
                found.append(DeadLetterQueueStats(target.display, dead.count()))
        except DeadLetterQueueUnavailable as exc:
            found.append(DeadLetterQueueStats(target.display, None, exc.why))
        except MissingExtra as exc:
            found.append(DeadLetterQueueStats(target.display, None, str(exc)))
    return found


def peek(
    url: str,
    queue: str,
    *,
    reason: str | None = None,
    limit: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> list[DeadLetter]:
    """The dead letters of ``queue`` (of ``reason``; the first ``limit``), oldest first, read
    and left in place (RabbitMQ returns them when the reading channel closes; a quorum
    queue then counts one more delivery of each, which a replay does not carry over).

    :param reason: a :class:`~sa_inbox.brokers.DeadLetterReason` (or its value); None: all.
    :param limit: at most this many (int >= 1); None: all.
    :raises: as :func:`count`; :class:`~sa_inbox.exc.InvalidArgument` also for a bad
        reason or limit.
    """
    target = DeadLetterTarget.of(url, queue)
    choice = Choice.of(reason, limit)
    found: list[DeadLetter] = []
    with open_queue(target, check_timeout(timeout)) as dead:
        for letter in dead.scan():
            if choice.takes(letter):
                found.append(letter)
                if choice.full(len(found)):
                    break
    return found


def replay(
    url: str,
    queue: str,
    *,
    dry_run: bool,
    reason: str | None = None,
    limit: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> ReplayResult:
    """Move dead letters back to the queue / stream / subject each came from, with its key.

    Each dead letter of the queue / stream (Redis and NATS: those it held when the replay
    started; RabbitMQ: until it answers empty, never one this replay moved that failed
    again, so a replay ends), of ``reason`` (all for None), up to ``limit``, oldest first,
    is published to its source with its original
    properties, headers (or fields) and body, minus what the adapter or the broker added
    (the reason headers, ``x-delivery-count``, ``x-death``), and **removed only once the
    broker confirmed that publish**: RabbitMQ publisher confirms then ``basic.ack``; Redis
    ``XADD`` and ``XDEL`` in one Lua script (atomic); JetStream the PubAck then
    ``STREAM.MSG.DELETE``. A replay killed in between leaves the message in both places, so
    the next replay moves it again and the inbox skips the second copy as a duplicate; it
    never loses one. A message its consumer had already applied (a dead letter of a
    duplicate) is skipped by the inbox too.

    A dead letter whose source refuses it (no such queue, no stream for the subject,
    JetStream dropping a ``Nats-Msg-Id`` it saw inside the stream's duplicate window) is left
    in place and listed in :attr:`~.model.ReplayResult.refused`; one that names no source
    too (:attr:`~.model.ReplayResult.unsourced`).

    :param url: the broker's URL (``amqp://``, ``redis://``, ``nats://``...).
    :param queue: the dead-letter queue / stream.
    :param dry_run: True: only count what would be moved (nothing moves); False: move.
    :param reason: a :class:`~sa_inbox.brokers.DeadLetterReason` (or its value); None: all.
    :param limit: at most this many moved (int >= 1); None: all.
    :param timeout: seconds to connect and for each reply.
    :returns: the :class:`~.model.ReplayResult`.
    :raises UnsupportedBroker: for another URL scheme.
    :raises InvalidArgument: for a bad name, ``dry_run``, reason, limit or timeout
        (before connecting).
    :raises DeadLetterQueueUnavailable: broker unreachable, queue missing, or the connection
        broke mid-replay (what was moved is moved; run it again for the rest).
    """
    target = DeadLetterTarget.of(url, queue)
    choice = Choice.of(reason, limit)
    if not isinstance(dry_run, bool):
        raise InvalidArgument(f"dry_run must be True or False, not {dry_run!r}")
    tally = Tally()
    with open_queue(target, check_timeout(timeout)) as dead:
        for letter in dead.scan():
            _take(dead, letter, choice, tally, dry_run)
            if choice.full(tally.chosen.total()):
                break
    result = tally.result(target, dry_run)
    logger.info(
        "dead letters of %s: %s %d of %d chosen",
        result.queue,
        "would replay" if dry_run else "replayed",
        result.chosen if dry_run else result.moved,
        result.chosen,
        extra={"action": "replay", "moved": result.moved, "chosen": result.chosen},
    )
    return result


def _take(
    dead: DeadLetterQueue, letter: DeadLetter, choice: Choice, tally: Tally, dry_run: bool
) -> None:
    """One dead letter of the scan: passed over, left (no source), counted or moved."""
    if not choice.takes(letter):
        tally.passed_over += 1
        return
    if letter.source is None:
        tally.unsourced += 1
        return
    tally.choose(letter)
    if dry_run:
        return
    try:
        if dead.move(letter):
            tally.moved += 1
        else:
            tally.gone += 1
    except SourceRefused as exc:
        tally.refused.append(f"{letter.ref} ({letter.message_id or 'no key'}): {exc}")
        logger.warning("dead letter %s not replayed: %s", letter.ref, exc)
