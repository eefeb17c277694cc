"""A stored row's state transitions, each a guarded statement in its own short transaction::

    pending ──lease──▶ processing ──handler commits──▶ done
       ▲                 │  │
       │   error, retry  │  └── error after max_attempts ──▶ dead
       └─────────────────┘

Every write after the lease is guarded by the row's status and lease token."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from typing_extensions import deprecated

from ..dialects import backend_for
from ..dialects.store_claim import CandidateQuery, StoreClaimDialect
from ..exc import ClaimLost, ConfigurationError, HandlerFailed
from ..guard import owned_transaction
from ..handlers import call_handler
from ..runner import is_transient, new_session
from ..validation import validate_key
from .base import StoreBase, on_engine
from .leases import LeasePlans, rowcount
from .protocol import (
    BatchFailure,
    BatchResult,
    Handler,
    ReapResult,
    RetryAt,
    StoredMessage,
)
from .schema import DEAD, DEFAULT_CONSUMER, DONE, MAX_ERROR_LENGTH, PENDING, PROCESSING, REAP_BATCH
from .values import aware, lease_window, positive, seconds

__all__ = ["StoreTransitions"]


class StoreTransitions(StoreBase):
    """A row's state transitions, each in its own short transaction: lease, complete,
    fail, release, reap."""

    @on_engine
    def lease(
        self,
        engine: sa.Engine,
        *,
        claimed_by: str,
        limit: int,
        visibility_timeout: float,
        max_attempts: int,
        consumer_name: str | None = DEFAULT_CONSUMER,
        ordered: bool = False,
        now: datetime.datetime | None = None,
        abandoned: bool = True,
    ) -> list[StoredMessage]:
        """Lease up to ``limit`` leasable rows in one short transaction; count the attempt.

        Leasable: ``pending`` with ``available_at <= now``, or ``processing`` with
        ``claimed_at`` older than ``visibility_timeout`` (its worker died) and fewer than
        ``max_attempts`` attempts (one with ``max_attempts`` goes ``dead`` by
        :meth:`reap`). With ``ordered``, also: no other row of the same aggregate is
        ``processing``, and none is ``pending`` ahead of it in ``(received_at, id)``
        order; ``dead`` rows do not block. Taken in ``(received_at, id)`` order with ``FOR
        UPDATE SKIP LOCKED`` (SQLite: ``BEGIN IMMEDIATE``), so two workers never lease the
        same row. Each leased row gets ``status='processing'``, ``claimed_at=now``,
        ``claimed_by`` and ``attempts + 1``.

        The order is that of committed rows: a receive that commits after a later message
        of its aggregate was already processed cannot go before it. To keep a producer's
        order, receive each aggregate's messages from one consumer at a time (one Kafka
        partition, one queue consumer), which commits them in order.

        :param engine: the store's database.
        :param claimed_by: the lease token, unique per lease (at most 255 characters).
        :param limit: rows at most, a positive int.
        :param visibility_timeout: seconds after which a lease counts as abandoned.
        :param max_attempts: attempts after which a message is dead.
        :param consumer_name: the consumer whose rows are leased; ``None`` leases the rows
            of every consumer (ordering, with ``ordered``, stays per consumer and
            aggregate).
        :param abandoned: also lease abandoned rows (the default), ahead of pending ones;
            ``False`` leases pending rows only and skips the search for abandoned ones (a
            :class:`~sa_inbox.store.Worker` looks for them at most once per
            ``poll_interval``).
        :returns: the leased messages in ``(received_at, id)`` order.
        :raises UnsupportedBackend: if the server has no ``SKIP LOCKED`` (PostgreSQL < 9.5,
            MySQL < 8.0.1, MariaDB < 10.6) or the backend is unknown.
        :raises InvalidArgument: for a bad ``limit``, timeout or ``max_attempts``.
        """
        when = aware(now)
        token, stale_before = lease_window(
            claimed_by, limit, max_attempts, visibility_timeout, when
        )
        rows = self.leased_rows.lease(
            engine,
            token=token,
            limit=limit,
            now=when,
            stale_before=stale_before,
            max_attempts=max_attempts,
            group=self._consumer(consumer_name),
            ordered=ordered,
            abandoned=abandoned,
        )
        return [_message(row) for row in rows]

    @deprecated("InboxStore.claim() is renamed lease(); claim() goes in the next release")
    def claim(self, engine: sa.Engine, /, **options: Any) -> list[StoredMessage]:
        """Deprecated name of :meth:`lease` (``claim`` is the dedup insert,
        :meth:`sa_inbox.Inbox.claim`); emits a :class:`DeprecationWarning`."""
        return self.lease(engine, **options)

    def candidates(
        self,
        *,
        visibility_timeout: float,
        max_attempts: int,
        consumer_name: str | None = DEFAULT_CONSUMER,
        ordered: bool = False,
        now: datetime.datetime | None = None,
    ) -> tuple[CandidateQuery, CandidateQuery]:
        """The lease's choice of rows: abandoned leases first, then pending rows.

        Each is a :data:`~sa_inbox.dialects.store_claim.CandidateQuery`, ``SELECT source.id
        FROM source WHERE consumer_name = :c AND status = :s AND … ORDER BY
        source.received_at, source.id``, with the rules of :meth:`lease`; the backend adds
        the limit and the locking clause. Two queries, each on one ``status``, so that the
        index ``ix_<table>_claim`` (consumer_name, status, received_at, id) delivers rows in
        lease order and the scan stops after ``limit`` rows: with ``status IN (…)`` the
        database must read and sort every candidate first, and InnoDB then locks them all
        (MySQL manual, "Locks Set by Different SQL Statements in InnoDB"), so a second
        worker's ``SKIP LOCKED`` would skip the whole backlog.

        With ``consumer_name=None`` the ``consumer_name = :c`` condition is left out: every
        consumer's rows are candidates, still in ``(received_at, id)`` order, but the index
        no longer delivers that order, so the database reads and sorts every candidate of
        the status (fine for a small store; run one worker per consumer on a large one). On
        MySQL/MariaDB, a lease whose window other leases filled falls back to a locking
        scan, which then locks every candidate it sorts until the lease commits.

        :raises InvalidArgument: for a bad timeout or ``max_attempts``.
        :raises InvalidMessageId: for a bad ``consumer_name``.
        """
        positive(max_attempts, "max_attempts")
        when = aware(now)
        stale_before = when - seconds(visibility_timeout, "visibility_timeout")
        consumer = self._consumer(consumer_name)
        return self.leased_rows.candidates(when, stale_before, max_attempts, consumer, ordered)

    def _consumer(self, consumer_name: str | None) -> str | None:
        """The validated consumer name, or ``None`` (every consumer)."""
        if consumer_name is None:
            return None
        return validate_key(consumer_name, "consumer_name", self.message_id_length)

    def _lease_plans(
        self, dialect: StoreClaimDialect, every_consumer: bool, ordered: bool
    ) -> LeasePlans:
        """The lease's cached statements for ``dialect`` (:meth:`LeasedRows.plans`)."""
        return self.leased_rows.plans(dialect, every_consumer, ordered)

    @on_engine
    def complete(
        self,
        engine: sa.Engine,
        message: StoredMessage,
        handler: Handler,
        *,
        session_factory: Callable[[], Session] | None = None,
        now: datetime.datetime | None = None,
    ) -> bool:
        """Run ``handler(session, message)`` and mark the row ``done``, in one transaction.

        The row is marked first, guarded by the lease token, so it stays locked while the
        handler runs: no other worker can lease it again, even after the visibility
        timeout. If the lease is no longer this one's (see
        :class:`~sa_inbox.exc.ClaimLost`), nothing runs and False is returned.

        :returns: True if the handler's change and ``done`` committed together.
        :raises Exception: whatever the handler raised (everything rolled back).
        :raises HandlerEndedTransaction: if the handler commits (refused, nothing committed)
            or rolls back the transaction itself: a failed attempt like any other.
        :raises AsyncHandlerError: if the handler's result is awaitable (an ``async def``
            handler): rolled back before anything commits, a failed attempt.
        :raises ConfigurationError: :class:`~sa_inbox.exc.MissingTable` (the store's or a
            business table or column is missing), :class:`~sa_inbox.exc.AutocommitConnection`
            (the session's engine commits each statement on its own, so ``done`` would commit
            before the handler ran), :class:`~sa_inbox.exc.InvalidSessionFactory`: the
            worker stops, nothing is recorded against the message.
        """
        factory = session_factory or sessionmaker(engine)
        done = {"status": DONE, "processed_at": aware(now)}
        dialect = self.leased_rows.dialect(engine)
        try:
            with (
                new_session(factory) as session,
                backend_for(engine.dialect.name).claim.translate_configuration_errors(),
                owned_transaction(session),
            ):
                conn = session.connection(bind_arguments={"clause": self.table})
                dialect.begin_write(conn)
                if not self.leased_rows.update_leased(conn, message.id, message.claimed_by, done):
                    raise ClaimLost(f"message {message.message_id!r} is no longer leased")
                call_handler(handler, session, message)
        except ClaimLost:
            return False
        return True

    @on_engine
    def complete_batch(
        self,
        engine: sa.Engine,
        messages: Sequence[StoredMessage],
        handler: Handler,
        *,
        session_factory: Callable[[], Session] | None = None,
        now: datetime.datetime | None = None,
        savepoints: bool = True,
        failed: Sequence[BatchFailure] = (),
        retry_at: RetryAt = lambda message: None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> BatchResult:
        """Run the handler for each message of one leased batch, all in ONE transaction.

        The batch's rows are marked ``done`` first, in one ``UPDATE … WHERE id IN (…) AND
        status = 'processing' AND claimed_by = :token`` (the lease-token guard of
        :meth:`complete`, for the whole batch in one statement), so they stay locked until
        the commit; a row whose lease is no longer this batch's is *lost* and its handler
        never runs. Then each handler runs in turn, and the transaction commits once.

        With ``savepoints``, each handler runs in a savepoint (``session.begin_nested()``:
        PostgreSQL manual, "SAVEPOINT" and "ROLLBACK TO SAVEPOINT"; MariaDB/InnoDB
        "SAVEPOINT, ROLLBACK TO SAVEPOINT, RELEASE SAVEPOINT"): a handler that raises is
        rolled back to its savepoint alone, and its row is recorded as a failed attempt
        (``pending`` at ``retry_at(message)``, or ``dead`` when that is ``None``) in the
        same transaction, while the others commit. Without ``savepoints`` the first
        handler that raises rolls back the whole transaction and :class:`HandlerFailed`
        is raised: the caller runs the batch again with ``failed`` holding that failure.

        :param engine: the store's database.
        :param messages: one lease's messages (one lease token), in lease order.
        :param handler: ``handler(session, message)``; it must not commit.
        :param session_factory: makes the Session (default ``sessionmaker(engine)``).
        :param now: the ``processed_at`` time (aware UTC).
        :param savepoints: run each handler in its own savepoint.
        :param failed: messages that already failed this attempt (a previous run of this
            batch): not run again, recorded as failed in this transaction.
        :param retry_at: when a message that fails now may be leased again (seconds of
            back-off already applied), ``None`` for ``dead``.
        :param stopping: checked before each handler; once true, the messages not started
            are given back in this transaction (``pending``, attempt not counted).
        :returns: a :class:`BatchResult`: what committed.
        :raises HandlerFailed: without ``savepoints``, when a handler raised (nothing
            committed).
        :raises ConfigurationError: as :meth:`complete` (nothing committed).
        :raises Exception: a deadlock or serialization failure
            (:func:`sa_inbox.runner.is_transient`) raised by any statement or the commit,
            including a handler's (InnoDB rolls back the whole transaction of a deadlock
            victim, savepoints included: MariaDB manual, "InnoDB Lock Modes", "Deadlocks";
            so it is never caught at a savepoint); a handler that ended the transaction
            (:class:`~sa_inbox.exc.HandlerEndedTransaction`); a broken connection. Nothing
            committed in every case.
        """
        factory = session_factory or sessionmaker(engine)
        when = aware(now)
        dialect = self.leased_rows.dialect(engine)
        backend = backend_for(engine.dialect.name).claim
        earlier = {failure.message.id: failure for failure in failed}
        with (
            new_session(factory) as session,
            backend.translate_configuration_errors(),
            owned_transaction(session),
        ):
            conn = session.connection(bind_arguments={"clause": self.table})
            dialect.begin_write(conn)
            held = self._mark_done(conn, dialect, messages, when)
            mine = [m for m in messages if m.id in held]
            failures = [earlier[m.id] for m in mine if m.id in earlier]
            to_run = [m for m in mine if m.id not in earlier]
            done: list[StoredMessage] = []
            released: list[StoredMessage] = []
            for index, message in enumerate(to_run):
                if stopping():
                    released = to_run[index:]
                    break
                error = _run_handler(session, handler, message, savepoints, engine.dialect.name)
                if error is None:
                    done.append(message)
                else:
                    failures.append(BatchFailure(message, error, retry_at(message)))
            for failure in failures:
                self._record_failure(conn, dialect, failure)
            self._give_back(conn, dialect, released)
        return BatchResult(
            done=tuple(done),
            failed=tuple(failures),
            lost=tuple(m for m in messages if m.id not in held),
            released=tuple(released),
        )

    def _mark_done(
        self,
        conn: Connection,
        dialect: StoreClaimDialect,
        messages: Sequence[StoredMessage],
        when: datetime.datetime,
    ) -> set[int]:
        """Mark the batch's rows ``done`` (lease-token guarded); the ids marked.

        One UPDATE per lease token (a batch has one). When it changes fewer rows than
        asked, the ids it changed are read back (rare: a lease lost after a visibility
        timeout); MariaDB has no ``UPDATE … RETURNING``.
        """
        t = self.table
        statement = self._done_statement(dialect)
        held: set[int] = set()
        for token in sorted({m.claimed_by for m in messages}):
            ids = sorted(m.id for m in messages if m.claimed_by == token)
            marked = rowcount(conn, statement, {"ids": ids, "token": token, "when": when})
            if marked == len(ids):
                held.update(ids)
            elif marked:
                query = sa.select(t.c.id).where(
                    t.c.id.in_(ids), t.c.claimed_by == token, t.c.status == DONE
                )
                held.update(int(i) for i in conn.execute(query).scalars())
        return held

    def _done_statement(self, dialect: StoreClaimDialect) -> sa.Update:
        """``UPDATE … SET status='done', processed_at=:when WHERE id <in :ids> AND
        claimed_by=:token AND status='processing'`` for ``dialect``, built once: a batch
        then compiles nothing (SQLAlchemy's compiled cache still keys each new statement
        object), and on PostgreSQL its text does not depend on the batch's size."""
        statement = self._done_statements.get(dialect)
        if statement is None:
            t = self.table
            statement = dialect.by_primary_key(
                sa.update(t)
                .where(
                    dialect.ids_in(t.c.id),
                    t.c.claimed_by == sa.bindparam("token"),
                    t.c.status == PROCESSING,
                )
                .values(
                    status=DONE, processed_at=sa.bindparam("when", type_=t.c.processed_at.type)
                ),
                t,
            )
            self._done_statements[dialect] = statement
        return statement

    def _record_failure(
        self, conn: Connection, dialect: StoreClaimDialect, failure: BatchFailure
    ) -> None:
        """Turn a row marked ``done`` by this transaction into a failed attempt."""
        t = self.table
        error = f"{type(failure.error).__name__}: {failure.error}"[:MAX_ERROR_LENGTH]
        values: dict[str, Any] = {"last_error": error, "processed_at": None}
        if failure.retry_at is None:
            values["status"] = DEAD
        else:
            values.update(status=PENDING, available_at=aware(failure.retry_at))
        message = failure.message
        conn.execute(
            dialect.by_primary_key(
                sa.update(t)
                .where(t.c.id == message.id, t.c.claimed_by == message.claimed_by)
                .values(values),
                t,
            )
        )

    def _give_back(
        self, conn: Connection, dialect: StoreClaimDialect, messages: Sequence[StoredMessage]
    ) -> None:
        """Release rows marked ``done`` by this transaction but never started."""
        if not messages:
            return
        t = self.table
        conn.execute(
            dialect.by_primary_key(
                sa.update(t)
                .where(
                    t.c.id.in_(sorted(m.id for m in messages)),
                    t.c.claimed_by == messages[0].claimed_by,
                )
                .values(
                    status=PENDING,
                    attempts=t.c.attempts - 1,
                    claimed_at=None,
                    claimed_by=None,
                    processed_at=None,
                ),
                t,
            )
        )

    @on_engine
    def fail(
        self,
        engine: sa.Engine,
        message: StoredMessage,
        error: str,
        *,
        retry_at: datetime.datetime | None,
        now: datetime.datetime | None = None,
    ) -> bool:
        """Record a failed attempt: back to ``pending`` at ``retry_at``, or ``dead``.

        :param error: the error text; its first :data:`MAX_ERROR_LENGTH` characters are kept
            in ``last_error``.
        :param retry_at: when the message may be leased again; ``None`` moves it to
            ``dead`` (a state apart from ``done``: it never ran to completion).
        :returns: False if the lease was no longer this one's (nothing written).
        """
        values: dict[str, Any] = {"last_error": error[:MAX_ERROR_LENGTH]}
        if retry_at is None:
            values["status"] = DEAD
        else:
            values.update(status=PENDING, available_at=aware(retry_at))
        with self.transaction(engine) as (conn, _):
            return self.leased_rows.update_leased(conn, message.id, message.claimed_by, values)

    @on_engine
    def release(self, engine: sa.Engine, messages: Sequence[StoredMessage]) -> int:
        """Give back leased rows that were not processed (graceful shutdown).

        They return to ``pending`` and their attempt is not counted. Rows whose lease is no
        longer the message's ``claimed_by`` are left alone.

        :returns: the number of rows released.
        """
        t = self.table
        leases = [(m.claimed_by, m.id) for m in messages]
        values = {
            "status": PENDING,
            "attempts": t.c.attempts - 1,
            "claimed_at": None,
            "claimed_by": None,
        }
        return self.leased_rows.update_leases(engine, leases, values)

    @on_engine
    def renew(
        self, engine: sa.Engine, tokens: Sequence[str], *, now: datetime.datetime | None = None
    ) -> int:
        """Start the leases ``tokens`` hold again at ``now``: their rows still
        ``processing`` get ``claimed_at = now``, so that none looks abandoned for another
        visibility timeout. The worker calls it when a database outage ends: the outage
        took that time from its leases, and a lease taken over counts a second attempt for
        a message that never failed.

        :param tokens: lease tokens (``claimed_by``) of the worker's batches in hand.
        :returns: the number of rows renewed.
        """
        if not tokens:
            return 0
        t = self.table
        renewed = (
            sa.update(t)
            .where(t.c.claimed_by.in_(list(tokens)), t.c.status == PROCESSING)
            .values(claimed_at=aware(now))
        )
        with self.transaction(engine) as (conn, _):
            return rowcount(conn, renewed)

    # -- maintenance ----------------------------------------------------------------------

    @on_engine
    def reap(
        self,
        engine: sa.Engine,
        *,
        visibility_timeout: float,
        max_attempts: int,
        consumer_name: str | None = None,
        now: datetime.datetime | None = None,
    ) -> ReapResult:
        """Return abandoned leases to ``pending``, or move them to ``dead``.

        A row ``processing`` for longer than ``visibility_timeout`` seconds lost its
        worker (a crash, a kill). With fewer than ``max_attempts`` attempts it goes back to
        ``pending`` (the attempt stays counted); otherwise it is ``dead``, with
        ``last_error`` saying so. Correctness does not depend on calling this: the lease
        itself takes abandoned rows; workers call it periodically so that a message that
        kills its worker every time reaches ``dead``.

        Rows are taken with the lease's locking (``SKIP LOCKED``), at most
        :data:`REAP_BATCH` of each kind per call: a row whose slow handler still holds its
        lock is alive and is skipped, never waited for.

        :returns: how many rows went back to pending and how many to dead.
        """
        positive(max_attempts, "max_attempts")
        stale_before = aware(now) - seconds(visibility_timeout, "visibility_timeout")

        def abandoned(exhausted: bool) -> CandidateQuery:
            return self.leased_rows.abandoned(stale_before, max_attempts, exhausted, consumer_name)

        lost = f"lease abandoned: no result within the visibility timeout ({visibility_timeout} s)"
        with self.transaction(engine) as (conn, dialect):
            dead = dialect.claim(
                conn, self.table, abandoned(True), REAP_BATCH, {"status": DEAD, "last_error": lost}
            )
            released = dialect.claim(
                conn,
                self.table,
                abandoned(False),
                REAP_BATCH,
                {"status": PENDING, "claimed_at": None, "claimed_by": None},
            )
        return ReapResult(released=len(released), dead=len(dead))


def _message(row: Mapping[Any, Any]) -> StoredMessage:
    return StoredMessage(
        id=int(row["id"]),
        message_id=row["message_id"],
        consumer_name=row["consumer_name"],
        payload=row["payload"],
        aggregate_id=row["aggregate_id"],
        message_type=row["message_type"],
        attempts=int(row["attempts"]),
        received_at=row["received_at"],
        claimed_by=row["claimed_by"],
    )


def _run_handler(
    session: Session, handler: Handler, message: StoredMessage, savepoints: bool, dialect_name: str
) -> BaseException | None:
    """Run one handler of a batch; its error if it failed alone (rolled back to its
    savepoint), ``None`` if it returned.

    :raises HandlerFailed: without ``savepoints``, for any error of the handler's own.
    :raises Exception: a transient error or a missing table, as raised (the caller's
        transaction rolls back as a whole).
    """
    nested = session.begin_nested() if savepoints else None
    try:
        call_handler(handler, session, message)
    except Exception as exc:
        if is_transient(exc, dialect_name) or _is_configuration(exc, dialect_name):
            raise
        if nested is None:
            raise HandlerFailed(message, exc) from exc
        nested.rollback()
        return exc
    if nested is not None:
        nested.commit()
    return None


def _is_configuration(exc: BaseException, dialect_name: str) -> bool:
    """A configuration error, or a driver error that is one (a missing table)."""
    if isinstance(exc, ConfigurationError):
        return True
    return isinstance(exc, DBAPIError) and backend_for(dialect_name).claim.is_missing_table(exc)
