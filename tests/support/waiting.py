"""Waiting for what a test's servers and child processes do eventually."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LIVENESS_SECONDS", "eventually"]

#: How long a test waits for something that happens eventually (a child process started, a
#: redelivery, a consumer that drains its queue) before it fails: a bound on liveness only,
#: far above what it takes on a loaded 2-core machine, since what the test asserts comes
#: after the wait.
LIVENESS_SECONDS = 120.0


def eventually(check: Callable[[], bool], seconds: float = LIVENESS_SECONDS) -> None:
    """Poll ``check`` every 20 ms until it returns true.

    :raises AssertionError: ``timed out`` after ``seconds``.
    """
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
