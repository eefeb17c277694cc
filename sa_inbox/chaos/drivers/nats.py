"""The chaos run's NATS JetStream driver: :class:`Driver` (``nats://`` URLs).

The run's queue ``name`` becomes a stream ``name`` (subject ``<name>.in``), a dead-letter
stream ``<name>_dead`` (subject ``<name>.dead``) and a durable pull consumer
``<name>_consumer`` shared by every consumer process, as
:mod:`sa_inbox.brokers.nats` tells users to set them up.

nats-py is asyncio only, while :meth:`Driver.consume` receives the run's sync
``session_factory`` and sync ``handler``: it runs :func:`sa_inbox.brokers.nats.consume` with
:func:`asyncio.run`, on an :class:`~sqlalchemy.ext.asyncio.AsyncEngine` made from the
factory's bind URL with its driver swapped for the async peer (``postgresql+psycopg`` stays,
psycopg 3 being async too; ``mysql+pymysql`` → ``mysql+aiomysql``; ``sqlite`` →
``sqlite+aiosqlite``: :data:`ASYNC_PEERS`), and runs the sync handler
inside the async session's transaction as ``await session.run_sync(lambda s: handler(s,
delivery))`` (SQLAlchemy runs it on the same connection in a greenlet).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterable

from sqlalchemy.orm import Session

from ..._optional import optional_dependencies
from ...brokers import Delivery
from ...exc import UnsupportedBackend
from . import ChaosDriver, Consumption

with optional_dependencies(__name__, "nats", "nats", "greenlet"):
    import nats
    from nats.js import JetStreamContext
    from nats.js.errors import NotFoundError
    from sqlalchemy.ext.asyncio import (
        AsyncEngine,
        AsyncSession,
        async_sessionmaker,
        create_async_engine,
    )

    from ...brokers.nats import (
        DEAD_LETTER_MESSAGE_ID,
        DEFAULT_KEY_HEADER,
        AsyncConsumer,
        backoff,
        consumer_config,
        ensure_consumer,
    )

__all__ = ["ASYNC_PEERS", "CHAOS_ACK_WAIT", "Driver", "async_engine_for"]

#: Seconds JetStream waits for a consumer's ack in the chaos run: a killed consumer's
#: fetched messages come back to the others this soon.
CHAOS_ACK_WAIT = 2.0

#: The async DBAPI driver for each sync one (``URL.get_driver_name()``). (The CLI's worker
#: has the same table by full driver name; the library may not import the CLI.)
ASYNC_PEERS = {
    "pysqlite": "aiosqlite",
    "psycopg": "psycopg",  # psycopg 3 is sync and async
    "psycopg2": "asyncpg",
    "pymysql": "aiomysql",
    "mysqldb": "aiomysql",
}


def async_engine_for(session_factory: Callable[[], Session]) -> AsyncEngine:
    """An AsyncEngine on the database of ``session_factory``'s bind, through the async peer
    of its driver.

    :raises UnsupportedBackend: if the bind's driver has no async peer here.
    """
    with session_factory() as session:
        url = session.get_bind().engine.url
    driver = ASYNC_PEERS.get(url.get_driver_name())
    if driver is None:
        raise UnsupportedBackend(
            f"the NATS consumer is asyncio only, and {url.drivername} has no async peer here "
            f"(known: {', '.join(sorted(ASYNC_PEERS))})"
        )
    return create_async_engine(url.set(drivername=f"{url.get_backend_name()}+{driver}"))


class Driver(ChaosDriver):
    """:class:`~sa_inbox.chaos.drivers.ChaosDriver` on NATS JetStream.

    :param url: the ``nats://`` server URL.
    :param ack_wait: seconds, the consumer's visibility timeout (:data:`CHAOS_ACK_WAIT`).
    :param key_header: the header the producer's id is published in and the consumer reads
        (default ``Nats-Msg-Id``). With it JetStream itself drops a duplicate publish inside
        the stream's ``duplicate_window`` ("JetStream Model Deep Dive: Message
        Deduplication"), so the run's duplicate publishes never reach the consumers and the
        inbox dedups the redeliveries only; name another header (``Idempotency-Key``), or
        pass a short ``duplicate_window``, to send them to the inbox too.
    :param duplicate_window: seconds, the stream's ``duplicate_window``; None for the
        server's default (2 minutes).
    """

    def __init__(
        self,
        url: str,
        *,
        ack_wait: float = CHAOS_ACK_WAIT,
        key_header: str = DEFAULT_KEY_HEADER,
        duplicate_window: float | None = None,
    ) -> None:
        self.url = url
        self.ack_wait = ack_wait
        self.key_header = key_header
        self.duplicate_window = duplicate_window

    def prepare(self, name: str, *, max_deliveries: int) -> None:
        """Fresh stream and dead-letter stream (old ones deleted), and the durable consumer
        (``max_deliver`` -1: the limit is sa-inbox's, see
        :func:`~sa_inbox.brokers.nats.consumer_config`)."""
        asyncio.run(self._prepare(name))

    def publish(self, name: str, messages: Iterable[tuple[str, bytes]]) -> None:
        """Publishes each body with its message_id in ``key_header``, awaiting each PubAck."""
        asyncio.run(self._publish(name, messages))

    def run_consumer(self, name: str, consumption: Consumption, stop: threading.Event) -> None:
        """:class:`sa_inbox.brokers.nats.AsyncConsumer` until ``stop`` is set (see the module)."""
        engine = async_engine_for(consumption.session_factory)
        handler = consumption.handler

        async def run_sync_handler(session: AsyncSession, delivery: Delivery) -> None:
            await session.run_sync(lambda sync_session: handler(sync_session, delivery))

        async def run() -> None:
            try:
                async with self._jetstream() as js:
                    await AsyncConsumer(
                        js,
                        name,
                        _durable(name),
                        **{
                            **consumption.adapter_options(
                                dead_letter=_dead_subject(name),
                                key_source=self.key_header,
                                retry_delay=backoff(0.1, 1.0),
                            ),
                            "session_factory": async_sessionmaker(engine),
                            "handler": run_sync_handler,
                        },
                        ack_wait=self.ack_wait,
                        fetch_timeout=0.5,
                    ).run(stop)
            finally:
                await engine.dispose()

        asyncio.run(run())

    def unsettled(self, name: str) -> int:
        """``num_pending`` + ``num_ack_pending`` of the durable consumer (the server's
        consumer info): messages not yet delivered, and delivered but neither acked nor
        terminated."""
        return asyncio.run(self._unsettled(name))

    def dead_letters(self, name: str) -> list[str]:
        """The ``Sa-Inbox-Message-Id`` header of each message of the dead-letter stream
        (``""`` for a message that had no key)."""
        return asyncio.run(self._dead_letters(name))

    def delete(self, name: str) -> None:
        """Deletes the run's stream and dead-letter stream (and with them the consumer);
        not part of :class:`~sa_inbox.chaos.drivers.ChaosDriver`, for cleaning up."""
        asyncio.run(self._delete(name))

    def close(self) -> None:
        """Nothing to close: each call above opens and closes its own connection."""

    # -- the asyncio edges -------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _jetstream(self) -> AsyncIterator[JetStreamContext]:
        # A few quick attempts, not nats-py's default of 60 two seconds apart: an
        # unreachable server fails the run (exit 3) at once instead of hanging for minutes.
        connection = await nats.connect(
            self.url,
            connect_timeout=5,
            max_reconnect_attempts=CONNECT_ATTEMPTS,
            reconnect_time_wait=0.5,
            error_cb=_quiet,
        )
        try:
            yield connection.jetstream()
        finally:
            await connection.close()

    async def _delete(self, name: str, js: JetStreamContext | None = None) -> None:
        if js is None:
            async with self._jetstream() as js:
                return await self._delete(name, js)
        for stream in (name, _dead_stream(name)):
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(stream)

    async def _prepare(self, name: str) -> None:
        async with self._jetstream() as js:
            await self._delete(name, js)
            await js.add_stream(
                name=name, subjects=[_subject(name)], duplicate_window=self.duplicate_window or 0
            )
            await js.add_stream(name=_dead_stream(name), subjects=[_dead_subject(name)])
            await ensure_consumer(js, name, consumer_config(_durable(name), ack_wait=self.ack_wait))

    async def _publish(self, name: str, messages: Iterable[tuple[str, bytes]]) -> None:
        async with self._jetstream() as js:
            for message_id, body in messages:
                await js.publish(_subject(name), body, headers={self.key_header: message_id})

    async def _unsettled(self, name: str) -> int:
        async with self._jetstream() as js:
            info = await js.consumer_info(name, _durable(name))
            return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    async def _dead_letters(self, name: str) -> list[str]:
        async with self._jetstream() as js:
            state = (await js.stream_info(_dead_stream(name))).state
            ids = []
            for seq in range(state.first_seq, state.last_seq + 1) if state.messages else ():
                with contextlib.suppress(NotFoundError):
                    message = await js.get_msg(_dead_stream(name), seq)
                    ids.append((message.headers or {}).get(DEAD_LETTER_MESSAGE_ID, ""))
            return ids


def _subject(name: str) -> str:
    return f"{name}.in"


def _dead_stream(name: str) -> str:
    return f"{name}_dead"


def _dead_subject(name: str) -> str:
    return f"{name}.dead"


def _durable(name: str) -> str:
    return f"{name}_consumer"


#: Connection attempts (and reconnects) of the driver's NATS connections.
CONNECT_ATTEMPTS = 3


async def _quiet(error: Exception) -> None:
    """nats-py's error callback: its default logs a traceback per failed attempt; the error
    that matters is raised by ``nats.connect`` itself."""
