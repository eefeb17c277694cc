"""The transaction that holds a claim, guarded while a handler runs inside it.

The runner (:func:`sa_inbox.handle`, :func:`sa_inbox.run_in_transaction`) and the store's
worker begin one transaction, claim the message in it, run the handler in it and commit it.
A handler that ended that transaction itself would split the claim from the business change:
committing it makes the claim durable before the change (a failure after the commit then
loses the message: the redelivery is a duplicate), rolling it back drops the claim while the
handler may go on writing in a new transaction. :func:`owned_transaction` refuses or
detects each way SQLAlchemy offers to do that:

==========================================================  ===============================
what the handler does                                       what happens
==========================================================  ===============================
``session.commit()``, ``session.get_transaction().commit()``  refused before any SQL
                                                            (``SessionEvents.before_commit``)
``session.connection().commit()``, a nested                 refused before the driver's
``Session(bind=session.connection(),                        ``commit()`` (``ConnectionEvents
join_transaction_mode="control_fully").commit()``           .commit``); the driver's
                                                            transaction is rolled back
``session.rollback()``, ``session.connection().rollback()``,  detected when the handler
a nested session's rollback                                 returns; a statement after it,
                                                            which would begin a new
                                                            transaction, is refused
``session.begin()`` / ``with session.begin():``             SQLAlchemy raises ("a
                                                            transaction is already begun")
a raw DBAPI ``commit()`` (``conn.connection                 **not intercepted**: it bypasses
.dbapi_connection.commit()``), a textual ``COMMIT``          SQLAlchemy; never do this
==========================================================  ===============================

Every refusal is a :class:`~sa_inbox.exc.HandlerEndedTransaction`: the attempt fails, nothing
is committed and the delivery is never acked. Each connection the transaction enlists is also
checked for autocommit (:func:`sa_inbox.dialects.is_autocommit`), a
:class:`~sa_inbox.exc.AutocommitConnection`, before anything is sent on it.

The listeners are installed once, when this module is imported, on the ``Session`` class
and the ``Engine`` class, so they apply to every session and connection of the process
(SQLAlchemy docs, "Events", "Session Events" and "Connection Events"); they find the guard of
the transaction they fire for in ``Session.info`` and in a weak map of the guarded
connections. For sessions and connections that no guard holds, each listener is one
dictionary look-up. Listening on each Session and Connection anew cost ~100 µs per message
(a per-instance event dispatch), and listening on a class or engine at first use raced with
other threads' commits firing the same event (``event.listen`` must not run while the event
is being dispatched).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, RootTransaction, Transaction
from sqlalchemy.orm import Session, SessionTransaction

from .dialects import is_autocommit
from .exc import (
    AutocommitConnection,
    HandlerEndedTransaction,
    InvalidSessionFactory,
    SplitTransaction,
)
from .pool_guard import released_clean

__all__ = ["JOINED", "enlisted_connections", "owned_transaction"]

#: ``Session.info`` key of the guard of the session's owned transaction.
_GUARD = "sa_inbox.guard"
#: The guard of each connection enlisted in an owned transaction.
_connection_guards: weakref.WeakKeyDictionary[Connection, _Guard] = weakref.WeakKeyDictionary()


class _Guard:
    """The state of one owned transaction; see :func:`owned_transaction`."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.transaction: SessionTransaction | None = None
        self.committing = False
        #: Why a commit or begin was refused (the handler may have caught the error).
        self.refused: str | None = None
        #: The connections of the transaction, with the root transaction each held.
        self.connections: list[tuple[Connection, Transaction | None]] = []

    # -- what the listeners do ----------------------------------------------------------

    def before_commit(self, session: Session) -> None:
        # Fired for savepoint releases too; only the outermost commit is refused.
        if not self.committing and session.get_nested_transaction() is None:
            self.refuse("the handler must not commit: the runner commits after it returns")

    def after_begin(self, transaction: SessionTransaction, connection: Connection) -> None:
        root = transaction
        while root.parent is not None:
            root = root.parent
        if root is not self.transaction:
            self.refuse(
                "the handler began a new transaction after ending the one that holds the "
                "claim (a rollback): its changes would commit without the claim"
            )
        if connection in _connection_guards:
            return  # a savepoint on a connection already guarded
        if self.session.twophase:
            raise SplitTransaction(
                "the session is two-phase (twophase=True): its connections commit with "
                "PREPARE/COMMIT PREPARED, which the runner cannot guard; use a plain session"
            )
        if self.connections:
            raise SplitTransaction(
                "the session enlisted a second connection (its binds send tables to "
                "different engines): the claim and the business change would commit one "
                "after the other, not atomically; bind them to one engine"
            )
        if is_autocommit(connection):
            raise AutocommitConnection(
                "the session's connection commits each statement on its own (AUTOCOMMIT "
                "or the driver's autocommit): the claim would commit apart from the "
                "business change; use a transactional engine"
            )
        _connection_guards[connection] = self
        self.connections.append((connection, connection.get_transaction()))

    def connection_commit(self, connection: Connection) -> None:
        if self.committing:
            return
        # SQLAlchemy marks its transaction inactive whatever this listener does; the
        # driver's transaction is still open, so roll it back here, or the next user of
        # the pooled connection would commit the claim without the business change.
        dbapi_connection = connection.connection.dbapi_connection
        if dbapi_connection is not None:
            dbapi_connection.rollback()
        self.refuse(
            "the handler must not commit the connection: the runner commits after it "
            "returns (the transaction was rolled back)"
        )

    def connection_begin(self, connection: Connection) -> None:
        if not self.committing:
            self.refuse(
                "the handler began a new transaction on the claim's connection after "
                "ending the one that holds the claim"
            )

    # -- helpers ------------------------------------------------------------------------

    def enlisted(self) -> list[Connection]:
        """The connections the transaction enlisted so far."""
        return [connection for connection, _ in self.connections]

    def refuse(self, reason: str) -> None:
        self.refused = self.refused or reason
        raise HandlerEndedTransaction(reason)

    def check(self, transaction: SessionTransaction) -> None:
        """Raise unless ``transaction`` and every connection's root are as they began."""
        if self.refused is not None:
            raise HandlerEndedTransaction(self.refused)
        intact = transaction.is_active and self.session.get_transaction() is transaction
        for connection, root in self.connections:
            current = connection.get_transaction()
            if current is not root or (
                isinstance(current, RootTransaction) and not current.is_active
            ):
                intact = False
        if not intact:
            raise HandlerEndedTransaction(
                "the handler ended its transaction (rollback); its changes and the claim "
                "were rolled back"
            )

    def check_committed(self) -> None:
        """Raise unless the commit ended every guarded connection's transaction.

        A Session bound to a Connection that was already in a transaction joins it, and its
        commit then commits nothing (SQLAlchemy docs, "Joining a Session into an External
        Transaction"): the caller must not ack.
        """
        for connection, _ in self.connections:
            if not connection.closed and connection.in_transaction():
                raise InvalidSessionFactory(f"the session's commit did not commit: {JOINED}")

    @contextmanager
    def installed(self) -> Iterator[None]:
        self.session.info[_GUARD] = self
        try:
            yield
        finally:
            self.session.info.pop(_GUARD, None)
            for connection, _ in self.connections:
                _connection_guards.pop(connection, None)


