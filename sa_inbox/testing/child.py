"""A delivery in a real child process, SIGKILLed at a chosen point: the crash tests.

The child is made with :func:`os.fork`, so it runs the very objects the test built: the
handler, the session factory on the test's database, the message factory, closures and
fixtures included, none of which need to be importable. That needs a POSIX system; on one
without ``fork`` (Windows) the crash tests are reported as not run.

In the child, every connection the parent's pools hold is left alone: a pool's checkout of
a connection made before the fork drops it without closing it (closing would end the
parent's session on the server; SQLAlchemy docs, "Using Connection Pools with
Multiprocessing or os.fork()") and the pool connects anew. The child reports to the parent
over a pipe, one JSON object per line, then kills itself with SIGKILL where the test says
(at the ack, or at the commit of the delivery's changes, before it reaches the database),
or leaves with :func:`os._exit` (no ``atexit``, no finalizers) if the delivery ended first.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import Pool

__all__ = ["ChildReport", "can_fork", "run_child"]

_PID_KEY = "sa_inbox_testing_pid"
#: Connections of the parent's pools dropped in the child: kept referenced, so no
#: finalizer of a driver closes them (which would end the parent's session).
_DETACHED: list[Any] = []


def can_fork() -> bool:
    """Whether the crash tests can run here (``os.fork`` and ``SIGKILL``)."""
    return hasattr(os, "fork") and hasattr(signal, "SIGKILL")


@dataclass
class ChildReport:
    """What the parent learnt from one child.

    :param lines: the JSON objects the child wrote, in order.
    :param killed: whether it died of SIGKILL.
    :param exit_code: its exit status otherwise.
    :param timed_out: whether the parent had to kill it (it never got to its crash point).
    """

    lines: list[dict[str, Any]] = field(default_factory=list)
    killed: bool = False
    exit_code: int | None = None
    timed_out: bool = False

    def last(self, key: str) -> dict[str, Any] | None:
        """The last line holding ``key``."""
        for line in reversed(self.lines):
            if key in line:
                found: dict[str, Any] = line
                return found
        return None


def _stamp(dbapi_connection: Any, record: Any) -> None:
    record.info[_PID_KEY] = os.getpid()


def _drop_foreign(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    if record.info.get(_PID_KEY) != os.getpid():
        _DETACHED.append(dbapi_connection)
        record.dbapi_connection = proxy.dbapi_connection = None
        raise DisconnectionError("a connection of the parent process, left to it")


class Pipe:
    """The child's end of the pipe: one JSON object per line."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def say(self, **fields: Any) -> None:
        data = (json.dumps(fields, default=repr) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data) :]

    def die(self, **fields: Any) -> None:
        """Report, then SIGKILL this process."""
        self.say(**fields)
        os.kill(os.getpid(), signal.SIGKILL)


async def run_child(
    body: Callable[[Pipe], None] | Callable[[Pipe], Coroutine[Any, Any, None]],
    *,
    asynchronous: bool,
    timeout: float,
) -> ChildReport:
    """Fork; the child runs ``body(pipe)`` (awaited on an event loop of its own when
    ``asynchronous``), and the parent collects its report.

    :param timeout: seconds the parent waits for the child before killing it.
    """
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns on a fork while other threads run (a lock one of them holds
        # stays held in the child); the child runs one delivery and leaves by os._exit
        warnings.filterwarnings("ignore", ".*fork.*", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        pipe = Pipe(write_fd)
        code = 0
        try:
            event.listen(Pool, "connect", _stamp)
            event.listen(Pool, "checkout", _drop_foreign)
            if asynchronous:
                asyncio.run(body(pipe))  # type: ignore[arg-type]
            else:
                body(pipe)
            pipe.say(ended=True)
        except BaseException as exc:  # the child must never return into the test run
            try:
                pipe.say(error=f"{type(exc).__name__}: {exc}")
            finally:
                code = 1
        os._exit(code)
    os.close(write_fd)
    return await _collect(pid, read_fd, timeout)


async def _collect(pid: int, read_fd: int, timeout: float) -> ChildReport:
    report = ChildReport()
    buffer = b""
    os.set_blocking(read_fd, False)
    deadline = time.monotonic() + timeout
    delay = 0.005
    done = False
    try:
        while True:
            try:
                chunk = os.read(read_fd, 65536)
            except BlockingIOError:
                chunk = None
            if chunk:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                report.lines += [json.loads(line) for line in lines if line.strip()]
                continue
            if chunk == b"" and not done:
                done = True  # the child's end closed: it ended
            if done:
                waited, status = os.waitpid(pid, os.WNOHANG)
                if waited:
                    break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                report.timed_out = True
                os.waitpid(pid, 0)
                return report
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)
    finally:
        os.close(read_fd)
    if os.WIFSIGNALED(status):
        report.killed = os.WTERMSIG(status) == signal.SIGKILL
    else:
        report.exit_code = os.WEXITSTATUS(status)
    return report
