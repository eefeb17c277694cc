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
broker redelivers. Serialization failures and deadlocks are retried first
(:func:`run_in_transaction`); a configuration error is raised to the caller, neither acked nor
nacked. The transaction is guarded while the handler runs (:mod:`sa_inbox.guard`) and the
handler is checked first (:mod:`sa_inbox.handlers`).
"""

from __future__ import annotations

import difflib
import enum
import inspect
import logging
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast, overload

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, UnboundExecutionError
from sqlalchemy.orm import Session
from typing_extensions import deprecated

from .backoff import Backoff
from .checks import check_session_factory, require
from .claim import Inbox
from .dialects import classifier_for
from .exc import (
    ConfigurationError,
    HandlerEndedTransaction,
    InvalidArgument,
    InvalidBind,
    InvalidSessionFactory,
    TransientClaimError,
)
from .guard import JOINED, owned_transaction
from .handlers import call_handler, check_handler, check_settlers
from .hooks import NOOP, InboxHooks, as_hooks
from .outage import is_guarded, is_unavailable
from .validation import non_negative_int, positive_int, positive_seconds

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_RETRY_BACKOFF",
    "Outcome",
    "Result",
    "check_max_attempts",
    "handle",
    "is_transient",
    "new_session",
    "retry_options",
    "run_in_transaction",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Re-runs of a transaction after a deadlock or serialization failure (``max_retries``).
DEFAULT_MAX_RETRIES = 4
#: The wait before each re-run: 20 ms doubling, at most 1 s, with full jitter.
DEFAULT_RETRY_BACKOFF = Backoff(base=0.02, maximum=1.0)
#: The former ``max_attempts`` default (attempts in all: ``DEFAULT_MAX_RETRIES + 1``).
DEFAULT_MAX_ATTEMPTS = DEFAULT_MAX_RETRIES + 1
#: The former ``backoff`` default and its cap, in seconds (``DEFAULT_RETRY_BACKOFF``).
DEFAULT_BACKOFF = DEFAULT_RETRY_BACKOFF.base
MAX_BACKOFF = DEFAULT_RETRY_BACKOFF.maximum


def _run_once(
    session: Session,
    work: Callable[[Session], T],
    commit_span: Callable[[], AbstractContextManager[object]] | None = None,
) -> T:
    """``work(session)`` in one transaction that only this function may commit; a missing
    table or column becomes :class:`~sa_inbox.exc.MissingTable`. ``commit_span()``, if
    given, is entered after ``work`` returns and exited after the commit (or its failure)."""
    dialect = classifier_for(_dialect_name(session))
    with session, dialect.translate_configuration_errors():
        with ExitStack() as commit, owned_transaction(session):
            result = cast(T, call_handler(work, session))
            if commit_span is not None:
                commit.enter_context(commit_span())
        return result


def _dialect_name(session: Session) -> str | None:
    """The dialect of the session's default bind; ``None`` for a session bound per table
    only (``sessionmaker(binds={...})``), whose bind depends on the statement."""
    try:
        return session.get_bind().dialect.name
    except UnboundExecutionError:
        return None


def engine_of(session: Session, table: sa.Table) -> sa.Engine:
    """The Engine ``session`` runs ``table``'s statements on (no SQL is sent), for the
    owner check's transaction of its own (:mod:`sa_inbox.consumers`).

    :raises InvalidBind: for a Session bound to no engine.
    :raises InvalidSessionFactory: for a Session bound to a Connection already in a
        transaction: its commit would commit nothing (refused at the commit, see
        :mod:`sa_inbox.guard`), and a pool of one connection per thread (SQLite's
        in-memory databases) would give the owner check that very connection, whose
        commit would commit the caller's work. Refused here first, before any SQL.
    """
    try:
        bind = session.get_bind(clause=table)
    except UnboundExecutionError as exc:
        raise InvalidBind(
            f"the Session is bound to no engine, so {table.name!r} has nowhere to be claimed: "
            "create it from a sessionmaker(engine)"
        ) from exc
    if isinstance(bind, sa.Engine):
        return bind
    if bind.in_transaction():
        raise InvalidSessionFactory(f"the session cannot commit its claim: {JOINED}")
    return bind.engine


def new_session(session_factory: Callable[[], Session]) -> Session:
    """``session_factory()``, checked to be a new :class:`~sqlalchemy.orm.Session`.

    :raises InvalidSessionFactory: if the call fails with :class:`TypeError` (an unbound
        ``Session.begin``), returns anything but a Session (``sessionmaker.begin``
        returns a transaction context manager), or a Session with a transaction already
        begun.
    """
    try:
        session = session_factory()
    except InvalidSessionFactory:
        raise
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
    if session.in_transaction():
        raise InvalidSessionFactory(
            f"the session factory {session_factory!r} returned a session with a transaction "
            "already in progress (a scoped_session reused by the thread?): the claim must "
            "begin the transaction it commits; pass a factory of new sessions"
        )
    return session


def check_max_attempts(max_attempts: int) -> int:
    """``max_attempts`` if it is an int >= 1.

    :raises InvalidArgument: otherwise (nothing has been sent).
    """
    return positive_int(max_attempts, "max_attempts", InvalidArgument)


def retry_options(
    entry: str,
    max_retries: int | None,
    retry_backoff: Backoff | None,
    *,
    max_attempts: int | None = None,
    backoff: float | None = None,
) -> tuple[int, Backoff]:
    """The checked ``(max_retries, retry_backoff)`` of a runner entry point, defaults filled,
    the deprecated names translated: ``max_attempts=N`` (attempts in all) is
    ``max_retries=N - 1``, ``backoff=seconds`` is ``retry_backoff=Backoff(seconds, 1.0)``
    (each with a :class:`DeprecationWarning` naming ``entry``).

    :raises InvalidArgument: for a ``max_retries`` that is not an int >= 0, a
        ``retry_backoff`` that is not a :class:`~sa_inbox.backoff.Backoff`, a bad deprecated
        value, or a name given with its deprecated one; before anything is sent.
    """
    if max_attempts is not None:
        if max_retries is not None:
            raise InvalidArgument(f"{entry}: give max_retries only (max_attempts is its old name)")
        _renamed(entry, "max_attempts=N", "max_retries=N - 1 (the re-runs, not the attempts)")
        max_retries = check_max_attempts(max_attempts) - 1
    if backoff is not None:
        if retry_backoff is not None:
            raise InvalidArgument(f"{entry}: give retry_backoff only (backoff is its old name)")
        _renamed(entry, "backoff=seconds", "retry_backoff=Backoff(base=seconds, maximum=1.0)")
        seconds = positive_seconds(backoff, "backoff", InvalidArgument)
        retry_backoff = Backoff(base=seconds, maximum=MAX_BACKOFF)
    if max_retries is None:
        max_retries = DEFAULT_MAX_RETRIES
    if retry_backoff is None:
        retry_backoff = DEFAULT_RETRY_BACKOFF
    if not isinstance(retry_backoff, Backoff):
        raise InvalidArgument(
            f"retry_backoff must be a Backoff(base=seconds, maximum=seconds), not {retry_backoff!r}"
        )
    return non_negative_int(max_retries, "max_retries", InvalidArgument), retry_backoff


#: The keyword arguments the runners pass on to the claim (:meth:`Inbox.validate`).
CLAIM_EXTRA = ("message_type", "correlation_id", "payload_hash")


def check_claim_extra(entry: str, runner: Callable[..., object], extra: Mapping[str, Any]) -> None:
    """Refuse a keyword argument that neither ``runner`` nor the claim takes, naming
    ``entry`` (not the claim's validation it would reach) and the closest known name.

    :raises InvalidArgument: for an unknown keyword, before anything is sent.
    """
    for name in extra:
        if name not in CLAIM_EXTRA:
            known = [*inspect.signature(runner).parameters, *CLAIM_EXTRA]
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidArgument(f"{entry} got an unexpected keyword argument {name!r}{hint}")


def _renamed(entry: str, old: str, new: str) -> None:
    warnings.warn(
        f"{entry}: {old} is renamed {new}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=4,
    )


def is_transient(exc: BaseException, dialect_name: str | None) -> bool:
    """Whether ``exc`` means "roll back and retry the whole transaction".

    :param exc: an exception raised inside the unit of work.
    :param dialect_name: the SQLAlchemy dialect name of the session's engine; ``None`` to
        ask every known backend's classifier (see
        :func:`~sa_inbox.dialects.classifier_for`).
    :returns: True for :class:`~sa_inbox.exc.TransientClaimError`, and for driver errors
        that the backend's classifier recognises as serialization failure or deadlock
        (a business statement can deadlock too, not only the claim).
    """
    if isinstance(exc, TransientClaimError):
        return True
    if isinstance(exc, DBAPIError):
        return classifier_for(dialect_name).is_transient(exc)
    return False


def run_in_transaction(
    session_factory: Callable[[], Session],
    work: Callable[[Session], T],
    *,
    max_retries: int | None = None,
    retry_backoff: Backoff | None = None,
    sleep: Callable[[float], None] = time.sleep,
    hooks: InboxHooks = NOOP,
    consumer_name: str = "",
    commit_span: Callable[[], AbstractContextManager[object]] | None = None,
    max_attempts: int | None = None,
    backoff: float | None = None,
) -> T:
    """Run ``work(session)`` in a new session and transaction, committing on success.

    On a transient error (see :func:`is_transient`) the transaction is rolled back and
    ``work`` runs again in a fresh session, up to ``max_retries`` times, after a random wait
    of up to ``retry_backoff.delay(n)`` seconds before the ``n``-th re-run
    (:meth:`~sa_inbox.backoff.Backoff.jittered`). Any other exception rolls back and
    propagates at once.

    :param session_factory: makes a new :class:`~sqlalchemy.orm.Session` (a sessionmaker).
    :param work: the unit of work; it must not commit. It may run several times, so it must
        not have effects outside the transaction.
    :param max_retries: re-runs after a transient error, an int >= 0 (default
        :data:`DEFAULT_MAX_RETRIES`; ``0``: one attempt).
    :param retry_backoff: a :class:`~sa_inbox.backoff.Backoff`, the waits before the
        re-runs (default :data:`DEFAULT_RETRY_BACKOFF`: 20 ms doubling, at most 1 s).
    :param max_attempts: the deprecated spelling of ``max_retries + 1``.
    :param backoff: the deprecated spelling of ``retry_backoff=Backoff(backoff, 1.0)``.
    :param sleep: the sleep function (tests pass a fake).
    :param hooks: told of each retry (:meth:`~sa_inbox.hooks.InboxHooks.retried`).
    :param consumer_name: the consumer the retries are reported for.
    :param commit_span: makes a context manager entered after ``work`` returns and exited
        after the commit (the runner's ``inbox.commit`` span).
    :returns: what ``work`` returned on the attempt that committed.
    :raises TransientClaimError: if the last attempt failed transiently (the driver error is
        chained).
    :raises HandlerEndedTransaction: if ``work`` commits (refused: nothing is committed) or
        rolls back the transaction itself; nothing of that attempt is retried.
    :raises ConfigurationError: :class:`~sa_inbox.exc.MissingTable` for a missing table or
        column, :class:`~sa_inbox.exc.AutocommitConnection` for an engine that commits each
        statement on its own, :class:`~sa_inbox.exc.InvalidSessionFactory` for a factory
        that does not make Sessions; never retried.
    :raises InvalidArgument: for a bad ``max_retries`` or ``retry_backoff`` (see
        :func:`retry_options`), before anything.
    :raises InvalidHandler: if ``work`` cannot be called as ``work(session)``, and
        :class:`~sa_inbox.exc.AsyncHandlerInSyncRunner` if it is ``async def`` (use
        :func:`sa_inbox.asyncio.run_in_transaction`), before anything.
    :raises AsyncHandlerError: if ``work`` returns an awaitable (rolled back: its work would
        never run).
    """
    max_retries, retry_backoff = retry_options(
        "sa_inbox.run_in_transaction()",
        max_retries,
        retry_backoff,
        max_attempts=max_attempts,
        backoff=backoff,
    )
    check_session_factory(
        session_factory, entry="sa_inbox.run_in_transaction()", asynchronous=False
    )
    check_handler(work, ("session",))
    hooks = as_hooks(hooks)
    max_attempts = max_retries + 1
    for attempt in range(1, max_attempts + 1):
        session = new_session(session_factory)
        try:
            return _run_once(session, work, commit_span)
        except (TransientClaimError, DBAPIError) as exc:
            if not is_transient(exc, _dialect_name(session)):
                raise
            if attempt == max_attempts:
                if isinstance(exc, TransientClaimError):
                    raise
                raise TransientClaimError(
                    f"gave up after {max_attempts} attempts: {exc.orig}"
                ) from exc
            delay = retry_backoff.jittered(attempt)
            hooks.retried(consumer_name, attempt=attempt)
            logger.info(
                "transient error, retrying",
                extra={
                    "event": "inbox.transaction.retry",
                    "action": "retry",
                    "attempt": attempt,
                    "delay": delay,
                    "error": str(exc),
                },
            )
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


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


@contextmanager
def logged_configuration_errors(message_id: str) -> Iterator[None]:
    """Log a :class:`ConfigurationError` raised in the block as the delivery's (ERROR,
    event ``inbox.configuration.error``: neither acked nor nacked), then let it through."""
    try:
        yield
    except ConfigurationError:
        logger.error(
            "message %s: configuration error, neither acked nor nacked",
            message_id,
            extra={
                "event": "inbox.configuration.error",
                "action": "error",
                "message_id": message_id,
            },
        )
        raise


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
    max_retries: int | None = ...,
    sleep: Callable[[float], None] = ...,
    headers: Mapping[str, str] | None = ...,
    max_attempts: int | None = ...,
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
    max_retries: int | None = ...,
    sleep: Callable[[float], None] = ...,
    headers: Mapping[str, str] | None = ...,
    max_attempts: int | None = ...,
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
    max_retries: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    headers: Mapping[str, str] | None = None,
    max_attempts: int | None = None,
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
    :param max_retries: re-runs of the transaction after a transient error (deadlock,
        serialization failure), an int >= 0; default :data:`DEFAULT_MAX_RETRIES`.
    :param max_attempts: the deprecated spelling of ``max_retries + 1``.
    :param sleep: sleeps between those re-runs, in seconds (tests pass a fake; the asyncio
        runner sleeps on the event loop).
    :param headers: the message's headers, if the adapter has them: a W3C ``traceparent``
        among them makes the hooks' ``inbox.process`` span continue that trace.
    :param claim_extra: ``message_type``, ``correlation_id``, ``payload_hash`` (a
        :class:`~sa_inbox.exc.MessageIdCollision` from the claim is a failed delivery:
        rolled back and nacked, never acked).
    :returns: a :class:`Result`. Exceptions from ``handler`` are caught, nacked and returned
        as :attr:`Outcome.FAILED` (logged with their traceback, except a database that
        cannot be reached: one line, at DEBUG behind a consumer's outage gate, see
        :mod:`sa_inbox.outage`), except ``BaseException``s that are not ``Exception``
        (KeyboardInterrupt, SystemExit), which nack and propagate. An exception from
        ``nack`` propagates (chained to the handler's error).
    :raises InvalidMessageId: for an invalid id, before anything is sent (not acked: the
        caller decides whether such a message goes to a dead-letter queue).
    :raises InvalidArgument: for a bad ``max_retries`` (see :func:`retry_options`), before
        anything, or a keyword argument it does not take.
    :raises ConfigurationError: raised to the caller with **neither ack nor nack** (the same
        error would fail every message; nacking would loop the queue through it), nothing
        committed: :class:`~sa_inbox.exc.InvalidHandler` (not callable as
        ``handler(session)``), :class:`~sa_inbox.exc.AsyncHandlerInSyncRunner` (an
        ``async def`` handler: use :func:`sa_inbox.asyncio.handle`),
        :class:`~sa_inbox.exc.InvalidSessionFactory`,
        :class:`~sa_inbox.exc.MissingTable` (the inbox's or a business table or column),
        :class:`~sa_inbox.exc.AutocommitConnection` (SQLAlchemy's or the driver's
        autocommit), :class:`~sa_inbox.exc.SyncAsyncMismatch` for an asyncio object (an
        ``AsyncInbox``: use :func:`sa_inbox.asyncio.handle`),
        :class:`~sa_inbox.exc.InvalidObject` for an ``ack`` or ``nack`` that is not callable,
        :class:`~sa_inbox.exc.ConsumerNameTaken` when another handler owns
        ``consumer_name`` (:mod:`sa_inbox.consumers`), before anything is claimed.

    What is refused as a failed delivery (:attr:`Outcome.FAILED` and a nack, never an ack
    of a change that did not commit, nothing committed):

    * a handler whose result is awaitable (:class:`~sa_inbox.exc.AsyncHandlerError`: a
      plain function returning a coroutine, seen only when called): its work would never
      run;
    * a handler that commits or rolls back the transaction holding the claim, through the
      Session, its connection or a nested Session on that connection
      (:class:`~sa_inbox.exc.HandlerEndedTransaction`; see :mod:`sa_inbox.guard`). A raw
      DBAPI ``commit()`` or a textual ``COMMIT`` bypasses SQLAlchemy and cannot be
      intercepted; writes through a second Session are outside the guarantee.
    """
    with logged_configuration_errors(message_id):
        check_claim_extra("sa_inbox.handle()", handle, claim_extra)
        inbox = require(
            inbox,
            Inbox,
            "inbox",
            entry="sa_inbox.handle()",
            instead="for an AsyncInbox and an async_sessionmaker, await sa_inbox.asyncio.handle()",
        )
        check_session_factory(session_factory, entry="sa_inbox.handle()", asynchronous=False)
        check_settlers("sa_inbox.handle()", ack=ack, nack=nack)
    hooks = inbox.hooks
    handler_seconds: list[float] = []
    #: Where the last attempt was: "claim", "handler" or "commit" (its failure's event).
    phase = ["claim"]

    def unit_of_work(session: Session) -> Outcome:
        handler_seconds.clear()
        phase[0] = "claim"
        if inbox.consumers is not None:
            inbox.consumers.ensure(engine_of(session, inbox.table), consumer_name, handler)
        with hooks.span("inbox.claim", consumer_name, message_id):
            claimed = inbox.claim(session, message_id, consumer_name, **claim_extra)
        if not claimed:
            return Outcome.DUPLICATE
        phase[0] = "handler"
        start = time.perf_counter()
        try:
            with hooks.span("inbox.handler", consumer_name, message_id):
                call_handler(handler, session)
        finally:
            handler_seconds.append(time.perf_counter() - start)
        return Outcome.PROCESSED

    def commit_span() -> AbstractContextManager[object]:
        phase[0] = "commit"
        return hooks.span("inbox.commit", consumer_name, message_id)

    def report(failed: bool) -> None:
        if handler_seconds:
            hooks.handled(consumer_name, seconds=handler_seconds[0], failed=failed)

    inbox.validate(message_id, consumer_name, **claim_extra)
    max_retries, _ = retry_options(
        "sa_inbox.handle()", max_retries, None, max_attempts=max_attempts
    )
    with hooks.span("inbox.process", consumer_name, message_id, headers):
        try:
            with logged_configuration_errors(message_id):
                check_handler(handler, ("session",))
                outcome = run_in_transaction(
                    session_factory,
                    unit_of_work,
                    max_retries=max_retries,
                    sleep=sleep,
                    hooks=hooks,
                    consumer_name=consumer_name,
                    commit_span=commit_span,
                )
        except ConfigurationError:
            raise
        except Exception as exc:
            report(failed=True)
            if isinstance(exc, HandlerEndedTransaction):
                phase[0] = "handler"  # found when the runner came to commit
            # a database outage is no message's fault: one line, no traceback, and only at
            # DEBUG when an outage gate logs the outage once (sa_inbox.outage)
            unavailable = is_unavailable(exc)
            logger.log(
                logging.DEBUG if unavailable and is_guarded() else logging.WARNING,
                "message %s (consumer %s): %s failed, nacking: %s: %s",
                message_id,
                consumer_name,
                phase[0],
                type(exc).__name__,
                exc,
                extra={
                    "event": f"inbox.{phase[0]}.failed",
                    "action": "nack",
                    "message_id": message_id,
                    "consumer_name": consumer_name,
                },
                exc_info=not unavailable,
            )
            nack()
            return Result(Outcome.FAILED, message_id, exc)
        except BaseException:
            nack()
            raise
        report(failed=False)
        with hooks.span("inbox.ack", consumer_name, message_id):
            ack()
        return Result(outcome, message_id)
