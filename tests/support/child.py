"""What a child process of the tests prints for its parent, which reads its stdout line by
line (:class:`tests.backends.brokers.workers.Worker`)."""

from __future__ import annotations

import sys
import threading

__all__ = ["say"]

_LOCK = threading.Lock()


def say(line: str) -> None:
    """Print ``line`` and flush, as one write under a lock: ``print`` writes the text and
    its newline apart, so two threads (a handler's pool thread, the event loop's) could
    print ``duplicate pay-1READY``."""
    with _LOCK:
        sys.stdout.write(f"{line}\n")
        sys.stdout.flush()
