"""Stop a consumer on SIGTERM and SIGINT with no lock taken in the signal handler.

A handler installed with :func:`signal.signal` that calls ``consumer.stop()`` can wait for
ever: Python runs it in the main thread between two bytecodes, perhaps while that thread
holds the lock ``stop()`` takes (a :class:`threading.Event`'s, pika's callback queue's).
Python's documentation warns against synchronization primitives in signal handlers
(:mod:`signal`, "Signals and threads").
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager

from .._signals import STOP_SIGNALS, on_signals
from ..exc import ConfigurationError, InvalidArgument

__all__ = ["stop_on_signals"]


def stop_on_signals(
    stop: Callable[[], object], signals: Iterable[int] = STOP_SIGNALS
) -> AbstractContextManager[None]:
    """Call ``stop()`` from a thread of its own when one of ``signals`` arrives while the
    block runs; the previous handlers are restored after it. Example::

        with stop_on_signals(consumer.stop):
            consumer.run()

    :param stop: called with no argument, once per signal received.
    :param signals: signal numbers (ints); default SIGTERM and SIGINT.
    :raises InvalidArgument: when called, if ``stop`` is not callable, or ``signals`` is
        empty or holds anything but signal numbers that can be caught.
    :raises ConfigurationError: when the block is entered outside the main thread, where
        Python neither runs nor installs signal handlers (:func:`signal.signal` raises
        ``ValueError`` there).
    """
    if not callable(stop):
        raise InvalidArgument(f"stop must be callable (consumer.stop), got {stop!r}")
    return _stopping(stop, _signal_numbers(signals))


@contextmanager
def _stopping(stop: Callable[[], object], numbers: tuple[signal.Signals, ...]) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        raise ConfigurationError("stop_on_signals() must be entered in the main thread")
    with on_signals(lambda _: stop(), numbers):
        yield


def _signal_numbers(signals: Iterable[int]) -> tuple[signal.Signals, ...]:
    """``signals`` as :class:`signal.Signals`; SIGKILL and SIGSTOP cannot be caught (signal(7))."""
    try:
        given = tuple(signals)
        numbers = tuple(
            signal.Signals(n) for n in given if isinstance(n, int) and not isinstance(n, bool)
        )
    except (TypeError, ValueError):
        given, numbers = (), ()
    if not given or len(numbers) < len(given) or {signal.SIGKILL, signal.SIGSTOP} & set(numbers):
        raise InvalidArgument(f"signals must be signal numbers that can be caught, got {signals!r}")
    return numbers
