"""The session extension: a claim registered on a Session is emitted first in its unit of work.

Installed through SQLAlchemy session events (``before_flush``, ``do_orm_execute``,
``before_commit``, ``after_soft_rollback``, ``after_transaction_end``; SQLAlchemy docs, "ORM
Events", "Session Events"), so users keep their own Session class. A registered claim is
emitted at the first of: the next flush, the next ORM ``INSERT``/``UPDATE``/``DELETE``
executed through the session, or the commit; always before the business rows. A duplicate
aborts that flush, statement or commit with :class:`~sa_inbox.exc.DuplicateMessage`, and
the caller rolls back.

The claim belongs to the session's outermost transaction:

* a claim emitted inside a SAVEPOINT (``session.begin_nested()``) that is rolled back is
  registered again and re-emitted before the outer transaction commits, so the business
  rows can never commit without it;
* a savepoint rollback never discards claims of the enclosing transaction;
* once a duplicate was found, the transaction refuses to commit (even if the caller caught
  the :class:`~sa_inbox.exc.DuplicateMessage`): it must roll back;
* registering the same claim twice in one transaction is a no-op.

Example::

    Session = sessionmaker(engine)
    install(Session)

    with Session.begin() as session:
        register_claim(session, inbox, message_id, "billing")
        session.add(LedgerEntry(...))      # flushed after the claim
    # DuplicateMessage here means: already processed, ack and move on
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import (
    ORMExecuteState,
    Session,
    SessionTransaction,
    scoped_session,
    sessionmaker,
)

from ._compat import session_options
from .checks import is_asyncio_object, require
from .claim import Inbox
from .exc import (
    ConfigurationError,
    DuplicateMessage,
    InvalidBind,
    InvalidObject,
    InvalidSessionFactory,
)

__all__ = ["install", "installed", "pending_claims", "register_claim", "uninstall"]

_STATE = "sa_inbox.claims"
_INSTALLED = "sa_inbox.installed"


@dataclass(frozen=True)
class _PendingClaim:
    inbox: Inbox
    message_id: str
    consumer_name: str
    extra: dict[str, Any]

    @property
    def key(self) -> tuple[sa.Table, str, str]:
        return (self.inbox.table, self.message_id, self.consumer_name)


@dataclass
class _ClaimState:
    """The claims of one session's outermost transaction."""

    #: Registered, not sent yet.
    pending: list[_PendingClaim] = field(default_factory=list)
    #: Sent, with the (possibly nested) transaction they were sent in.
    emitted: list[tuple[SessionTransaction, _PendingClaim]] = field(default_factory=list)
    #: Set once a duplicate was found: the transaction must not commit.
    duplicate: DuplicateMessage | None = None

    def registered(self, key: tuple[sa.Table, str, str]) -> bool:
        return any(c.key == key for c in self.pending) or any(c.key == key for _, c in self.emitted)


SessionTarget = sessionmaker[Any] | type[Session] | Session


def _state(session: Session) -> _ClaimState | None:
    state: _ClaimState | None = session.info.get(_STATE)
    return state


def _emit_pending(session: Session) -> None:
    state = _state(session)
    if state is None:
        return
    while state.pending:
        claim = state.pending[0]
        transaction = session.get_nested_transaction() or session.get_transaction()
        if not claim.inbox.claim(session, claim.message_id, claim.consumer_name, **claim.extra):
            state.pending.clear()
            state.duplicate = DuplicateMessage(claim.message_id, claim.consumer_name)
            raise state.duplicate
        state.pending.pop(0)
        assert transaction is not None  # claim() began one if there was none
        state.emitted.append((transaction, claim))


def _before_flush(session: Session, flush_context: Any, instances: Any) -> None:
    _emit_pending(session)


def _before_commit(session: Session) -> None:
    state = _state(session)
    if state is not None and state.duplicate is not None:
        raise DuplicateMessage(state.duplicate.message_id, state.duplicate.consumer_name)
    _emit_pending(session)


def _do_orm_execute(state: ORMExecuteState) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        _emit_pending(state.session)


def _within(transaction: SessionTransaction | None, ended: SessionTransaction) -> bool:
    while transaction is not None:
        if transaction is ended:
            return True
        transaction = transaction.parent
    return False


def _after_soft_rollback(session: Session, previous_transaction: SessionTransaction) -> None:
    """A rolled-back savepoint took its claims with it: register them again."""
    state = _state(session)
    if state is None or previous_transaction.parent is None:
        return
    undone = [c for t, c in state.emitted if _within(t, previous_transaction)]
    state.emitted = [(t, c) for t, c in state.emitted if not _within(t, previous_transaction)]
    state.pending[:0] = undone


