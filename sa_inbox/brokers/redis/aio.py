"""The asyncio Redis Streams consumer, on ``redis.asyncio.Redis``: the sync consumer's steps
and settler (:mod:`.core`), only the calls awaited."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
from redis.exceptions import ResponseError

from ... import steps
from ...exc import DatabaseUnavailable, MissingKeyHeader
from ..delivery import Delivery, Settlement
from ..keys import flush_async, give_back_async, offer_async
from ..process import process_async
from ..reconnect import sleep_unless
from .core import (
    Batch,
    Call,
    ConsumerBase,
    RedisSettler,
    Step,
    T,
    touch_call,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession  # noqa: F401 (in the base class, quoted)

__all__ = ["AsyncConsumer", "drive_async", "run_call_async"]


class AsyncConsumer(ConsumerBase[redis.asyncio.Redis, "AsyncSession"]):
    """The Redis Streams consumer on ``redis.asyncio.Redis``, through
    :func:`sa_inbox.brokers.process_async` (``async def`` handler, ``async_sessionmaker``);
    its parameters and rules are :class:`~sa_inbox.brokers.redis.core.ConsumerBase`'s.
    Entries of a batch are settled one after another.
    """

    asynchronous = True

    def _stop_event(self) -> asyncio.Event:
        return asyncio.Event()

    async def ensure_group(self) -> None:
        """Create the group (and the stream) if missing; an existing group is kept.

        :raises redis.RedisError: if the server refuses (other than "exists already").
        """
        await drive_async(self._core.ensure_group(), self.client)
        self._group_ready = True

    async def check(self) -> None:
        """Check the consumer can process entries (as the sync consumer's ``check()``, on
        AsyncSessions); returns None or raises.

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready_async`.
        """
        await self.readiness.check_async()

    async def poll(self, *, block: bool = True) -> list[Settlement]:
        """Read one batch and settle each entry: as the sync consumer's ``poll()``.

        :raises: as the sync consumer's ``poll()``.
        """
        if not self._group_ready:
            await self.ensure_group()
        entries = await drive_async(self._core.next_batch(block=block), self.client)
        if not entries:
            return await flush_async(self._streak, self._process)
        run = partial(run_call_async, self.client)
        settled: list[Settlement] = []
        for n, entry in enumerate(entries):
            self._unsettled = entries[n:]
            try:
                settled += await offer_async(
                    self._streak, *self._delivery(entry, run), self._process
                )
            except MissingKeyHeader:
                if entries[n + 1 :]:
                    await run(self._give_back_calls(entries[n + 1 :]))
                raise
        self._unsettled = ()
        return settled

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Await :meth:`check`, then poll until ``stop`` or :meth:`stop` is set, seen within
        ``block_timeout``; the batch in hand is settled first, then the member leaves the
        group if nothing is pending to it (see the sync consumer's ``run()``).

        :param stop: an event to stop on, besides :meth:`stop`.
        :raises: as :meth:`poll`, and :meth:`check`'s errors before any command.
        """
        self._extra_stop = stop
        if not await self.readiness.start_async(self._process_kw["outage"]):
            return
        while not self._stopping():
            try:
                await self.poll()
                self.reconnects.connected()
            except (DatabaseUnavailable, redis.RedisError) as exc:
                if (seconds := self._wait_after(exc)) is None:
                    raise
                await self._outage_sleep(seconds)
        if self.reconnects.lost:
            return  # the server is gone: what is held stays pending
        await give_back_async(self._streak)  # a stop decides nothing about them
        await drive_async(self._core.leave_group(), self.client)

    async def _outage_sleep(self, seconds: float) -> bool:
        return await sleep_unless(self._stopping, seconds)

    async def _keep_alive(self) -> None:
        if self._unsettled:
            await run_call_async(self.client, touch_call(self.settings, self._unsettled))

    async def _process(self, delivery: Delivery, settler: RedisSettler) -> Settlement:
        return await process_async(delivery, settler, **self._process_kw)


async def run_call_async(client: Any, call: Call | Batch) -> Any:
    """:func:`.core.run_call` on a ``redis.asyncio.Redis``."""
    if isinstance(call, Batch):
        async with client.pipeline(transaction=False) as pipe:
            for each in call.calls:
                getattr(pipe, each.method)(*each.args, **each.kwargs)
            return await pipe.execute()
    return await getattr(client, call.method)(*call.args, **call.kwargs)


async def drive_async(step: Step[T], client: Any) -> T:
    """:func:`.core.drive` on a ``redis.asyncio.Redis``."""
    return await steps.drive_async(step, partial(run_call_async, client), ResponseError)
