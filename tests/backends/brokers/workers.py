"""A real worker process for the FastStream and Celery tests: started as a subprocess, its
stdout lines read with deadlines, killed with SIGKILL or stopped with SIGTERM."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["ROOT", "Worker"]

ROOT = Path(__file__).resolve().parents[3]


#: The first words of the lines the worker children print for the parent; other stdout
#: lines (Celery's banner) are kept apart as noise.
PROTOCOL = {
    "READY",
    "PID",
    "COMMITTED",
    "APPLIED",
    "processed",
    "duplicate",
    "retry",
    "dead_lettered",
    "PUBLISHED",
    "MOVED",
}


class Worker:
    """A child process whose stdout lines are collected by a thread. The protocol lines
    printed and not yet matched by :meth:`expect` stay *unclaimed* (a line may come before
    the one a test waits for: a redelivery before ``READY``)."""

    def __init__(
        self, argv: Sequence[str], env: dict[str, str] | None = None, *, new_session: bool = False
    ) -> None:
        self.new_session = new_session
        self.process = subprocess.Popen(
            list(argv),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            start_new_session=new_session,  # its own process group, for kill_group()
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.unclaimed: list[str] = []
        self.noise: list[str] = []
        self.stderr: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            line = line.strip()
            if line.partition(" ")[0] in PROTOCOL:
                self.lines.put(line)
            else:
                self.noise.append(line)

    def _read_err(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def _next(self, deadline: float, owed: object) -> str:
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(
                f"worker still owes {owed}; it said {self.seen}; "
                f"stderr: {''.join(self.stderr)[-3000:]}"
            ) from None
        self.seen.append(line)
        return line

    def expect(self, wanted: Iterable[str], timeout: float = 20) -> None:
        """Waits until every line of ``wanted`` was printed (in any order, counted, unclaimed
        lines first). Fails with the worker's output on the deadline."""
        missing = list(wanted)
        for line in list(self.unclaimed):
            if line in missing:
                missing.remove(line)
                self.unclaimed.remove(line)
        deadline = time.monotonic() + timeout
        while missing:
            line = self._next(deadline, missing)
            if line in missing:
                missing.remove(line)
            else:
                self.unclaimed.append(line)

    def pid_line(self, timeout: float = 10) -> int:
        """The pid of the first unclaimed line ``PID <pid>``."""
        deadline = time.monotonic() + timeout
        while not any(line.startswith("PID ") for line in self.unclaimed):
            self.unclaimed.append(self._next(deadline, "PID <pid>"))
        line = next(line for line in self.unclaimed if line.startswith("PID "))
        self.unclaimed.remove(line)
        return int(line.split()[1])

    def kill_group(self) -> None:
        """SIGKILL to the process and its children (a worker and its pool processes)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self._reap()
        assert self.process.returncode == -signal.SIGKILL

    def kill(self) -> None:
        """SIGKILL: no ack, no clean-up; the broker sees the connection die."""
        self.process.send_signal(signal.SIGKILL)
        self._reap()
        assert self.process.returncode == -signal.SIGKILL

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Shutdown by ``sig`` (SIGTERM: graceful); killed if it takes more than 10 s."""
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(
                f"worker ignored SIGTERM; stderr: {''.join(self.stderr)}"
            ) from None
        finally:
            self._reap()

    def ensure_dead(self) -> None:
        """SIGKILL if still running (a failed test's clean-up), and reap."""
        if self.new_session:
            with contextlib.suppress(ProcessLookupError):  # the group is gone already
                os.killpg(self.process.pid, signal.SIGKILL)
        elif self.process.poll() is None:
            self.process.kill()
        self._reap()

    def _reap(self) -> None:
        """Waits for the exit and the readers, and closes the pipes."""
        self.process.wait(timeout=10)
        for reader in self.readers:
            reader.join(timeout=5)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()

    def quiet(self, seconds: float) -> list[str]:
        """Waits ``seconds``; returns the unclaimed lines (to check nothing else happened)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(line)
            self.unclaimed.append(line)
        return list(self.unclaimed)