def _after_transaction_end(session: Session, transaction: SessionTransaction) -> None:
    """The outermost transaction ended (commit or rollback): its claims end with it."""
    if transaction.parent is None:
        session.info.pop(_STATE, None)


_LISTENERS = (
    ("before_flush", _before_flush),
    ("before_commit", _before_commit),
    ("do_orm_execute", _do_orm_execute),
    ("after_soft_rollback", _after_soft_rollback),
    ("after_transaction_end", _after_transaction_end),
)


def install(target: SessionTarget) -> None:
    """Install the session extension on a ``sessionmaker``, a Session class or one Session.

    Idempotent: installing twice registers the listeners once. Works for every
    :class:`~sa_inbox.Inbox`; which inbox a claim goes to is given at :func:`register_claim`.

    :param target: a :class:`~sqlalchemy.orm.sessionmaker`, a ``Session`` subclass (or
        ``Session`` itself, which affects every session in the process), or one session.
    :raises InvalidBind: for an ``async_sessionmaker`` or AsyncSession (use
        :func:`sa_inbox.asyncio.install`).
    :raises InvalidSessionFactory: for anything else (``Session.begin``, ``sessionmaker.begin``,
        a ``scoped_session``: install on its ``session_factory``, an engine), before any
        listener is added.
    """
    if is_asyncio_object(target):
        raise InvalidBind(
            f"sa_inbox.install() takes a sessionmaker, Session class or Session, not "
            f"{_kind(target)}: for an async_sessionmaker or AsyncSession use "
            "sa_inbox.asyncio.install()"
        )
    if not _is_target(target):
        hint = _install_hint(target)
        raise InvalidSessionFactory(
            f"sa_inbox.install() takes a sessionmaker, Session class or Session, not "
            f"{target!r}: {hint}"
        )
    # Idempotence comes from our own mark, never from event.contains(): SQLAlchemy's event
    # registry is keyed by id(target), so a new sessionmaker allocated where a freed one
    # lived can look "already listened" and would silently get no listeners.
    if _marked(target):
        return
    for name, listener in _LISTENERS:
        event.listen(target, name, listener)
    _mark(target, True)


def _install_hint(target: object) -> str:
    """What to pass to :func:`install` instead of ``target``."""
    if isinstance(target, scoped_session):
        return "install it on its session_factory"
    if isinstance(target, (sa.engine.Engine, sa.engine.Connection)):
        return "pass the sessionmaker bound to it"
    if callable(target) and getattr(target, "__name__", "") == "begin":
        return "pass the sessionmaker itself, not its .begin"
    return "pass the sessionmaker that makes the handler's sessions"


def _is_target(target: object) -> bool:
    """Whether ``target`` is what :func:`install` marks: a sessionmaker, a Session class or
    a Session (SQLAlchemy docs, "ORM Events", section "Session Events")."""
    if isinstance(target, type):
        return issubclass(target, Session)
    return isinstance(target, (sessionmaker, Session))


def _kind(target: object) -> str:
    return target.__name__ if isinstance(target, type) else type(target).__name__


def uninstall(target: SessionTarget) -> None:
    """Remove what :func:`install` added to ``target``.

    :raises InvalidBind: for an ``async_sessionmaker`` or AsyncSession (what
        :func:`sa_inbox.asyncio.install` did stays: the listeners are on a Session class of
        its own), :class:`~sa_inbox.exc.InvalidSessionFactory` for anything else that
        :func:`install` refuses.
    """
    if is_asyncio_object(target):
        raise InvalidBind(
            f"sa_inbox.uninstall() takes a sessionmaker, Session class or Session, not "
            f"{_kind(target)} (sa_inbox.asyncio.install() cannot be undone)"
        )
    if not _is_target(target):
        raise InvalidSessionFactory(
            f"sa_inbox.uninstall() takes a sessionmaker, Session class or Session, not "
            f"{target!r}: {_install_hint(target)}"
        )
    if not _marked(target):
        return
    for name, listener in _LISTENERS:
        event.remove(target, name, listener)
    _mark(target, False)


#: Session classes and single sessions the extension is installed on. Sessions made by a
#: sessionmaker are marked through the ``info`` dict that it copies into each session.
_installed_classes: weakref.WeakSet[type[Session]] = weakref.WeakSet()
_installed_sessions: weakref.WeakSet[Session] = weakref.WeakSet()


