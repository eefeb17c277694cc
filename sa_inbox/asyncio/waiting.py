"""The asyncio worker's :class:`~sa_inbox.store.waiting.Waiting`: waits on the event loop.

The worker's loops run in greenlets on the loop (:func:`~sa_inbox.asyncio._bridge.in_greenlet`):
a wait there awaits a future that a stop request resolves, so a stop ends every wait at once
and no wait polls.
"""

from __future__ import annotations

import asyncio
import threading

from ._bridge import call_on_loop, loop_sleep

__all__ = ["LoopWaiting"]


class LoopWaiting:
    """A stop signal that wakes the waits of greenlets on an event loop.

    The flag is a :class:`threading.Event`'s, so :meth:`set` may come from any thread (a
    signal handler, another thread calling ``stop()``): it resolves the pending waits through
    ``loop.call_soon_threadsafe`` (asyncio docs, "Concurrency and Multithreading").
    """

    on_event_loop = True

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The futures of the waits in progress (touched on the loop's thread only).
        self._waits: set[asyncio.Future[None]] = set()

    def is_set(self) -> bool:
        return self._flag.is_set()

    def set(self) -> None:
        self._flag.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake)

    def clear(self) -> None:
        self._flag.clear()

    def wait(self, timeout: float | None = None) -> bool:
        """:meth:`until_set` from a greenlet of the loop (the worker's loops)."""
        if self._flag.is_set():
            return True
        return call_on_loop(self.until_set(timeout))

    async def until_set(self, timeout: float | None = None) -> bool:
        """Wait until a stop is requested or ``timeout`` seconds passed (``None``: no
        limit); whether one was."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        future: asyncio.Future[None] = loop.create_future()
        self._waits.add(future)
        try:
            if not self._flag.is_set():
                await asyncio.wait([future], timeout=timeout)
        finally:
            self._waits.discard(future)
            future.cancel()
        return self._flag.is_set()

    def sleep(self, seconds: float) -> None:
        loop_sleep(seconds)

    def _wake(self) -> None:
        for future in list(self._waits):
            if not future.done():
                future.set_result(None)
