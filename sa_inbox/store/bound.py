"""The store on one engine: :class:`BoundStore`, the :class:`~sa_inbox.store.MessageStore`
of a :class:`~sa_inbox.store.worker.Worker`."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session
from typing_extensions import deprecated

from ..outage import is_unavailable, probe_engine
from ..runner import is_transient
from .protocol import BatchFailure, BatchResult, Handler, ReapResult, RetryAt, StoredMessage
from .transitions import StoreTransitions

__all__ = ["BoundStore"]


class BoundStore:
    """An :class:`~sa_inbox.store.InboxStore` on one engine: the :class:`MessageStore` of a
    worker.

    :param store: the store (its table).
    :param engine: the database.
    :param session_factory: makes the handler's Session.
    """

    def __init__(
        self, store: StoreTransitions, engine: sa.Engine, session_factory: Callable[[], Session]
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

    def renew(self, tokens: Sequence[str], *, now: datetime.datetime) -> int:
        """Start the leases of ``tokens`` again at ``now`` (see :meth:`InboxStore.renew`)."""
        return self.store.renew(self.engine, tokens, now=now)

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
        return self.store.leased_rows.has_unfinished(self.engine, consumer_name)

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
