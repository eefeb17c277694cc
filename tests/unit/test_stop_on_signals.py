"""``stop_on_signals``: a stop signal reaches ``stop()`` even while the main thread holds the
lock ``stop()`` takes, and what it cannot serve is refused before a handler is installed."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from typing import Any

import pytest

from sa_inbox.brokers import stop_on_signals
from sa_inbox.exc import ConfigurationError, InvalidArgument

#: A process whose stop is a threading.Event, signalled while the main thread holds the
#: event's lock (as inside ``Event.wait``): a handler calling ``set()`` waits for itself.
LOCK_HELD = """
import os, signal, threading
from sa_inbox.brokers import stop_on_signals

stopped = threading.Event()
with stop_on_signals(stopped.set):
    with stopped._cond:
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(100_000))  # bytecodes: the Python-level handler runs here
    print("stopped" if stopped.wait(10) else "not stopped")
print("restored" if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL else "not restored")
"""


def test_a_signal_while_the_stop_lock_is_held_stops_and_restores_the_handler() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOCK_HELD], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["stopped", "restored"]


@pytest.mark.parametrize(
    ("stop", "signals"),
    [
        ("consumer.stop", (signal.SIGTERM,)),
        (None, (signal.SIGTERM,)),
        (lambda: None, ()),
        (lambda: None, (0,)),
        (lambda: None, ("SIGTERM",)),
        (lambda: None, (signal.SIGKILL,)),
        (lambda: None, (signal.SIGTERM, signal.SIGSTOP)),
        (lambda: None, (True,)),
        (lambda: None, (15.0,)),
        (lambda: None, 15),
    ],
)
def test_what_it_cannot_serve_is_refused_before_a_handler_is_installed(
    stop: Any, signals: Any
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(InvalidArgument), stop_on_signals(stop, signals):
        pass
    assert signal.getsignal(signal.SIGTERM) is before


#: A process whose stop() raises on the first signal: the second still reaches it.
STOP_RAISES = """
import os, signal, threading, time
from sa_inbox.brokers import stop_on_signals

calls = []
second = threading.Event()

def stop():
    calls.append(1)
    if len(calls) == 1:
        raise RuntimeError("stop failed")
    second.set()

with stop_on_signals(stop):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)
    print(len(calls) if second.wait(10) else "lost")
"""


def test_a_stop_that_raises_is_logged_and_the_next_signal_still_stops() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STOP_RAISES], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2"]
    assert "RuntimeError: stop failed" in done.stderr


def test_what_it_cannot_serve_is_refused_when_called_not_only_when_entered() -> None:
    with pytest.raises(InvalidArgument):
        stop_on_signals(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        stop_on_signals(lambda: None, [signal.SIGKILL])


def test_outside_the_main_thread_it_is_refused() -> None:
    raised: list[BaseException] = []

    def enter() -> None:
        try:
            with stop_on_signals(lambda: None):
                pass
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert len(raised) == 1 and isinstance(raised[0], ConfigurationError)
