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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, overload

from sqlalchemy.orm import Session
from typing_extensions import deprecated

from .claim import Inbox
from .exc import ConfigurationError, DuplicateMessage
from .handlers import call_handler, check_handler
from .retry import DEFAULT_MAX_ATTEMPTS, check_max_attempts, run_in_transaction

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


@overload
@deprecated(
    "handle() cannot await an async def handler: it is refused (FAILED, nacked); use a "
    "synchronous handler"
)
def handle(
    session_factory: Callable[[], Session],
    inbox: Inbox,
    message_id: str,
    consumer_name: str,
    handler: Callable[[Session], Awaitable[Any]],
    *,
    ack: Callable[[], Any],
    nack: Callable[[], Any],
    max_attempts: int = ...,
    **claim_extra: Any,
) -> Result: ...


@overload
def handle(
    session_factory: Callable[[], Session],
    inbox: Inbox,
    message_id: str,
    consumer_name: str,
    handler: Callable[[Session], object],
    *,
    ack: Callable[[], Any],
    nack: Callable[[], Any],
    max_attempts: int = ...,
    **claim_extra: Any,
) -> Result: ...


def handle(
    session_factory: Callable[[], Session],
    inbox: Inbox,
    message_id: str,
    consumer_name: str,
    handler: Callable[[Session], object],
    *,
    ack: Callable[[], Any],
    nack: Callable[[], Any],
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    **claim_extra: Any,
) -> Result:
    """Process one delivery exactly once in effect: claim, handle, commit, then ack.

    :param session_factory: a sessionmaker (called with no arguments, returning a new
        Session); each attempt runs in a new session.
    :param inbox: the inbox to claim in.
    :param message_id: the producer-assigned id of the message.
    :param consumer_name: this consumer's name.
    :param handler: the business change, ``handler(session)``, a synchronous callable; it
        must not commit, and it may run more than once if the transaction is retried. An
        ``async def`` handler is refused (type checkers flag it through a deprecated
        overload: mypy with ``--enable-error-code deprecated``, pyright by default).
    :param ack: acknowledges the delivery to the broker; called only after the commit (or for
        a duplicate). An exception from it propagates: the broker will redeliver, and the
        redelivery will be a duplicate.
    :param nack: rejects the delivery for redelivery; called after the rollback when the
        handler or the database fails.
    :param max_attempts: attempts for transient errors (deadlock, serialization failure).
    :param claim_extra: ``message_type``, ``correlation_id``, ``payload_hash``.
    :returns: a :class:`Result`. Exceptions from ``handler`` are caught, nacked and returned
        as :attr:`Outcome.FAILED`, except ``BaseException``s that are not ``Exception``
        (KeyboardInterrupt, SystemExit), which nack and propagate. An exception from
        ``nack`` propagates (chained to the handler's error).
    :raises InvalidMessageId: for an invalid id, before anything is sent (not acked: the
        caller decides whether such a message goes to a dead-letter queue).
    :raises InvalidRetryArgument: if ``max_attempts`` is not an int >= 1, before anything.
    :raises ConfigurationError: raised to the caller with **neither ack nor nack** (the same
        error would fail every message; nacking would loop the queue through it), nothing
        committed: :class:`~sa_inbox.exc.InvalidHandler` (not callable as
        ``handler(session)``), :class:`~sa_inbox.exc.InvalidSessionFactory`,
        :class:`~sa_inbox.exc.MissingTable` (the inbox's or a business table or column),
        :class:`~sa_inbox.exc.AutocommitConnection` (SQLAlchemy's or the driver's
        autocommit).

    What is refused as a failed delivery (:attr:`Outcome.FAILED` and a nack, never an ack
    of a change that did not commit, nothing committed):

    * an ``async def`` handler, or a handler whose result is awaitable
      (:class:`~sa_inbox.exc.AsyncHandlerError`): its body would never run;
    * a handler that commits or rolls back the transaction holding the claim, through the
      Session, its connection or a nested Session on that connection
      (:class:`~sa_inbox.exc.HandlerEndedTransaction`; see :mod:`sa_inbox.guard`). A raw
      DBAPI ``commit()`` or a textual ``COMMIT`` bypasses SQLAlchemy and cannot be
      intercepted; writes through a second Session are outside the guarantee.
    """

    def unit_of_work(session: Session) -> Outcome:
        if not inbox.claim(session, message_id, consumer_name, **claim_extra):
            return Outcome.DUPLICATE
        call_handler(handler, session)
        return Outcome.PROCESSED

    inbox.validate(message_id, consumer_name, **claim_extra)
    check_max_attempts(max_attempts)
    try:
        check_handler(handler, ("session",))
        outcome = run_in_transaction(session_factory, unit_of_work, max_attempts=max_attempts)
    except DuplicateMessage:
        outcome = Outcome.DUPLICATE
    except ConfigurationError:
        logger.error(
            "message %s: configuration error, neither acked nor nacked",
            message_id,
            extra={"action": "error", "message_id": message_id},
        )
        raise
    except Exception as exc:
        logger.warning(
            "message %s (consumer %s): handler failed, nacking: %s: %s",
            message_id,
            consumer_name,
            type(exc).__name__,
            exc,
            extra={"action": "nack", "message_id": message_id, "consumer_name": consumer_name},
            exc_info=True,
        )
        nack()
        return Result(Outcome.FAILED, message_id, exc)
    except BaseException:
        nack()
        raise
    ack()
    return Result(outcome, message_id)