#: Why a Session bound to a Connection already in a transaction is refused.
JOINED = (
    "it joined a transaction already begun on the Connection it is bound to, which the "
    "caller still holds; bind the session factory to an Engine (or to a Connection with no "
    "transaction in progress)"
)


# -- the listeners, installed once per Session class and per Engine ---------------------------


def _on_before_commit(session: Session) -> None:
    guard = session.info.get(_GUARD)
    if guard is not None:
        guard.before_commit(session)


def _on_after_begin(
    session: Session, transaction: SessionTransaction, connection: Connection
) -> None:
    guard = session.info.get(_GUARD)
    if guard is not None:
        guard.after_begin(transaction, connection)


def _on_commit(connection: Connection) -> None:
    guard = _connection_guards.get(connection)
    if guard is not None:
        guard.connection_commit(connection)


def _on_begin(connection: Connection) -> None:
    guard = _connection_guards.get(connection)
    if guard is not None:
        guard.connection_begin(connection)


event.listen(Session, "before_commit", _on_before_commit)
event.listen(Session, "after_begin", _on_after_begin)
event.listen(Engine, "commit", _on_commit)
event.listen(Engine, "begin", _on_begin)


@contextmanager
def owned_transaction(session: Session) -> Iterator[SessionTransaction]:
    """Begin a transaction on ``session`` that only the end of this block may commit.

    The block (a handler, a unit of work) may use savepoints. Committing the transaction,
    through the Session or any of its connections, is refused before it reaches the
    database; rolling it back is detected when the block ends; a new transaction begun after
    such a rollback is refused (see the module's table). Each refusal raises
    :class:`~sa_inbox.exc.HandlerEndedTransaction`, and the block's end raises it again if
    the block caught it, so nothing of the attempt commits. The block's exit commits; an
    exception rolls back. Either way the connections go back to their pool clean or
    invalidated (:func:`sa_inbox.pool_guard.released_clean`).

    :param session: a new Session with no transaction in progress.
    :raises HandlerEndedTransaction: as described; the caller treats it as a failed attempt.
    :raises AutocommitConnection: when the transaction enlists a connection that commits
        each statement on its own, before anything is sent on it.
    """
    guard = _Guard(session)
    with guard.installed():
        transaction = session.begin()
        guard.transaction = transaction
        with transaction, released_clean(guard.enlisted):
            yield transaction
            guard.check(transaction)
            guard.committing = True
        guard.check_committed()


def check_intact(session: Session) -> None:
    """Raise if the transaction :func:`owned_transaction` holds on ``session`` was ended
    (committed, refused, or rolled back) by the code run in it so far; nothing outside one.

    For a block that runs several handlers in one transaction (a poll), after each: the
    handler that ended it is the one that failed.

    :raises HandlerEndedTransaction: as :func:`owned_transaction` raises it at its end.
    """
    guard = session.info.get(_GUARD)
    if isinstance(guard, _Guard) and guard.transaction is not None:
        guard.check(guard.transaction)


def enlisted_connections(session: Session) -> list[Connection]:
    """The connections the transaction :func:`owned_transaction` holds on ``session`` has
    enlisted so far; empty outside one."""
    guard = session.info.get(_GUARD)
    return guard.enlisted() if isinstance(guard, _Guard) else []
