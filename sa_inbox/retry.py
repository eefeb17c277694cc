"""Run a unit of work in its own transaction, retrying it on transient database errors."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, SessionTransaction

from .dialects import claim_dialect_for
from .exc import HandlerEndedTransaction, TransientClaimError

__all__ = ["DEFAULT_MAX_ATTEMPTS", "is_transient", "owned_transaction", "run_in_transaction"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_ATTEMPTS = 5
#: First back-off in seconds; doubled per attempt, with full jitter.
DEFAULT_BACKOFF = 0.02
MAX_BACKOFF = 1.0


@contextmanager
def owned_transaction(session: Session) -> Iterator[SessionTransaction]:
    """Begin a transaction on ``session`` that only the end of this block may commit.

    The block's code (a handler, a unit of work) may use savepoints, but committing the
    transaction raises :class:`~sa_inbox.exc.UnsafeTransaction` at once (nothing is
    committed), and rolling it back is detected when the block ends and raises it too.
    The block's exit commits; an exception rolls back.

    :raises UnsafeTransaction: as described; the caller treats it as a failed attempt.
    """
    transaction = session.begin()
    committing = False

    def refuse_commit(committing_session: Session) -> None:
        # Fired for savepoint releases too; only the outermost commit is refused.
        if not committing and committing_session.get_nested_transaction() is None:
            raise HandlerEndedTransaction(
                "the handler must not commit: the runner commits after it returns"
            )

    event.listen(session, "before_commit", refuse_commit)
    try:
        with transaction:
            yield transaction
            if not transaction.is_active or session.get_transaction() is not transaction:
                raise HandlerEndedTransaction(
                    "the handler ended its transaction (rollback); its changes and the "
                    "claim were rolled back"
                )
            committing = True
    finally:
        event.remove(session, "before_commit", refuse_commit)


def _run_once(session: Session, work: Callable[[Session], T]) -> T:
    """``work(session)`` in one transaction that only this function may commit."""
    with session, owned_transaction(session):
        return work(session)


def is_transient(exc: BaseException, dialect_name: str) -> bool:
    """Whether ``exc`` means "roll back and retry the whole transaction".

    :param exc: an exception raised inside the unit of work.
    :param dialect_name: the SQLAlchemy dialect name of the session's engine.
    :returns: True for :class:`~sa_inbox.exc.TransientClaimError`, and for driver errors
        that the backend's classifier recognises as serialization failure or deadlock
        (a business statement can deadlock too, not only the claim).
    """
    if isinstance(exc, TransientClaimError):
        return True
    if isinstance(exc, DBAPIError):
        return claim_dialect_for(dialect_name).is_transient(exc)
    return False


def run_in_transaction(
    session_factory: Callable[[], Session],
    work: Callable[[Session], T],
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff: float = DEFAULT_BACKOFF,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``work(session)`` in a new session and transaction, committing on success.

    On a transient error (see :func:`is_transient`) the transaction is rolled back and
    ``work`` runs again in a fresh session, up to ``max_attempts`` times in all, sleeping a
    random time up to ``backoff * 2 ** (attempt - 1)`` seconds (at most 1 s) in between.
    Any other exception rolls back and propagates at once.

    :param session_factory: makes a new :class:`~sqlalchemy.orm.Session` (a sessionmaker).
    :param work: the unit of work; it must not commit. It may run several times, so it must
        not have effects outside the transaction.
    :param max_attempts: attempts in all, >= 1.
    :param backoff: first back-off in seconds.
    :param sleep: the sleep function (tests pass a fake).
    :returns: what ``work`` returned on the attempt that committed.
    :raises TransientClaimError: if the last attempt failed transiently (the driver error is
        chained).
    :raises UnsafeTransaction: if ``work`` commits (refused: nothing is committed) or rolls
        back the transaction itself; nothing of that attempt is retried.
    :raises ValueError: if ``max_attempts`` < 1.
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, not {max_attempts}")
    for attempt in range(1, max_attempts + 1):
        session = session_factory()
        try:
            return _run_once(session, work)
        except (TransientClaimError, DBAPIError) as exc:
            if not is_transient(exc, session.get_bind().dialect.name):
                raise
            if attempt == max_attempts:
                if isinstance(exc, TransientClaimError):
                    raise
                raise TransientClaimError(
                    f"gave up after {max_attempts} attempts: {exc.orig}"
                ) from exc
            delay = random.uniform(0, min(MAX_BACKOFF, backoff * 2 ** (attempt - 1)))
            logger.info(
                "transient error, retrying",
                extra={"action": "retry", "attempt": attempt, "delay": delay, "error": str(exc)},
            )
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
