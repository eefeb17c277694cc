"""The claim on an AsyncSession or AsyncConnection: :class:`AsyncInbox`.

Each method runs the synchronous :class:`~sa_inbox.Inbox` method (which validates before it
sends anything) on the Session or Connection behind the async one, through
``run_sync``: the same single statement, the same dialect code, the same typed errors.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from ..checks import unwrap
from ..claim import Inbox, message_id_of
from ..hooks import InboxHooks
from . import consumers
from ._bridge import AsyncBind, on_sync_bind

__all__ = ["AsyncInbox"]

M = TypeVar("M")


class AsyncInbox:
    """The asyncio face of an :class:`~sa_inbox.Inbox` (in the manner of SQLAlchemy's
    ``AsyncSession`` around a ``Session``).

    :param inbox: the inbox (its table, strategy and per-engine checks are shared).
    :raises InvalidObject: if ``inbox`` is not an :class:`~sa_inbox.Inbox` (an AsyncInbox
        is unwrapped).

    Each method checks its ``bind`` when called, before it returns the awaitable: a
    synchronous Session raises :class:`~sa_inbox.exc.InvalidBind` at once (a coroutine
    that is never awaited would make no claim, and ``if inbox.claim(...)`` would be true).

    Example::

        inbox = AsyncInbox(Inbox(Base.metadata))
        async with Session.begin() as session:           # an async_sessionmaker
            if await inbox.claim(session, message.id, "billing"):
                await apply_payment(session, message)
        await message.ack()                              # only after the commit
    """

    __sa_inbox_asyncio_face__ = "sync_inbox"

    def __init__(self, inbox: Inbox | AsyncInbox) -> None:
        #: The synchronous inbox this one runs.
        self.sync_inbox = unwrap(inbox, Inbox, "inbox", entry="AsyncInbox()")
        self.table = self.sync_inbox.table

    def claim(
        self,
        bind: AsyncBind,
        message_id: str,
        consumer_name: str,
        *,
        message_type: str | None = None,
        correlation_id: str | None = None,
        payload_hash: bytes | None = None,
    ) -> Coroutine[Any, Any, bool]:
        """Claim ``message_id`` for ``consumer_name`` in the caller's transaction.

        :param bind: an AsyncSession, async_scoped_session or AsyncConnection.
        :returns: True if this transaction now owns the message; False for a duplicate.
        :raises: as :meth:`sa_inbox.Inbox.claim`; :class:`~sa_inbox.exc.InvalidBind` for
            any other ``bind``.
        """
        # Inbox.claim validates before it sends anything; validating here too cost a third
        # of the async claim's overhead over a hand-written insert-or-skip.
        return on_sync_bind(
            bind,
            self.sync_inbox.claim,
            message_id,
            consumer_name,
            message_type=message_type,
            correlation_id=correlation_id,
            payload_hash=payload_hash,
        )

    def claim_many(
        self,
        bind: AsyncBind,
        message_ids: Iterable[str],
        consumer_name: str,
        *,
        payload_hashes: Mapping[str, bytes | None] | None = None,
    ) -> Coroutine[Any, Any, set[str]]:
        """Claim a batch of ids; return exactly those newly claimed (see
        :meth:`sa_inbox.Inbox.claim_many`, which raises
        :class:`~sa_inbox.exc.MessageIdCollision` as it does)."""
        ids = list(message_ids) if not isinstance(message_ids, str | bytes) else message_ids
        return on_sync_bind(
            bind, self.sync_inbox.claim_many, ids, consumer_name, payload_hashes=payload_hashes
        )

    def claim_batch(
        self,
        bind: AsyncBind,
        messages: Iterable[M],
        consumer_name: str,
        *,
        key: Callable[[M], str] = message_id_of,
        payload_hash: Callable[[M], bytes | None] | None = None,
    ) -> Coroutine[Any, Any, list[M]]:
        """Claim one poll; return the messages to apply, the first copy of each newly
        claimed id in poll order (see :meth:`sa_inbox.Inbox.claim_batch`)."""
        batch = list(messages) if not isinstance(messages, str | bytes) else messages
        return on_sync_bind(
            bind,
            self.sync_inbox.claim_batch,
            batch,
            consumer_name,
            key=key,
            payload_hash=payload_hash,
        )

    def is_processed(
        self, bind: AsyncBind, message_id: str, consumer_name: str, *, causal: bool = False
    ) -> Coroutine[Any, Any, bool]:
        """Whether a committed (or this transaction's) claim exists for the message; with
        ``causal``, read after every claim the cluster committed (see
        :meth:`sa_inbox.Inbox.is_processed`)."""
        return on_sync_bind(
            bind, self.sync_inbox.is_processed, message_id, consumer_name, causal=causal
        )

    def hand_over(
        self, engine: AsyncEngine, consumer_name: str, handler: object
    ) -> Coroutine[Any, Any, str | None]:
        """Give ``consumer_name`` to ``handler``: the asyncio spelling of
        ``inbox.consumers.hand_over(engine, consumer_name, handler)``
        (:meth:`sa_inbox.consumers.Consumers.hand_over`).

        :param engine: the AsyncEngine of the consumers table.
        :returns: (awaited) the previous owner's name, or None.
        :raises SyncAsyncMismatch: for a synchronous Engine, at the call.
        :raises InvalidTable: for an inbox built with ``consumers=False``, at the call.
        """
        return consumers.hand_over(
            self.sync_inbox.consumers,
            engine,
            consumer_name,
            handler,
            entry="AsyncInbox.hand_over()",
        )

    @property
    def hooks(self) -> InboxHooks:
        """The synchronous inbox's hooks (:attr:`sa_inbox.Inbox.hooks`)."""
        return self.sync_inbox.hooks

    def validate(self, message_id: str, consumer_name: str, **extra: Any) -> dict[str, Any]:
        """Validate a claim's values without sending anything (see
        :meth:`sa_inbox.Inbox.validate`)."""
        return self.sync_inbox.validate(message_id, consumer_name, **extra)
