"""The outbox on asyncio: :class:`AsyncOutbox` (publish on an AsyncSession or
AsyncConnection) and :class:`AsyncOutboxRelay` (the relay on an AsyncEngine).

:meth:`AsyncOutbox.publish` runs :meth:`~sa_inbox.outbox.Outbox.publish` on the Session or
Connection behind the async one, through ``run_sync`` (:mod:`sa_inbox.asyncio._bridge`):
the same validation, the same insert, the same errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from ..checks import require_asyncio, unwrap
from ..exc import DatabaseUnavailable, InvalidArgument
from ..outbox.outbox import Outbox
from ..outbox.publisher import Publisher, check_publisher
from ..outbox.relay import (
    DEFAULT_POLL_INTERVAL,
    RelayBatch,
    RelayCore,
    add_batches,
    outage_pause,
    relay_batch,
    unfinished,
)
from ..validation import positive_seconds
from ._bridge import AsyncBind, in_greenlet, loop_sleep, maybe_await, on_sync_bind

__all__ = ["AsyncOutbox", "AsyncOutboxRelay"]


class AsyncOutbox:
    """The asyncio face of an :class:`~sa_inbox.outbox.Outbox`.

    :param outbox: the outbox (its table).

    Example::

        outbox = AsyncOutbox(Outbox(Base.metadata))

        async def handler(session, delivery):       # an AsyncSession
            await outbox.publish(session, "payments.applied", {"id": delivery.message_id})
    """

    __sa_inbox_asyncio_face__ = "sync_outbox"

    def __init__(self, outbox: Outbox | AsyncOutbox) -> None:
        #: The synchronous outbox this one runs.
        self.sync_outbox = unwrap(outbox, Outbox, "outbox", entry="AsyncOutbox()")
        self.table = self.sync_outbox.table

    def publish(
        self,
        bind: AsyncBind,
        destination: str,
        payload: Any,
        *,
        headers: Mapping[str, str] | None = None,
        message_id: str | None = None,
    ) -> Coroutine[Any, Any, str]:
        """Record a message in the caller's transaction (see
        :meth:`~sa_inbox.outbox.Outbox.publish`).

        :param bind: an AsyncSession, async_scoped_session or AsyncConnection.
        :returns: the message's ``message_id``.
        :raises: as :meth:`~sa_inbox.outbox.Outbox.publish`;
            :class:`~sa_inbox.exc.InvalidBind` for any other ``bind``.
        """
        row = self.sync_outbox.row(destination, payload, headers=headers, message_id=message_id)
        return on_sync_bind(
            bind,
            self.sync_outbox.publish,
            destination,
            payload,
            headers=row["headers"],
            message_id=row["message_id"],
        )


class AsyncOutboxRelay:
    """:class:`~sa_inbox.outbox.OutboxRelay` on asyncio: an AsyncEngine and an async publisher.

    The same claim, publish, mark round (:func:`~sa_inbox.outbox.relay.relay_batch`) runs in
    a greenlet on the async driver; the publisher's ``publish`` is awaited on the event
    loop (e.g. :class:`~sa_inbox.brokers.nats.AsyncPublisher`), and the waits are
    ``asyncio`` waits.

    :param engine: an :class:`~sqlalchemy.ext.asyncio.AsyncEngine`.
    :param publisher: a publisher whose ``publish`` is ``async def`` (or plain).
    :param settings: as :class:`~sa_inbox.outbox.OutboxRelay` (``batch_size``,
        ``max_attempts``, ``visibility_timeout``, ``backoff``, ``ordered``,
        ``outage_backoff``, ``poll_interval``).
    :raises InvalidArgument: for a bad setting.
    :raises SyncAsyncMismatch: for a synchronous Engine.
    :raises InvalidObject: for a publisher without ``publish``.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        outbox: Outbox | AsyncOutbox,
        publisher: Publisher,
        **settings: Any,
    ) -> None:
        engine = require_asyncio(
            engine,
            AsyncEngine,
            "engine",
            entry="AsyncOutboxRelay()",
            instead="for an Engine use sa_inbox.outbox.OutboxRelay",
        )
        sync_outbox = unwrap(outbox, Outbox, "outbox", entry="AsyncOutboxRelay()")
        check_publisher(publisher, asynchronous=True)
        poll = settings.pop("poll_interval", DEFAULT_POLL_INTERVAL)
        self.poll_interval = positive_seconds(poll, "poll_interval", InvalidArgument)
        self.core = RelayCore(engine.sync_engine, sync_outbox, **settings)
        self.publisher = publisher
        self._stop = asyncio.Event()
        self.core.outage.sleep = self._outage_sleep

    async def run_once(self) -> RelayBatch:
        """One claim, publish, mark round (see :meth:`OutboxRelay.run_once`)."""
        return await in_greenlet(relay_batch, self.core, self.publisher, maybe_await)

    async def run(self, *, until_empty: bool = False) -> RelayBatch:
        """Relay until :meth:`stop` (or until empty); see :meth:`OutboxRelay.run`."""
        total = RelayBatch()
        outages = 0
        while not self._stop.is_set():
            try:
                batch = await self.run_once()
            except DatabaseUnavailable:
                break  # stopped during an outage
            except Exception as exc:
                if await in_greenlet(self.core.ride_out, exc):
                    continue
                raise
            total = add_batches(total, batch)
            pause, outages = outage_pause(self.core, batch, outages)
            if pause is not None:
                await self._wait(pause)
            elif batch.claimed == 0:
                if until_empty and not await in_greenlet(unfinished, self.core):
                    break
                await self._wait(self.poll_interval)
        return total

    async def _wait(self, seconds: float) -> None:
        """Wait ``seconds``, or less if :meth:`stop` is called."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    def stop(self) -> None:
        """Stop after the current batch (call from the loop's thread)."""
        self._stop.set()

    def _outage_sleep(self, seconds: float) -> bool:
        """The outage gate's wait, in the relay's greenlet: on the loop, cut short by
        :meth:`stop`."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
            loop_sleep(min(left, 0.25))
        return self._stop.is_set()