def _mark(target: SessionTarget, on: bool) -> None:
    if isinstance(target, sessionmaker):
        info = dict(session_options(target).get("info") or {})
        if on:
            info[_INSTALLED] = True
        else:
            info.pop(_INSTALLED, None)
        target.configure(info=info)
        return
    targets: weakref.WeakSet[Any] = (
        _installed_classes if isinstance(target, type) else _installed_sessions
    )
    if on:
        targets.add(target)
    else:
        targets.discard(target)


def _marked(target: SessionTarget) -> bool:
    if isinstance(target, sessionmaker):
        return bool((session_options(target).get("info") or {}).get(_INSTALLED))
    if isinstance(target, type):
        return target in _installed_classes
    return target in _installed_sessions


def installed(session: Session) -> bool:
    """Whether the extension is installed on ``session``, its class or its sessionmaker.

    :param session: a Session, or an AsyncSession (its ``sync_session`` is read).
    :raises InvalidObject: for anything else.
    """
    session = _session(session, "installed()")
    return (
        bool(session.info.get(_INSTALLED))
        or session in _installed_sessions
        or any(isinstance(session, cls) for cls in _installed_classes)
    )


def register_claim(
    session: Session,
    inbox: Inbox,
    message_id: str,
    consumer_name: str,
    **extra: Any,
) -> None:
    """Put a claim of ``message_id`` for ``consumer_name`` into ``session``'s unit of work.

    Nothing is sent now; the ids are validated at once. The claim is emitted before any
    business row, at the next flush, DML statement or commit (whichever comes first).

    :param session: a session on which :func:`install` was applied (directly, via its
        class, or via its sessionmaker).
    :param inbox: the inbox to claim in.
    :param message_id: the producer-assigned id.
    :param consumer_name: the consumer.
    :param extra: ``message_type``, ``correlation_id``, ``payload_hash``, as for
        :meth:`Inbox.claim`.
    :raises ConfigurationError: if the extension is not installed for ``session`` (the claim would
        otherwise silently never be made), or if ``session`` has no transaction begun (the
        claim belongs to one transaction: call it inside ``with Session.begin()``, so that a
        rollback discards it).
    :raises InvalidMessageId: for an invalid id or consumer name.
    :raises InvalidBind: for an AsyncSession (use :func:`sa_inbox.asyncio.register_claim`).
    :raises SyncAsyncMismatch: for an AsyncInbox; :class:`~sa_inbox.exc.InvalidObject` for
        anything else that is not an :class:`~sa_inbox.Inbox`.
    :raises DuplicateMessage: later, from the flush, DML statement or commit that emits it,
        and from every later commit of the same transaction.
    """
    if is_asyncio_object(session):
        raise InvalidBind(
            f"sa_inbox.register_claim() takes a Session, not {type(session).__name__}: for an "
            "AsyncSession use sa_inbox.asyncio.register_claim()"
        )
    inbox = require(
        inbox,
        Inbox,
        "inbox",
        entry="sa_inbox.register_claim()",
        instead="pass the Inbox behind it (AsyncInbox.sync_inbox)",
    )
    if not installed(session):
        raise ConfigurationError(
            "the sa-inbox session extension is not installed: call "
            "sa_inbox.session.install() on this sessionmaker, Session class or session"
        )
    if not session.in_transaction():
        raise ConfigurationError(
            "register_claim() needs a begun transaction (with Session.begin() as session: …), "
            "so that the claim belongs to it and a rollback discards it"
        )
    inbox.validate(message_id, consumer_name, **extra)
    claim = _PendingClaim(inbox, message_id, consumer_name, dict(extra))
    state = session.info.setdefault(_STATE, _ClaimState())
    if not state.registered(claim.key):
        state.pending.append(claim)


def pending_claims(session: Session) -> list[tuple[str, str]]:
    """The ``(message_id, consumer_name)`` claims registered on ``session`` and not yet sent.

    :param session: a Session, or an AsyncSession (its ``sync_session`` is read).
    :raises InvalidObject: for anything else.
    """
    state = _state(_session(session, "pending_claims()"))
    return [] if state is None else [(c.message_id, c.consumer_name) for c in state.pending]


def _session(session: object, entry: str) -> Session:
    """``session``, or the Session behind an AsyncSession (unambiguous: the extension
    lives on it).

    :raises InvalidObject: for anything else.
    """
    if isinstance(session, Session):
        return session
    sync_session = getattr(session, "sync_session", None)
    if is_asyncio_object(session) and isinstance(sync_session, Session):
        return sync_session
    raise InvalidObject(f"{entry} takes a Session or AsyncSession, not {type(session).__name__}")
