"""The outbox relay's Redis Streams publisher: ``XADD`` with the outbox's message_id field.

Redis rules relied on (the XADD command page, redis.io/docs/latest/commands/xadd/): ``XADD``
appends the entry and replies with its id once it is in the stream; that reply is the
confirm. It is in memory: how durable it is depends on the server's persistence
(``appendfsync``) and replication, which this publisher does not wait for (``WAIT`` would).
"""

from __future__ import annotations

from typing import Any

from ...outbox.message import OutboxMessage
from .core import DEFAULT_BODY_FIELD, DEFAULT_KEY_FIELD

__all__ = ["Publisher"]


class Publisher:
    """Publishes outbox messages to Redis streams (an outbox
    :class:`~sa_inbox.outbox.publisher.Publisher`), sync or asyncio by its client.

    Each message is one ``XADD destination * <headers...> key_field message_id body_field
    payload``: the stream is ``message.destination``, the outbox's ``message_id`` goes in
    ``key_field``, the field :class:`~sa_inbox.brokers.redis.Consumer` reads the
    producer's key from (never the entry id). Headers become fields; ``key_field`` and
    ``body_field`` win over a header of the same name.

    :param client: a ``redis.Redis`` (``publish`` returns when the reply came) or a
        ``redis.asyncio.Redis`` (``publish`` returns the awaitable; for
        :class:`~sa_inbox.asyncio.AsyncOutboxRelay`).
    :param key_field: the field of the producer's key (default ``message_id``).
    :param body_field: the field of the body (default ``body``).
    """

    def __init__(
        self,
        client: Any,
        *,
        key_field: str = DEFAULT_KEY_FIELD,
        body_field: str = DEFAULT_BODY_FIELD,
    ) -> None:
        self.client = client
        self.key_field = key_field
        self.body_field = body_field

    def fields(self, message: OutboxMessage) -> dict[str, Any]:
        """The entry's fields: the headers, then the key and the body."""
        return {
            **message.headers,
            self.key_field: message.message_id,
            self.body_field: message.payload,
        }

    def publish(self, message: OutboxMessage) -> Any:
        """``XADD`` the message; its reply (the entry id) is the confirm.

        :returns: the entry id, or for an asyncio client the awaitable of it.
        :raises redis.exceptions.RedisError: the server refused it (e.g. ``WRONGTYPE``: the
            key is not a stream) or could not be reached.
        """
        return self.client.xadd(message.destination, self.fields(message))

    def is_unavailable(self, error: BaseException) -> bool:
        """Whether ``error`` says the server could not be reached: redis-py's
        ``ConnectionError`` (refused, lost, still loading its data, login refused),
        ``TimeoutError``, or a socket error. A reply error (``WRONGTYPE``) is the message's.
        See :func:`sa_inbox.outbox.publisher.broker_unavailable`."""
        import redis.exceptions

        unreachable = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
        return isinstance(error, unreachable)

    def close(self) -> Any:
        """Close the client's connections (an awaitable for an asyncio client: its
        ``aclose()``, redis-py 5.0.1 having deprecated ``close()`` there)."""
        return getattr(self.client, "aclose", self.client.close)()
