"""How a worker's loops wait: for a stop request with a timeout, and plain sleeps.

:class:`~sa_inbox.store.Worker` takes a :class:`Waiting` as ``waiting=``. The default,
:class:`ThreadWaiting`, blocks the calling thread (a :class:`threading.Event` and
:func:`time.sleep`); :class:`sa_inbox.asyncio.AsyncWorker` passes one that waits on its event
loop, whose tasks run the worker's loops in greenlets
(:class:`sa_inbox.asyncio.waiting.LoopWaiting`).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["ThreadWaiting", "Waiting"]


class Waiting(Protocol):
    """The stop signal a worker's loops wait on, and how they sleep.

    ``is_set``, ``set``, ``clear`` and ``wait`` are those of :class:`threading.Event`: the
    worker's :attr:`~sa_inbox.store.Worker.stop_event` is this object.
    """

    #: Whether the loops run in greenlets on an event loop (the store is then one of the
    #: asyncio API, bound to an AsyncEngine).
    on_event_loop: bool

    def is_set(self) -> bool:
        """Whether a stop was requested."""
        ...

    def set(self) -> None:
        """Request a stop: every :meth:`wait` returns at once (from any thread)."""
        ...

    def clear(self) -> None:
        """Withdraw the request (a run that ended by its own limit)."""
        ...

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop is requested or ``timeout`` seconds passed.

        :returns: whether a stop was requested.
        """
        ...

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, whatever is requested meanwhile."""
        ...


class ThreadWaiting(threading.Event):
    """:class:`Waiting` for threads: a :class:`threading.Event`, and :func:`time.sleep`."""

    on_event_loop = False

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
