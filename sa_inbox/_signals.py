"""Signal handlers that take no lock: the handler writes the signal's number to a pipe, and
a thread calls the callback.

Python runs a signal handler in the main thread between two bytecodes, possibly while that
thread holds a lock; a handler that takes the same lock (``threading.Event.set`` takes the
event's condition lock) waits for itself forever. Python's documentation warns against
synchronization primitives in signal handlers (:mod:`signal`, "Signals and threads").
``os.write`` to a pipe takes none.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType

__all__ = ["on_signals"]

logger = logging.getLogger("sa_inbox.signals")

#: The signals that ask a worker, a relay or a consumer process to stop.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def on_signals(
    callback: Callable[[int], object],
    signals: Iterable[int] = STOP_SIGNALS,
    *,
    at_once: Callable[[int], object] | None = None,
) -> Iterator[None]:
    """Call ``callback(signum)`` in a thread of its own for each of ``signals`` received while
    the block runs; the previous handlers are restored after it.

    ``at_once(signum)``, if given, runs in the signal handler itself, before the thread
    wakes: it must take no lock (setting an attribute is safe).

    Outside the main thread nothing is installed (only the main thread may set a signal
    handler: :func:`signal.signal` raises ``ValueError`` elsewhere).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def handler(signum: int, frame: FrameType | None) -> None:
        if at_once is not None:
            at_once(signum)
        with suppress(BlockingIOError):  # full: signals the thread has still to act on
            os.write(write_fd, bytes([signum]))

    thread = threading.Thread(
        target=_call_for_each, args=(read_fd, callback), name="sa-inbox-signals", daemon=True
    )
    thread.start()
    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, former in previous.items():
            signal.signal(signum, former)
        os.close(write_fd)  # the thread reads the end of the pipe and returns
        thread.join()
        os.close(read_fd)


def _call_for_each(read_fd: int, callback: Callable[[int], object]) -> None:
    while received := os.read(read_fd, 64):
        for signum in received:
            try:
                callback(signum)
            except Exception:  # the next signal must still reach the callback
                logger.exception("the handler of signal %s raised", signum)
