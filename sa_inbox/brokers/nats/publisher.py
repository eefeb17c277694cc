"""The outbox relay's NATS JetStream publisher: ``js.publish`` with ``Nats-Msg-Id``, awaiting
the PubAck.

JetStream rules relied on (NATS docs, "JetStream" → "Model Deep Dive", sections
"Acknowledgement Models" and "Message Deduplication"): a publish to a subject a stream
captures is answered with a PubAck once the stream stored the message (when no stream
captures it there is no PubAck: nats-py 2 raises ``NoStreamResponseError``, verified on the
live server); a message whose ``Nats-Msg-Id`` the stream has seen within its
``duplicate_window`` (2 minutes by default) is not stored again and its PubAck says
``duplicate``. So a relay that republishes a row (killed between the PubAck and the mark)
inside that window does not even reach the consumer; after it, the consumer's inbox drops
the copy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from nats.aio.client import Client

from ...exc import NoPubAckError
from ...outbox.message import OutboxMessage
from ..startup import check_client
from .client import CLIENT
from .delivery import DEFAULT_KEY_HEADER

__all__ = [
    "DEFAULT_PUBLISH_TIMEOUT",
    "AsyncPublisher",
    "ConnectingJetStreamPublisher",
    "NoPubAckError",
    "Publisher",
]

logger = logging.getLogger("sa_inbox.brokers.nats")

#: Seconds to wait for a PubAck.
DEFAULT_PUBLISH_TIMEOUT = 5.0


class AsyncPublisher:
    """Publishes outbox messages to JetStream, each awaiting its PubAck (an outbox
    :class:`~sa_inbox.outbox.publisher.Publisher` for
    :class:`~sa_inbox.asyncio.AsyncOutboxRelay`).

    The subject is ``message.destination``; the headers are the outbox headers plus
    ``Nats-Msg-Id`` and ``key_header`` (the same header by default), both the outbox's
    ``message_id``, the key :class:`sa_inbox.brokers.nats.AsyncConsumer` deduplicates on.

    The caller owns the connection, and nats-py closes it for good after
    ``max_reconnect_attempts`` (60, 2 s apart, by default): connect with
    ``max_reconnect_attempts=-1`` so that a longer outage ends once the server is back
    (:class:`Publisher` opens its own connection again by itself).

    :param js: a nats-py ``JetStreamContext`` (``nc.jetstream()``).
    :param key_header: the header the consumers read the key from (default ``Nats-Msg-Id``).
    :param timeout: seconds to wait for the PubAck.
    :raises InvalidObject: for a ``js`` that is no JetStream context (the connection
        itself), before any request.
    """

    def __init__(
        self,
        js: Any,
        *,
        key_header: str = DEFAULT_KEY_HEADER,
        timeout: float = DEFAULT_PUBLISH_TIMEOUT,
    ) -> None:
        check_client(js, CLIENT, asynchronous=True, entry="AsyncPublisher()")
        self.js = js
        self.key_header = key_header
        self.timeout = timeout

    def headers(self, message: OutboxMessage) -> dict[str, str]:
        """The outbox headers, ``Nats-Msg-Id`` and ``key_header``."""
        headers = dict(message.headers)
        headers["Nats-Msg-Id"] = message.message_id
        headers[self.key_header] = message.message_id
        return headers

    async def publish(self, message: OutboxMessage) -> None:
        """Publish and await the PubAck.

        :raises nats.js.errors.NoStreamResponseError: no stream captures the subject.
        :raises nats.errors.TimeoutError: no PubAck within ``timeout``, and JetStream does not
            answer either (the server cannot be reached).
        :raises NoPubAckError: no PubAck within ``timeout``, JetStream answers (account
            info), and the publish sent once more (same ``Nats-Msg-Id``) gets none either.
        :raises nats.js.errors.APIError: the stream refused it.
        """
        import nats.errors

        try:
            await self._publish(message)
        except nats.errors.TimeoutError:
            if not await self._jetstream_answers():
                raise  # the server cannot be reached (reconnecting, down)
        else:
            return
        try:  # JetStream answers: once more (same Nats-Msg-Id) on the connection it answered
            await self._publish(message)
        except nats.errors.TimeoutError as error:
            raise NoPubAckError(
                f"no PubAck for {message.destination!r} within {self.timeout} s although"
                " JetStream answers: no stream stores the subject (a plain subscriber took"
                " the publish)"
            ) from error

    async def _publish(self, message: OutboxMessage) -> None:
        await self.js.publish(
            message.destination,
            message.payload,
            timeout=self.timeout,
            headers=self.headers(message),
        )

    async def _jetstream_answers(self) -> bool:
        """Whether JetStream answers an account info request within ``timeout``."""
        try:
            await asyncio.wait_for(self.js.account_info(), self.timeout)
        except Exception:  # unreachable, or JetStream not answering: an outage
            return False
        return True

    def is_unavailable(self, error: BaseException) -> bool:
        """Whether ``error`` says the server could not be reached: no PubAck in time
        (``nats.errors.TimeoutError``, a socket error like every ``OSError``), or the
        connection closed, stale, reconnecting, draining, its buffer full, or no server.
        ``NoStreamResponseError`` (no stream captures the subject), :class:`NoPubAckError`
        (no PubAck although JetStream answers) and ``APIError`` are the message's. See
        :func:`sa_inbox.outbox.publisher.broker_unavailable`."""
        import nats.errors

        unreachable = (
            OSError,
            nats.errors.NoServersError,
            nats.errors.ConnectionClosedError,
            nats.errors.StaleConnectionError,
            nats.errors.ConnectionReconnectingError,
            nats.errors.ConnectionDrainingError,
            nats.errors.OutboundBufferLimitError,
        )
        return isinstance(error, unreachable)

    async def close(self) -> None:
        """Nothing: the caller owns the connection."""


class ConnectingJetStreamPublisher:
    """:class:`AsyncPublisher` on a connection of its own to ``url``: for
    :class:`~sa_inbox.asyncio.AsyncOutboxRelay` (``sa-inbox relay`` on an async driver's
    URL), and run on a loop of its own by :class:`Publisher`.

    The connection is opened by the first publish, within ``timeout`` (else
    ``TimeoutError``: the server is unreachable, the relay gives the rows back and waits),
    so a relay starts while the server is down, as it does with Redis and RabbitMQ. nats-py
    reconnects by itself while the loop runs, up to ``max_reconnect_attempts``; a
    connection it then closed is opened again by the next publish. nats-py's errors are
    logged at ``DEBUG`` on ``sa_inbox.brokers.nats`` (its default prints a traceback per
    reconnect attempt): the relay logs the outage.

    :param url: a ``nats://`` URL.
    :param connect_options: more keyword arguments of ``nats.connect`` (e.g.
        ``max_reconnect_attempts``, ``reconnect_time_wait``); default none.
    :param settings: as :class:`AsyncPublisher` (``key_header``, ``timeout``).
    """

    def __init__(
        self, url: str, *, connect_options: Mapping[str, Any] | None = None, **settings: Any
    ) -> None:
        self.url = url
        self._options = {"error_cb": _log_nats_error, **(connect_options or {})}
        self._settings = settings
        self._nc: Any = None
        # on an unconnected client's context until publish connects: its settings checked now
        self._publisher = AsyncPublisher(Client().jetstream(), **settings)

    async def _connect(self) -> None:
        import nats

        connecting = nats.connect(self.url, **self._options)
        self._nc = await asyncio.wait_for(connecting, self._publisher.timeout)
        self._publisher = AsyncPublisher(self._nc.jetstream(), **self._settings)

    async def publish(self, message: OutboxMessage) -> None:
        """Publish and await the PubAck (see :meth:`AsyncPublisher.publish`), opening
        the connection first if it is not open (or nats-py closed it).

        :raises TimeoutError: the connection could not be opened within ``timeout``.
        :raises nats.errors.NoServersError: the connection could not be opened.
        """
        if self._nc is None or self._nc.is_closed:
            await self._connect()
        await self._publisher.publish(message)

    def is_unavailable(self, error: BaseException) -> bool:
        """As :meth:`AsyncPublisher.is_unavailable`."""
        return self._publisher.is_unavailable(error)

    async def close(self) -> None:
        """Drain the connection (if open)."""
        connection, self._nc = self._nc, None
        if connection is not None:
            await connection.close()


class Publisher:
    """:class:`ConnectingJetStreamPublisher` for the synchronous
    :class:`~sa_inbox.outbox.OutboxRelay` (``sa-inbox relay`` on a sync driver's URL): run
    on an event loop of its own, each publish to its PubAck. nats-py has no synchronous
    client. The connection is opened by the first publish within ``timeout``, and again
    after nats-py closed it, as there.

    :param url: a ``nats://`` URL.
    :param connect_options: more keyword arguments of ``nats.connect``; default none.
    :param settings: as :class:`AsyncPublisher` (``key_header``, ``timeout``).
    """

    def __init__(
        self, url: str, *, connect_options: Mapping[str, Any] | None = None, **settings: Any
    ) -> None:
        self.url = url
        self._loop = asyncio.new_event_loop()
        self._publisher = ConnectingJetStreamPublisher(
            url, connect_options=connect_options, **settings
        )

    def publish(self, message: OutboxMessage) -> None:
        """Publish and wait for the PubAck (see :meth:`ConnectingJetStreamPublisher.publish`).

        :raises TimeoutError: the connection could not be opened within ``timeout``.
        :raises nats.errors.NoServersError: the connection could not be opened.
        """
        self._loop.run_until_complete(self._publisher.publish(message))

    def is_unavailable(self, error: BaseException) -> bool:
        """As :meth:`AsyncPublisher.is_unavailable`."""
        return self._publisher.is_unavailable(error)

    def close(self) -> None:
        """Drain the connection (if open) and close the loop."""
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._publisher.close())
            self._loop.close()


async def _log_nats_error(error: Exception) -> None:
    """nats-py's ``error_cb``: one ``DEBUG`` line, no traceback."""
    logger.debug("nats: %s: %s", type(error).__name__, error)
