"""The asyncio SQS consumer, on an aiobotocore client: the sync consumer's steps and
settler (:mod:`.core`), only the calls awaited; its heartbeat is a task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ... import steps
from ...exc import MissingKeyHeader
from ..delivery import Delivery, Settlement
from ..keys import flush_async, give_back_async, offer_async
from ..process import process_async
from ..reconnect import sleep_unless
from .base import PASS_ERRORS, ConsumerBase, Each, settle_each
from .core import (
    CLIENT_ERRORS,
    Call,
    QueueInfo,
    SqsSettler,
    Step,
    T,
    delete,
    extend,
    receive,
    resolve,
    set_visibility,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession  # noqa: F401 (in the base class, quoted)

__all__ = ["AsyncConsumer", "drive_async", "run_call_async"]

logger = logging.getLogger("sa_inbox.brokers.sqs")


class AsyncConsumer(ConsumerBase[Any, "AsyncSession"]):
    """The SQS consumer on an aiobotocore client, through
    :func:`sa_inbox.brokers.process_async` (``async def`` handler, ``async_sessionmaker``);
    its parameters and rules are :class:`~sa_inbox.brokers.sqs.base.ConsumerBase`'s.

    Example::

        session = aiobotocore.session.get_session()
        async with session.create_client("sqs") as client:
            consumer = AsyncConsumer(
                client, "payments",
                session_factory=async_sessionmaker(engine), inbox=inbox, handler=apply,
                options=DeliveryOptions(dead_letter="payments-dead"),
            )
            await consumer.run()

    The heartbeat is a task on the consumer's event loop: it runs while the handler awaits
    (a handler that blocks the loop blocks it too).
    """

    asynchronous = True
    _beat: asyncio.Task[None] | None = None

    def _stop_event(self) -> asyncio.Event:
        return asyncio.Event()

    async def queue(self) -> QueueInfo:
        """The queue, found and checked (as the sync consumer's ``queue()``)."""
        if self.info is None:
            self._found(await drive_async(resolve(self.settings), self.client))
        assert self.info is not None
        return self.info

    async def check(self) -> None:
        """The queue's checks, then the database's (as the sync consumer's ``check()``, on
        AsyncSessions); returns None or raises.

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready_async`.
        """
        await self.queue()
        await self.readiness.check_async()

    async def poll(self) -> list[Settlement]:
        """Receive once and settle each message: as the sync consumer's ``poll()``.

        :raises: as the sync consumer's ``poll()``.
        """
        info = await self.queue()
        messages = await drive_async(receive(self.settings, info), self.client)
        if not messages:
            return await flush_async(self._streak, self._process)
        self.held.add(messages)
        self._start_heartbeat()
        run = partial(drive_async, client=self.client)
        done = False
        try:
            each = partial(self._each, info, run)
            settled = await steps.drive_async(
                settle_each(messages, info.name), each, MissingKeyHeader
            )
            done = True
        finally:
            await drive_async(delete(info, self.held.acked()), self.client)
            if not done:
                self._release_unsettled(messages)
        return settled

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Find and check the queue, the database, then poll until ``stop`` or :meth:`stop`
        is set (as the sync consumer's ``run()``).

        :param stop: an event to stop on, besides :meth:`stop`.
        :raises: as the sync consumer's ``run()``.
        """
        self._extra_stop = stop
        try:
            await self.queue()
            if not await self.readiness.start_async(self.gate):
                return
            while not self._stopping():
                try:
                    await self.poll()
                    self.reconnects.connected()
                except PASS_ERRORS as exc:
                    if (seconds := self._wait_after(exc)) is None:
                        raise
                    await self._outage_sleep(seconds)
            if not self.reconnects.lost:
                await give_back_async(self._streak)  # a stop decides nothing about them
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Stop the heartbeat task (``run()`` does it when it returns). The client is the
        caller's."""
        beat, self._beat = self._beat, None
        if beat is not None:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _outage_sleep(self, seconds: float) -> bool:
        return await sleep_unless(self._stopping, seconds)

    async def _keep_alive(self) -> None:
        info = self.info
        if info is not None and len(self.held):
            due = self.held.due(None)
            await drive_async(
                extend(info, self.held, due, self.settings.visibility_timeout), self.client
            )

    async def _each(
        self, info: QueueInfo, run: Callable[[Step[Any]], Any], each: Each
    ) -> list[Settlement] | None:
        """Offer a message or give it back (:func:`.base.settle_each`)."""
        offered, message = each
        if offered:
            return await offer_async(
                self._streak, *self._settler(info, message, run), self._process
            )
        self.held.drop(message)
        await drive_async(set_visibility(info, message, 0, "give back"), self.client)
        return None

    def _start_heartbeat(self) -> None:
        if not self.settings.heartbeat or self._beat is not None:
            return
        self._beat = asyncio.get_running_loop().create_task(self._heartbeat())

    async def _heartbeat(self) -> None:
        """Every held message's visibility set again each third of the timeout."""
        every = self.settings.heartbeat_every
        while True:
            await asyncio.sleep(min(every / 4, 1.0))
            info = self.info
            due = self.held.due(every) if info is not None else []
            if not due or info is None:
                continue
            try:
                await drive_async(
                    extend(info, self.held, due, self.settings.visibility_timeout), self.client
                )
            except Exception as exc:  # a lost connection: run() sees it too
                logger.debug("SQS heartbeat failed: %s", exc)

    async def _process(self, delivery: Delivery, settler: SqsSettler) -> Settlement:
        return await process_async(delivery, settler, **self._process_kw)


async def run_call_async(client: Any, call: Call) -> Any:
    """:func:`.core.run_call` on an aiobotocore client."""
    return await getattr(client, call.operation)(**call.kwargs)


async def drive_async(step: Step[T], client: Any) -> T:
    """:func:`.core.drive` on an aiobotocore client."""
    return await steps.drive_async(step, partial(run_call_async, client), CLIENT_ERRORS)
