"""The outbox's own exceptions (all under :class:`~sa_inbox.exc.InboxError`)."""

from __future__ import annotations

from ..exc import ConfigurationError, InboxError

__all__ = ["AsyncPublisherInSyncRelay", "InvalidOutboxMessage", "InvalidRelayArgument"]


class InvalidOutboxMessage(InboxError, ValueError):
    """A message given to :meth:`~sa_inbox.outbox.Outbox.publish` cannot be recorded.

    Raised before any SQL for: a destination that is not a non-empty string of at most 255
    characters (no NUL, no surrounding whitespace); a payload that is neither bytes nor
    JSON-serialisable (NaN and Infinity refused); headers that are not a mapping of such
    strings to strings without NUL, CR or LF (NATS and AMQP carry headers as text lines or
    short strings); a ``message_id`` that is not a valid key (see
    :func:`sa_inbox.validation.validate_key`). Nothing has been written.
    """


class InvalidRelayArgument(InboxError, ValueError):
    """A relay setting (batch size, attempts, timeouts, back-off) is out of range, or a
    replay's filters choose no rows or a status that cannot be replayed."""


class AsyncPublisherInSyncRelay(ConfigurationError, TypeError):
    """The synchronous :class:`~sa_inbox.outbox.OutboxRelay` was given a publisher whose
    ``publish`` (or ``publish_many``) returns an awaitable (an ``async def``, or
    :class:`~sa_inbox.brokers.redis.RedisStreamPublisher` on a ``redis.asyncio`` client):
    nothing was published, and no confirm can be awaited. Raised to the caller, the batch's
    rows given back unpublished; use :class:`~sa_inbox.asyncio.AsyncOutboxRelay`, or a
    plain publisher."""
