"""The inbox store: receive a message durably (deduplicated), process it later.

The store-then-process half of the inbox pattern. A consumer only *receives*: it stores the
raw message with the same insert-or-skip as :meth:`sa_inbox.Inbox.claim` (so a redelivery
is skipped), commits, and acks at once. Workers (:mod:`sa_inbox.store.worker`) later *lease*
stored rows in short transactions, run the handler with the business change and mark the row
``done`` in one transaction.

Row states::

    pending ──lease──▶ processing ──handler commits──▶ done
       ▲                 │  │
       │   error, retry  │  └── error after max_attempts ──▶ dead
       └─────────────────┘          (replay: dead/done ──▶ pending)

The table is defined in :mod:`sa_inbox.store.schema`, the worker's view of a store in
:mod:`sa_inbox.store.protocol`, the worker in :mod:`sa_inbox.store.worker`.

Why one module of this size: every state transition of a row (receive, lease, complete,
fail, release, reap, replay) is a guarded statement on the same table, and reading them side
by side is how their guards (status, lease token, attempts) are kept consistent.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.expression import Executable
from typing_extensions import deprecated

from ..checks import check_session_factory, require
from ..claim import Bind, ClaimPath, PreparedInsert
from ..collision import (
    CollisionCheck,
    CollisionMode,
    payload_hash_of_row,
    store_digests,
)
from ..consumers import Consumers, consumers_flag, consumers_for
from ..dialects import ClaimDialect, backend_for
from ..dialects.store_claim import CandidateQuery, StoreClaimDialect
from ..exc import ClaimLost, ConfigurationError, InvalidStoreArgument
from ..guard import owned_transaction
from ..handlers import call_handler
from ..hooks import NOOP, InboxHooks
from ..outage import is_unavailable, probe_engine
from ..runner import is_transient, new_session
from ..schema import DEFAULT_MESSAGE_ID_LENGTH
from ..validation import positive_int, positive_seconds, validate_key
from .leases import LeasedRows, LeasePlans, LeaseShape, rowcount
from .protocol import (
    BatchFailure,
    BatchResult,
    Handler,
    HandlerFailed,
    Incoming,
    ReapResult,
    RetryAt,
    StoredMessage,
)
from .replay import ReplayFilter
from .schema import (
    DEAD,
    DEFAULT_CONSUMER,
    DEFAULT_STORE_TABLE,
    DONE,
    MAX_ERROR_LENGTH,
    PENDING,
    PROCESSING,
    REAP_BATCH,
    RECEIVE_COLUMNS,
    STATUSES,
    SerialisedJSON,
    inbox_store_table,
    utc_now,
)

__all__ = ["BoundStore", "InboxStore", "receive_insert"]

P = ParamSpec("P")
R = TypeVar("R")

#: The store table's leased rows: by consumer, ordered per consumer and aggregate in
#: ``(received_at, id)`` order; a lease returns a :class:`StoredMessage`'s columns
#: (``attempts`` as read before the lease's increment where there is no ``RETURNING``); a
#: replay resets dead or done rows, chosen by ids, status, arrival time and consumer.
_SHAPE = LeaseShape(
    group="consumer_name",
    partition=("consumer_name", "aggregate_id"),
    order=("received_at", "id"),
    columns=(
        "id",
        "message_id",
        "consumer_name",
        "payload",
        "aggregate_id",
        "message_type",
        "attempts",
        "received_at",
        "claimed_by",
    ),
    statuses=STATUSES,
    arrived="received_at",
    finished="processed_at",
    replayable=(DEAD, DONE),
    error=InvalidStoreArgument,
    pending=PENDING,
    processing=PROCESSING,
)


def _on_engine(
    method: Callable[Concatenate[InboxStore, sa.Engine, P], R],
) -> Callable[Concatenate[InboxStore, sa.Engine, P], R]:
    """Refuse, before any SQL, an ``engine`` that is not a synchronous Engine.

    :raises SyncAsyncMismatch: for an AsyncEngine (use :class:`~sa_inbox.asyncio.AsyncInboxStore`).
    :raises InvalidObject: for anything else.
    """
    entry = f"InboxStore.{method.__name__}()"

    @functools.wraps(method)
    def checked(store: InboxStore, engine: sa.Engine, /, *args: P.args, **kwargs: P.kwargs) -> R:
        require(
            engine,
            sa.Engine,
            "engine",
            entry=entry,
            instead="for an AsyncEngine use AsyncInboxStore(store) (or the Engine behind it)",
        )
        return method(store, engine, *args, **kwargs)

    return checked


class InboxStore:
    """The inbox store, defined on the caller's :class:`~sqlalchemy.MetaData`.

    :param metadata: the MetaData the table joins (see :func:`inbox_store_table`).
    :param table_name: the table's name.
    :param schema: the table's schema, or ``None``.
    :param message_id_length: length in characters of ``message_id`` and ``consumer_name``.
    :param on_collision: what a receive given a ``payload_hash`` does when the id is already
        stored with a different payload (see :class:`~sa_inbox.Inbox`): ``"raise"``
        (default) or ``"record"``.
    :param consumers: record which handler owns each consumer name in the consumers table
        (``inbox_consumers``, on the same MetaData; :mod:`sa_inbox.consumers`): a worker
        whose handler is not the owner is refused before it leases anything. ``False``: no
        such check.
    :raises InvalidTable: for a ``consumers`` that is not a bool (as for
        :class:`~sa_inbox.Inbox`).

    Example::

        store = InboxStore(Base.metadata)
        with Session.begin() as session:          # the consumer: store, commit, ack
            store.receive(session, msg.id, msg.body, aggregate_id=msg.key)
        ack(msg)

        Worker(store.bind(engine), handle_payment).run()    # the worker, elsewhere

    Receive runs in the caller's transaction; every other operation (lease, complete, fail,
    release, reap, replay) runs in its own short transaction on an engine.
    """

    __sa_inbox_needs_bind__ = True

    def __init__(
        self,
        metadata: sa.MetaData,
        *,
        table_name: str = DEFAULT_STORE_TABLE,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
        on_collision: CollisionMode = "raise",
        hooks: InboxHooks | None = None,
        consumers: bool = True,
    ) -> None:
        consumers = consumers_flag(consumers)
        #: Told of every receive as of a claim (new, duplicates, collisions, seconds:
        #: :mod:`sa_inbox.hooks`); default the no-op hooks.
        self.hooks: InboxHooks = NOOP if hooks is None else hooks
        self.table = inbox_store_table(
            metadata, table_name=table_name, schema=schema, message_id_length=message_id_length
        )
        #: The owner of each consumer name (:mod:`sa_inbox.consumers`), or None.
        self.consumers: Consumers | None = consumers_for(self.table, message_id_length, consumers)
        #: The duplicate path's payload comparison (:mod:`sa_inbox.collision`).
        self.collisions = CollisionCheck(
            self.table, ("payload",), payload_hash_of_row, on_collision
        )
        self.message_id_length = message_id_length
        # The receive statement per backend and its one-time checks, as Inbox.claim's.
        self._insert = PreparedInsert(self.table, build=receive_insert, row_keys=RECEIVE_COLUMNS)
        #: The receive is a claim: Inbox.claim's path, with the store's statement.
        self._receives = ClaimPath(self._insert, self.collisions, single=True)
        #: The leased-row statements on the table (:mod:`sa_inbox.store.leases`).
        self.leased_rows = LeasedRows(self.table, _SHAPE)
        # The batch's done-marking UPDATE per backend, built once (see _mark_done).
        self._done_statements: dict[StoreClaimDialect, sa.Update] = {}

    def bind(
        self, engine: sa.Engine, session_factory: Callable[[], Session] | None = None
    ) -> BoundStore:
        """This store on ``engine``, as the :class:`MessageStore` a worker uses.

        :param session_factory: makes the Session handed to the handler (default
            ``sessionmaker(engine)``); it must be bound to ``engine``'s database.
        :raises SyncAsyncMismatch: for an ``AsyncEngine`` (use
            ``AsyncInboxStore(store).bind(async_engine)`` and the
            :class:`~sa_inbox.asyncio.AsyncWorker`).
        :raises InvalidSessionFactory: for a factory the worker cannot use (an
            ``async_sessionmaker``, ``sessionmaker.begin``).
        """
        engine = require(
            engine,
            sa.Engine,
            "engine",
            entry="InboxStore.bind()",
            instead="for an AsyncEngine, AsyncInboxStore(store).bind(async_engine) runs with the "
            "AsyncWorker",
        )
        if session_factory is not None:
            check_session_factory(session_factory, entry="InboxStore.bind()", asynchronous=False)
        return BoundStore(self, engine, session_factory or sessionmaker(engine))

    # -- receive ------------------------------------------------------------------------

    def receive(
        self,
        bind: Bind,
        message_id: str,
        payload: Any,
        *,
        consumer_name: str = DEFAULT_CONSUMER,
        aggregate_id: str | None = None,
        message_type: str | None = None,
        now: datetime.datetime | None = None,
        payload_hash: bytes | None = None,
    ) -> bool:
        """Store one message in the caller's transaction; skip it if already stored.

        The same insert-or-skip statement as :meth:`sa_inbox.Inbox.claim` (``ON CONFLICT
        DO NOTHING``, ``INSERT IGNORE``, ``MERGE``) on the unique ``(message_id,
        consumer_name)``. Commit, then ack the broker; a duplicate is acked too.

        Cost: one statement, new or duplicate (MySQL/MariaDB included, see
        :meth:`~sa_inbox.dialects.MySQLClaim.claim_one`), built once per backend
        (:func:`receive_insert`) and, on PostgreSQL, MySQL/MariaDB and SQLite, compiled once
        per engine and sent as driver SQL (:class:`~sa_inbox.dialects.driver_sql.DriverSQL`:
        ``before_cursor_execute`` listeners see it, ``before_execute`` ones do not); the
        payload is serialised once, by the validation, and that text is what is bound.

        :param bind: a Session or Connection in the caller's transaction (never committed
            here).
        :param message_id: the producer-assigned id.
        :param payload: any JSON-serialisable value.
        :param consumer_name: the consumer (queue) the message is stored for.
        :param aggregate_id: the aggregate the message is about (per-aggregate ordering).
        :param message_type: optional type name, at most 255 characters.
        :param now: the receive time (aware); default the current UTC time.
        :param payload_hash: ``sa_inbox.collision.payload_hash(payload)``, to detect an id
            collision: on the duplicate path only, the stored payload is read (a locking
            read) and its digest compared (see ``on_collision``).
        :returns: True if the message is new, False if it was already stored (or a
            collision was recorded).
        :raises InvalidMessageId: for an invalid id, consumer name, aggregate id or type.
        :raises InvalidStoreArgument: for a payload that is not JSON, or a ``payload_hash``
            that is not the payload's (nothing is sent).
        :raises MessageIdCollision: with ``on_collision="raise"``, for an id stored with a
            different payload: roll back and nack.
        :raises TransientClaimError: on a deadlock or serialization failure: roll back and
            retry.
        """
        row = self._row(message_id, payload, aggregate_id, message_type, consumer_name, now)
        digests = store_digests({row["message_id"]: payload}, {row["message_id"]: payload_hash})
        return self._receives.one(bind, row, digests.get(row["message_id"]), self.hooks)

    def receive_many(
        self,
        bind: Bind,
        messages: Iterable[Incoming],
        *,
        consumer_name: str = DEFAULT_CONSUMER,
        now: datetime.datetime | None = None,
        payload_hashes: Mapping[str, bytes] | None = None,
    ) -> set[str]:
        """Store a batch (one broker poll) in the caller's transaction.

        The batch keeps its order (ids, hence the lease order, follow it); a message id that
        occurs twice keeps its first occurrence. PostgreSQL, SQLite and MariaDB insert up to
        1000 rows per statement with ``RETURNING``; MySQL and Oracle one row per statement.
        Two concurrent batches holding the same ids in different orders can deadlock:
        that is a :class:`~sa_inbox.exc.TransientClaimError`, retry the transaction.

        :param messages: the batch; every message is validated before any SQL is sent.
        :param payload_hashes: ``message_id -> payload_hash(payload)``, as :meth:`receive`'s
            ``payload_hash``; the ids skipped are compared in one locking read.
        :returns: the ids of the messages that were new.
        :raises InvalidMessageId, InvalidStoreArgument: as :meth:`receive`, for any message.
        :raises MessageIdCollision: as :meth:`receive`.
        """
        if isinstance(messages, Incoming):
            raise InvalidStoreArgument("receive_many takes an iterable of Incoming messages")
        when = _aware(now)
        rows: dict[str, Mapping[str, Any]] = {}
        payloads: dict[str, Any] = {}  # the first copy's payload per id, as given
        for message in messages:
            if not isinstance(message, Incoming):
                raise InvalidStoreArgument(f"expected Incoming, not {type(message).__name__}")
            row = self._row(
                message.message_id,
                message.payload,
                message.aggregate_id,
                message.message_type,
                consumer_name,
                when,
            )
            if row["message_id"] not in rows:
                rows[row["message_id"]] = row
                payloads[row["message_id"]] = message.payload
        if not rows:
            return set()
        digests = store_digests(payloads, payload_hashes or {})
        return self._receives.many(bind, list(rows.values()), digests, self.hooks)

    # -- lease and finish (each in its own transaction) ----------------------------------

    @_on_engine
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
        :raises InvalidStoreArgument: for a bad ``limit``, timeout or ``max_attempts``.
        """
        _positive_int(limit, "limit")
        _positive_int(max_attempts, "max_attempts")
        when = _aware(now)
        rows = self.leased_rows.lease(
            engine,
            token=validate_key(claimed_by, "claimed_by", 255),
            limit=limit,
            now=when,
            stale_before=when - _seconds(visibility_timeout, "visibility_timeout"),
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

        :raises InvalidStoreArgument: for a bad timeout or ``max_attempts``.
        :raises InvalidMessageId: for a bad ``consumer_name``.
        """
        _positive_int(max_attempts, "max_attempts")
        when = _aware(now)
        stale_before = when - _seconds(visibility_timeout, "visibility_timeout")
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

    @_on_engine
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
        done = {"status": DONE, "processed_at": _aware(now)}
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

    @_on_engine
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
        :raises Exception: a deadlock or serialization failure (:func:`sa_inbox.is_transient`)
            raised by any statement or the commit, including a handler's (InnoDB rolls
            back the whole transaction of a deadlock victim, savepoints included: MariaDB
            manual, "InnoDB Lock Modes", "Deadlocks"; so it is never caught at a
            savepoint); a handler that ended the transaction
            (:class:`~sa_inbox.exc.HandlerEndedTransaction`); a broken connection. Nothing
            committed in every case.
        """
        factory = session_factory or sessionmaker(engine)
        when = _aware(now)
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
            values.update(status=PENDING, available_at=_aware(failure.retry_at))
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

    @_on_engine
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
            values.update(status=PENDING, available_at=_aware(retry_at))
        with self.transaction(engine) as (conn, _):
            return self.leased_rows.update_leased(conn, message.id, message.claimed_by, values)

    @_on_engine
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

    # -- maintenance ----------------------------------------------------------------------

    @_on_engine
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
        _positive_int(max_attempts, "max_attempts")
        stale_before = _aware(now) - _seconds(visibility_timeout, "visibility_timeout")

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

    @_on_engine
    def replay(
        self,
        engine: sa.Engine,
        *,
        ids: Iterable[int] | None = None,
        status: str | None = None,
        received_from: datetime.datetime | None = None,
        received_before: datetime.datetime | None = None,
        consumer_name: str | None = None,
        now: datetime.datetime | None = None,
    ) -> int:
        """Reset chosen rows to ``pending`` so workers process them again.

        Rows are chosen by all the given filters together: ``ids`` (row ids), ``status``
        (``"dead"`` or ``"done"``), ``received_at`` in ``[received_from, received_before)``
        (aware datetimes), ``consumer_name``. Rows being
        processed are never touched, and neither are ``pending`` rows (they will be
        processed anyway). Replayed rows get ``attempts = 0`` and ``available_at = now``;
        ``last_error`` is kept. Replaying ``done`` rows processes their messages a second
        time: count them first with :meth:`replayable`.

        :returns: the number of rows reset.
        :raises InvalidStoreArgument: if no row filter is given (``consumer_name`` alone
            does not choose rows), ``status`` is neither ``"dead"`` nor ``"done"``, or a time
            is not an aware datetime.
        """
        chosen = ReplayFilter(ids, status, received_from, received_before, consumer_name)
        return self.leased_rows.replay(engine, chosen, _aware(now))

    @_on_engine
    def replayable(
        self,
        engine: sa.Engine,
        *,
        ids: Iterable[int] | None = None,
        status: str | None = None,
        received_from: datetime.datetime | None = None,
        received_before: datetime.datetime | None = None,
        consumer_name: str | None = None,
    ) -> int:
        """The number of rows :meth:`replay` with the same filters would reset now.

        :raises InvalidStoreArgument: as :meth:`replay`.
        """
        chosen = ReplayFilter(ids, status, received_from, received_before, consumer_name)
        return self.leased_rows.replayable(engine, chosen)

    @_on_engine
    def counts(self, engine: sa.Engine, consumer_name: str | None = None) -> dict[str, int]:
        """Rows per status (every status present, 0 when none)."""
        return self.leased_rows.counts(engine, consumer_name)

    @_on_engine
    def has_unfinished(self, engine: sa.Engine, *, consumer_name: str | None = None) -> bool:
        """Whether any row of the consumer is still ``pending`` or ``processing``.

        What :meth:`Worker.run(until_empty=True) <sa_inbox.store.worker.Worker.run>` waits for:
        a pending row may be waiting out its back-off, a processing row may be in another
        worker's hands (or abandoned, and leased again after the visibility timeout).
        ``dead`` and ``done`` rows are finished. One ``SELECT id … LIMIT 1`` on the claim
        index; with ``consumer_name=None`` (every consumer) the index cannot be used by
        its first column, and a store with no unfinished row is read to the end.

        :param engine: the store's database.
        :param consumer_name: the consumer, or ``None`` for every consumer.
        :returns: True if at least one such row exists now.
        """
        return self.leased_rows.has_unfinished(engine, consumer_name)

    # -- helpers --------------------------------------------------------------------------

    @contextmanager
    @_on_engine
    def transaction(self, engine: sa.Engine) -> Iterator[tuple[Connection, StoreClaimDialect]]:
        """A short store transaction on ``engine``: its isolation level, its write lock.

        :raises MissingTable: if the store table (or a column) does not exist.
        """
        with self.leased_rows.transaction(engine) as (conn, dialect):
            yield conn, dialect

    def _row(
        self,
        message_id: str,
        payload: Any,
        aggregate_id: str | None,
        message_type: str | None,
        consumer_name: str,
        now: datetime.datetime | None,
    ) -> dict[str, Any]:
        """The validated row of one message (the payload serialised, once), before any SQL."""
        when = _aware(now)
        length = self.message_id_length
        return {
            "message_id": validate_key(message_id, "message_id", length),
            "consumer_name": validate_key(consumer_name, "consumer_name", length),
            "aggregate_id": None if aggregate_id is None else _key(aggregate_id, "aggregate_id"),
            "message_type": None if message_type is None else _key(message_type, "message_type"),
            "payload": _json(payload),
            "status": PENDING,
            "received_at": when,
            "available_at": when,
            "attempts": 0,
        }

    def _prepared(self, conn: Connection) -> tuple[ClaimDialect, Executable]:
        """The insert-or-skip dialect and cached receive statement for ``conn``'s backend,
        after its one-time checks (:class:`~sa_inbox.claim.PreparedInsert`)."""
        return self._insert(conn)


class BoundStore:
    """An :class:`InboxStore` on one engine: the :class:`MessageStore` of a worker.

    :param store: the store (its table).
    :param engine: the database.
    :param session_factory: makes the handler's Session.
    """

    def __init__(
        self, store: InboxStore, engine: sa.Engine, session_factory: Callable[[], Session]
    ) -> None:
        self.store = store
        self.engine = engine
        self.session_factory = session_factory

    def lease(
        self,
        *,
        consumer_name: str | None,
        claimed_by: str,
        limit: int,
        visibility_timeout: float,
        max_attempts: int,
        ordered: bool,
        now: datetime.datetime,
        abandoned: bool = True,
    ) -> list[StoredMessage]:
        """Lease a batch (see :meth:`InboxStore.lease`)."""
        return self.store.lease(
            self.engine,
            consumer_name=consumer_name,
            claimed_by=claimed_by,
            limit=limit,
            visibility_timeout=visibility_timeout,
            max_attempts=max_attempts,
            ordered=ordered,
            now=now,
            abandoned=abandoned,
        )

    @deprecated("BoundStore.claim() is renamed lease(); claim() goes in the next release")
    def claim(self, **options: Any) -> list[StoredMessage]:
        """Deprecated name of :meth:`lease`; emits a :class:`DeprecationWarning`."""
        return self.lease(**options)

    def complete(self, message: StoredMessage, handler: Handler, *, now: datetime.datetime) -> bool:
        return self.store.complete(
            self.engine, message, handler, session_factory=self.session_factory, now=now
        )

    def complete_batch(
        self,
        messages: Sequence[StoredMessage],
        handler: Handler,
        *,
        now: datetime.datetime,
        savepoints: bool,
        failed: Sequence[BatchFailure],
        retry_at: RetryAt,
        stopping: Callable[[], bool],
    ) -> BatchResult:
        """One batch transaction (see :meth:`InboxStore.complete_batch`)."""
        return self.store.complete_batch(
            self.engine,
            messages,
            handler,
            session_factory=self.session_factory,
            now=now,
            savepoints=savepoints,
            failed=failed,
            retry_at=retry_at,
            stopping=stopping,
        )

    def fail(
        self,
        message: StoredMessage,
        error: str,
        *,
        retry_at: datetime.datetime | None,
        now: datetime.datetime,
    ) -> bool:
        return self.store.fail(self.engine, message, error, retry_at=retry_at, now=now)

    def release(self, messages: Sequence[StoredMessage]) -> int:
        return self.store.release(self.engine, messages)

    def reap(
        self,
        *,
        consumer_name: str | None,
        visibility_timeout: float,
        max_attempts: int,
        now: datetime.datetime,
    ) -> ReapResult:
        return self.store.reap(
            self.engine,
            consumer_name=consumer_name,
            visibility_timeout=visibility_timeout,
            max_attempts=max_attempts,
            now=now,
        )

    def has_unfinished(self, *, consumer_name: str | None) -> bool:
        """Whether a row of the consumer is pending or processing (see
        :meth:`InboxStore.has_unfinished`)."""
        return self.store.has_unfinished(self.engine, consumer_name=consumer_name)

    def ensure_owner(self, consumer_name: str, handler: object) -> None:
        """Make ``handler`` the owner of ``consumer_name`` (:mod:`sa_inbox.consumers`), or
        check that it is; nothing for a store built with ``consumers=False``.

        :raises ConsumerNameTaken: if another handler owns it.
        :raises MissingTable: if the consumers table does not exist.
        """
        if self.store.consumers is not None:
            self.store.consumers.ensure(self.engine, consumer_name, handler)

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a deadlock, serialization failure or busy database."""
        return is_transient(exc, self.engine.dialect.name)

    def is_unavailable(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the database cannot be reached now
        (:func:`sa_inbox.outage.is_unavailable`)."""
        return is_unavailable(exc, self.engine.dialect.name)

    def probe(self) -> None:
        """``SELECT 1`` on a new connection; raises while the database cannot be reached."""
        probe_engine(self.engine)()


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
    session: Session,
    handler: Handler,
    message: StoredMessage,
    savepoints: bool,
    dialect_name: str,
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


def _aware(now: datetime.datetime | None) -> datetime.datetime:
    if now is None:
        return utc_now()
    if not isinstance(now, datetime.datetime) or now.tzinfo is None:
        raise InvalidStoreArgument(f"now must be a time-zone aware datetime, not {now!r}")
    return now.astimezone(datetime.UTC)


def _seconds(value: float, name: str) -> datetime.timedelta:
    return datetime.timedelta(seconds=positive_seconds(value, name, InvalidStoreArgument))


def _positive_int(value: int, name: str) -> int:
    return positive_int(value, name, InvalidStoreArgument)


def _key(value: str, field: str) -> str:
    return validate_key(value, field, 255)


def _json(payload: Any) -> SerialisedJSON:
    """``payload`` as JSON text, if JSON can represent it exactly (no NaN/Infinity).

    The one serialisation of a received payload: its text is what the receive statement
    binds (:func:`receive_insert`), so the column type does not serialise it again.

    :raises InvalidStoreArgument: if it cannot.
    """
    try:
        return SerialisedJSON(json.dumps(payload, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidStoreArgument(f"payload is not JSON-serialisable: {exc}") from exc


def receive_insert(dialect: ClaimDialect, table: sa.Table) -> Executable:
    """The store's single-row insert-or-skip for ``dialect``, its payload bound as JSON text.

    The receive serialises the payload once, to validate it (:func:`_json`); binding that
    text instead of the value saves the JSON type's second ``json.dumps`` on every receive.
    On an ``INSERT`` (PostgreSQL, MySQL/MariaDB, SQLite) the payload's value is the
    ``Text`` bind parameter ``payload`` through :meth:`ClaimDialect.json_text` (a cast to
    ``JSON`` on PostgreSQL), ``status`` and ``attempts`` are the literals ``'pending'`` and
    ``0`` in its text, and the statement is ``inline()`` (SQLAlchemy docs,
    ``Insert.inline``: no implicit ``RETURNING`` of the new ``id``); Oracle's ``MERGE``
    binds through :class:`JSONText`, which takes a :class:`SerialisedJSON` as it is.

    :param dialect: the backend's claim dialect.
    :param table: the store table.
    """
    statement = dialect.insert_or_skip(table)
    if isinstance(statement, sa.Insert):
        text = sa.bindparam("payload", type_=sa.Text())
        statement = statement.values(
            payload=dialect.json_text(text, table.c.payload),
            # The constants of every receive, in the SQL text rather than bound per call
            # (the row's own values for these keys are then not sent).
            status=sa.literal_column(f"'{PENDING}'", sa.String()),
            attempts=sa.literal_column("0", sa.Integer()),
        )
        # inline(): no implicit "RETURNING id" (SQLAlchemy adds it on PostgreSQL to fetch
        # the new identity, which a receive never uses: a result set to send, fetch and
        # read on every receive); an explicit .returning() (receive_many) still applies.
        statement = statement.inline()
    return statement
