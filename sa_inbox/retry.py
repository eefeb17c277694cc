"""Run a unit of work in its own transaction, retrying it on transient database errors."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from .dialects import claim_dialect_for
from .exc import InvalidRetryArgument, InvalidSessionFactory, TransientClaimError
from .guard import owned_transaction

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "check_max_attempts",
    "is_transient",
    "new_session",
    "owned_transaction",
    "run_in_transaction",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_ATTEMPTS = 5
#: First back-off in seconds; doubled per attempt, with full jitter.
DEFAULT_BACKOFF = 0.02
MAX_BACKOFF = 1.0


def _run_once(session: Session, work: Callable[[Session], T]) -> T:
    """``work(session)`` in one transaction that only this function may commit; a missing
    table or column becomes :class:`~sa_inbox.exc.MissingTable`."""
    dialect = claim_dialect_for(session.get_bind().dialect.name)
    with session, dialect.translate_configuration_errors(), owned_transaction(session):
        return work(session)


def new_session(session_factory: Callable[[], Session]) -> Session:
    """``session_factory()``, checked to be a new :class:`~sqlalchemy.orm.Session`.

    :raises InvalidSessionFactory: if the call fails with :class:`TypeError` (an unbound
        ``Session.begin``) or returns anything but a Session (``sessionmaker.begin``
        returns a transaction context manager).
    """
    try:
        session = session_factory()
    except TypeError as exc:
        raise InvalidSessionFactory(
            f"the session factory {session_factory!r} cannot be called with no arguments: "
            f"{exc}; pass a sessionmaker"
        ) from exc
    if not isinstance(session, Session):
        raise InvalidSessionFactory(
            f"the session factory {session_factory!r} returned {type(session).__name__}, "
            "not a Session; pass a sessionmaker (not sessionmaker.begin or Session.begin)"
        )
    return session


def check_max_attempts(max_attempts: int) -> int:
    """``max_attempts`` if it is an int >= 1.

    :raises InvalidRetryArgument: otherwise (nothing has been sent).
    """
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise InvalidRetryArgument(f"max_attempts must be an int >= 1, not {max_attempts!r}")
    return max_attempts


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
    :raises HandlerEndedTransaction: if ``work`` commits (refused: nothing is committed) or
        rolls back the transaction itself; nothing of that attempt is retried.
    :raises ConfigurationError: :class:`~sa_inbox.exc.MissingTable` for a missing table or
        column, :class:`~sa_inbox.exc.AutocommitConnection` for an engine that commits each
        statement on its own, :class:`~sa_inbox.exc.InvalidSessionFactory` for a factory
        that does not make Sessions; never retried.
    :raises InvalidRetryArgument: if ``max_attempts`` is not an int >= 1, before anything.
    """
    check_max_attempts(max_attempts)
    for attempt in range(1, max_attempts + 1):
        session = new_session(session_factory)
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
