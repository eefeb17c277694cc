"""The in-memory inbox store, for unit tests of a handler and the store's worker.

:class:`MemoryStore` follows the same rules as the database store (deduplicated receive,
leasable rows, attempts counted at lease time, lease tokens, back-off, dead letters, reap,
replay, per-aggregate ordering), so a handler and the :class:`~sa_inbox.store.worker.Worker`
around it can be unit-tested without a database::

    store = MemoryStore(context=fake_repository)
    store.receive("pay-1", {"amount": 10}, aggregate_id="acct-1")
    Worker(store, handle_payment, poll_interval=0.01).run(until_empty=True, handle_signals=False)
    assert store.counts()["done"] == 1

The handler gets ``context`` where the database store passes a Session. The store is
thread-safe; it is not durable and not shared between processes.
"""

from __future__ import annotations

import copy
import datetime
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from typing_extensions import deprecated

from ..exc import ConfigurationError, InvalidArgument
from ..handlers import call_handler
from ..store.protocol import (
    BatchFailure,
    BatchResult,
    Handler,
    Incoming,
    ReapResult,
    RetryAt,
    StoredMessage,
)
from ..store.schema import (
    DEAD,
    DEFAULT_CONSUMER,
    DONE,
    MAX_ERROR_LENGTH,
    PENDING,
    PROCESSING,
    STATUSES,
    utc_now,
)
from ..store.values import lease_window
from ..validation import validate_key

__all__ = ["MemoryRow", "MemoryStore"]


@dataclass
class MemoryRow:
    """One stored message in a :class:`MemoryStore`: the columns of the store table."""

    id: int
    consumer_name: str
    message_id: str
    payload: Any
    aggregate_id: str | None
    message_type: str | None
    received_at: datetime.datetime
    available_at: datetime.datetime
    status: str = PENDING
    attempts: int = 0
    claimed_at: datetime.datetime | None = None
    claimed_by: str | None = None
    last_error: str | None = None
    processed_at: datetime.datetime | None = None
    history: list[str] = field(default_factory=list)

    def key(self) -> tuple[datetime.datetime, int]:
        return (self.received_at, self.id)


