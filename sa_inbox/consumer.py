"""The handler runner: begin, claim, business change, commit, then ack.

This is the fixed order that makes at-least-once delivery exactly-once in effect:

1. begin a transaction;
2. claim ``(message_id, consumer_name)``; if an earlier delivery committed it, this delivery is
   a *duplicate*: ack it without running the handler;
3. run the handler's business change in the same transaction;
4. commit (the claim and the change become durable together);
5. ack, only after the commit. A crash between 4 and 5 makes the broker redeliver, and the
   redelivery is a duplicate.

An exception before the commit rolls everything back (nothing is recorded) and nacks, so the
broker redelivers. Serialization failures and deadlocks are retried first.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from .claim import Inbox
from .exc import DuplicateMessage
from .retry import DEFAULT_MAX_ATTEMPTS, run_in_transaction

__all__ = ["Outcome", "Result", "handle"]

logger = logging.getLogger(__name__)


class Outcome(enum.Enum):
    """What happened to one delivery."""

    #: The handler ran and its change committed; the message was acked.
    PROCESSED = "processed"
    #: An earlier delivery had committed it; acked without running the handler.
    DUPLICATE = "duplicate"
    #: The handler (or the database) failed; rolled back and nacked.
    FAILED = "failed"


@dataclass(frozen=True)
class Result:
    """The outcome of :func:`handle` for one delivery.

    :param outcome: processed, duplicate or failed.
    :param message_id: the delivery's message id.
    :param error: the exception, for :attr:`Outcome.FAILED`; else None.
    """

    outcome: Outcome
    message_id: str
    error: BaseException | None = None


def handle(
    session_factory: Callable[[], Session],
    inbox: Inbox,
    message_id: str,
    consumer_name: str,
    handler: Callable[[Session], Any],
    *,
    ack: Callable[[], Any],
    nack: Callable[[], Any],
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    **claim_extra: Any,
) -> Result:
    """Process one delivery exactly once in effect: claim, handle, commit, then ack.

    :param session_factory: a sessionmaker; each attempt runs in a new session.
    :param inbox: the inbox to claim in.
    :param message_id: the producer-assigned id of the message.
    :param consumer_name: this consumer's name.
    :param handler: the business change, ``handler(session)``; it must not commit, and it
        may run more than once if the transaction is retried.
    :param ack: acknowledges the delivery to the broker; called only after the commit (or for
        a duplicate). An exception from it propagates: the broker will redeliver, and the
        redelivery will be a duplicate.
    :param nack: rejects the delivery for redelivery; called after the rollback when the
        handler or the database fails.
    :param max_attempts: attempts for transient errors (deadlock, serialization failure).
    :param claim_extra: ``message_type``, ``correlation_id``, ``payload_hash``.
    :returns: a :class:`Result`. Exceptions from ``handler`` are caught, nacked and returned
        as :attr:`Outcome.FAILED`, except ``BaseException``s that are not ``Exception``
        (KeyboardInterrupt, SystemExit), which nack and propagate.
    :raises InvalidMessageId: for an invalid id, before anything is sent (not acked: the
        caller decides whether such a message goes to a dead-letter queue).
    :raises ValueError: if ``max_attempts`` < 1, before anything is sent.

    A handler that commits is refused (:class:`~sa_inbox.exc.UnsafeTransaction`, nothing
    committed) and one that rolls back is detected: both give :attr:`Outcome.FAILED` and a
    nack, never an ack of a message whose change did not commit. An exception from ``nack``
    propagates (chained to the handler's error).
    """

    def unit_of_work(session: Session) -> Outcome:
        if not inbox.claim(session, message_id, consumer_name, **claim_extra):
            return Outcome.DUPLICATE
        handler(session)
        return Outcome.PROCESSED

    inbox.validate(message_id, consumer_name, **claim_extra)
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, not {max_attempts}")
    try:
        outcome = run_in_transaction(session_factory, unit_of_work, max_attempts=max_attempts)
    except DuplicateMessage:
        outcome = Outcome.DUPLICATE
    except Exception as exc:
        logger.warning(
            "handler failed, nacking",
            extra={"action": "nack", "message_id": message_id},
            exc_info=True,
        )
        nack()
        return Result(Outcome.FAILED, message_id, exc)
    except BaseException:
        nack()
        raise
    ack()
    return Result(outcome, message_id)