class MemoryStore:
    """An in-memory :class:`~sa_inbox.store.MessageStore`.

    :param context: what the handler receives in place of a Session (default ``None``).
    :param clock: the receive clock (aware UTC); workers pass their own ``now``.
    """

    def __init__(
        self, context: Any = None, *, clock: Callable[[], datetime.datetime] = utc_now
    ) -> None:
        self.context = context
        self.clock = clock
        self.rows: list[MemoryRow] = []
        self._keys: set[tuple[str, str]] = set()
        self._running: set[int] = set()
        self._lock = threading.RLock()

    # -- receive ------------------------------------------------------------------------

    def receive(
        self,
        message_id: str,
        payload: Any,
        *,
        consumer_name: str = DEFAULT_CONSUMER,
        aggregate_id: str | None = None,
        message_type: str | None = None,
    ) -> bool:
        """Store a message unless ``(message_id, consumer_name)`` is already stored.

        :returns: True if it was new.
        :raises InvalidMessageId, InvalidArgument: as
            :meth:`sa_inbox.store.InboxStore.receive`.
        """
        message = Incoming(message_id, payload, aggregate_id, message_type)
        return bool(self._store([self._checked(message, consumer_name)]))

    def receive_many(
        self, messages: Iterable[Incoming], *, consumer_name: str = DEFAULT_CONSUMER
    ) -> set[str]:
        """Store a batch in order; return the ids that were new.

        Every message is checked before any is stored, as the database store checks the
        whole batch before any SQL: a batch with one invalid message stores nothing.

        :raises InvalidMessageId, InvalidArgument: as :meth:`receive`, for any message.
        """
        if isinstance(messages, Incoming):
            raise InvalidArgument("receive_many takes an iterable of Incoming messages")
        checked = []
        for message in messages:
            if not isinstance(message, Incoming):
                raise InvalidArgument(f"expected Incoming, not {type(message).__name__}")
            checked.append(self._checked(message, consumer_name))
        return self._store(checked)

    @staticmethod
    def _checked(message: Incoming, consumer_name: str) -> MemoryRow:
        """A new row for ``message``, validated as the database store validates it."""
        message_id = validate_key(message.message_id, "message_id", 255)
        consumer_name = validate_key(consumer_name, "consumer_name", 255)
        for value, label in (
            (message.aggregate_id, "aggregate_id"),
            (message.message_type, "message_type"),
        ):
            if value is not None:
                validate_key(value, label, 255)
        try:
            stored = json.loads(json.dumps(message.payload, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"payload is not JSON-serialisable: {exc}") from exc
        epoch = datetime.datetime.min.replace(tzinfo=datetime.UTC)
        return MemoryRow(
            id=0,
            consumer_name=consumer_name,
            message_id=message_id,
            payload=stored,
            aggregate_id=message.aggregate_id,
            message_type=message.message_type,
            received_at=epoch,
            available_at=epoch,
        )

    def _store(self, rows: list[MemoryRow]) -> set[str]:
        """Append the rows whose key is new, in order; return their message ids."""
        new: set[str] = set()
        with self._lock:
            for row in rows:
                key = (row.message_id, row.consumer_name)
                if key in self._keys:
                    continue
                now = self.clock()
                self._keys.add(key)
                row.id, row.received_at, row.available_at = len(self.rows) + 1, now, now
                self.rows.append(row)
                new.add(row.message_id)
        return new

    # -- the MessageStore protocol ----------------------------------------------------

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
        """Lease as :meth:`sa_inbox.store.InboxStore.lease` does, with its argument checks
        (``abandoned=False``: pending rows only).

        :raises InvalidArgument: for a ``limit`` or ``max_attempts`` that is not a
            positive int, or a ``visibility_timeout`` that is not positive seconds.
        :raises InvalidMessageId: for an invalid ``claimed_by`` or ``consumer_name``.
        """
        claimed_by, stale_before = lease_window(
            claimed_by, limit, max_attempts, visibility_timeout, now
        )
        if consumer_name is not None:
            consumer_name = validate_key(consumer_name, "consumer_name", 255)
        with self._lock:
            candidates = [
                row
                for row in sorted(self.rows, key=MemoryRow.key)
                if consumer_name in (None, row.consumer_name)
                and row.id not in self._running
                and (abandoned or row.status == PENDING)
                and self._leasable(row, now, stale_before, max_attempts)
                and not (ordered and self._blocked(row))
            ][:limit]
            for row in candidates:
                row.status, row.claimed_at, row.claimed_by = PROCESSING, now, claimed_by
                row.attempts += 1
                row.history.append(f"leased by {claimed_by}")
            return [_message(row) for row in candidates]

    @deprecated("MemoryStore.claim() is renamed lease(); claim() goes in the next release")
    def claim(self, **options: Any) -> list[StoredMessage]:
        """Deprecated name of :meth:`lease`; emits a :class:`DeprecationWarning`."""
        return self.lease(**options)

    def complete(self, message: StoredMessage, handler: Handler, *, now: datetime.datetime) -> bool:
        """Run ``handler(context, message)``; mark ``done`` only if it returns.

        A handler whose result is awaitable is refused (:class:`~sa_inbox.exc.AsyncHandlerError`,
        a failed attempt), as by the database store.

        While the handler runs the row is held (as the database's row lock holds it): no
        lease takes it, however long the handler runs.
        """
        with self._lock:
            row = self._held(message)
            if row is None:
                return False
            self._running.add(row.id)
        try:
            payload = copy.deepcopy(message.payload)
            call_handler(handler, self.context, replace(message, payload=payload))
        finally:
            with self._lock:
                self._running.discard(row.id)
        with self._lock:
            row.status, row.processed_at = DONE, now
            row.history.append("done")
        return True

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
        """A batch as :meth:`sa_inbox.store.InboxStore.complete_batch` commits it, without
        the transaction: memory has no rollback, so every handler is isolated (as with
        ``savepoints``) whatever ``savepoints`` says, and each message's outcome is
        recorded as its handler ends.

        :returns: the :class:`~sa_inbox.store.protocol.BatchResult`, as the database's.
        """
        earlier = {failure.message.id: failure for failure in failed}
        done: list[StoredMessage] = []
        failures: list[BatchFailure] = []
        lost: list[StoredMessage] = []
        released: list[StoredMessage] = []
        for message in messages:
            if message.id in earlier:
                failures.append(earlier[message.id])
            elif released or stopping():
                released.append(message)
            else:
                self._run_in_batch(message, handler, now, retry_at, done, failures, lost)
        for failure in failures:
            text = f"{type(failure.error).__name__}: {failure.error}"
            self.fail(failure.message, text, retry_at=failure.retry_at, now=now)
        self.release(released)
        return BatchResult(tuple(done), tuple(failures), tuple(lost), tuple(released))

    def _run_in_batch(
        self,
        message: StoredMessage,
        handler: Handler,
        now: datetime.datetime,
        retry_at: RetryAt,
        done: list[StoredMessage],
        failures: list[BatchFailure],
        lost: list[StoredMessage],
    ) -> None:
        """One message of :meth:`complete_batch`: its outcome appended to its list."""
        try:
            completed = self.complete(message, handler, now=now)
        except ConfigurationError:
            raise
        except Exception as exc:
            failures.append(BatchFailure(message, exc, retry_at(message)))
            return
        (done if completed else lost).append(message)

    def fail(
        self,
        message: StoredMessage,
        error: str,
        *,
        retry_at: datetime.datetime | None,
        now: datetime.datetime,
    ) -> bool:
        """Record a failed attempt as :meth:`sa_inbox.store.InboxStore.fail` does."""
        with self._lock:
            row = self._held(message)
            if row is None:
                return False
            row.last_error = error[:MAX_ERROR_LENGTH]
            if retry_at is None:
                row.status = DEAD
            else:
                row.status, row.available_at = PENDING, retry_at
            row.history.append(f"failed: {row.status}")
            return True

    def release(self, messages: Sequence[StoredMessage]) -> int:
        """Give back unstarted leases; the attempt is not counted."""
        released = 0
        with self._lock:
            for message in messages:
                row = self._held(message)
                if row is not None:
                    row.status, row.claimed_at, row.claimed_by = PENDING, None, None
                    row.attempts -= 1
                    row.history.append("released")
                    released += 1
        return released

    def reap(
        self,
        *,
        consumer_name: str | None,
        visibility_timeout: float,
        max_attempts: int,
        now: datetime.datetime,
    ) -> ReapResult:
        """Abandoned leases back to pending, or to dead once their attempts are used."""
        stale_before = now - datetime.timedelta(seconds=visibility_timeout)
        released = dead = 0
        with self._lock:
            for row in self.rows:
                if (
                    row.status != PROCESSING
                    or row.id in self._running
                    or row.claimed_at is None
                    or row.claimed_at >= stale_before
                    or consumer_name not in (None, row.consumer_name)
                ):
                    continue
                if row.attempts >= max_attempts:
                    row.status, row.last_error = DEAD, "lease abandoned (visibility timeout)"
                    dead += 1
                else:
                    row.status, row.claimed_at, row.claimed_by = PENDING, None, None
                    released += 1
        return ReapResult(released=released, dead=dead)

    def has_unfinished(self, *, consumer_name: str | None = None) -> bool:
        """Whether a row of the consumer (``None``: any) is pending or processing."""
        with self._lock:
            return any(
                row.status in (PENDING, PROCESSING) and consumer_name in (None, row.consumer_name)
                for row in self.rows
            )

    def is_transient(self, exc: BaseException) -> bool:
        """Never: the memory store has no deadlocks."""
        return False

    # -- inspection and replay ----------------------------------------------------------

    def replay(
        self,
        *,
        ids: Iterable[int] | None = None,
        status: str | None = None,
        now: datetime.datetime | None = None,
    ) -> int:
        """Reset the chosen dead or done rows to pending with 0 attempts (as the store)."""
        if ids is None and status is None:
            raise InvalidArgument("replay needs ids or a status")
        if status is not None and status not in (DEAD, DONE):
            raise InvalidArgument(f"replay status must be dead or done: {status!r}")
        chosen = None if ids is None else set(ids)
        count = 0
        with self._lock:
            for row in self.rows:
                if row.status not in (DEAD, DONE) or (status is not None and row.status != status):
                    continue
                if chosen is not None and row.id not in chosen:
                    continue
                row.status, row.attempts, row.available_at = PENDING, 0, now or self.clock()
                row.claimed_at = row.claimed_by = row.processed_at = None
                count += 1
        return count

    def counts(self) -> dict[str, int]:
        """Rows per status."""
        with self._lock:
            return {status: sum(r.status == status for r in self.rows) for status in STATUSES}

    def row(self, message_id: str, consumer_name: str = DEFAULT_CONSUMER) -> MemoryRow:
        """The row of a message (raises ``KeyError`` if it was never received)."""
        with self._lock:
            for row in self.rows:
                if (row.message_id, row.consumer_name) == (message_id, consumer_name):
                    return row
        raise KeyError(message_id)

    # -- rules --------------------------------------------------------------------------

    @staticmethod
    def _leasable(
        row: MemoryRow,
        now: datetime.datetime,
        stale_before: datetime.datetime,
        max_attempts: int,
    ) -> bool:
        if row.status == PENDING:
            return row.available_at <= now
        return (
            row.status == PROCESSING
            and row.claimed_at is not None
            and row.claimed_at < stale_before
            and row.attempts < max_attempts
        )

    def _blocked(self, row: MemoryRow) -> bool:
        if row.aggregate_id is None:
            return False
        return any(
            other.id != row.id
            and other.consumer_name == row.consumer_name
            and other.aggregate_id == row.aggregate_id
            and (
                other.status == PROCESSING or (other.status == PENDING and other.key() < row.key())
            )
            for other in self.rows
        )

    def _held(self, message: StoredMessage) -> MemoryRow | None:
        row = self.rows[message.id - 1]
        if row.status == PROCESSING and row.claimed_by == message.claimed_by:
            return row
        return None


def _message(row: MemoryRow) -> StoredMessage:
    return StoredMessage(
        id=row.id,
        message_id=row.message_id,
        consumer_name=row.consumer_name,
        payload=copy.deepcopy(row.payload),
        aggregate_id=row.aggregate_id,
        message_type=row.message_type,
        attempts=row.attempts,
        received_at=row.received_at,
        claimed_by=row.claimed_by or "",
    )
