"""The killer: K consumer processes, one SIGKILLed at random intervals and restarted.

The intervals are exponential around ``kill_every`` seconds (a Poisson process of kills),
the victim is chosen at random among the consumers that are working (running, and they
have settled a delivery since they started), and a killed consumer is
restarted at once, logging to a new file (``consumer-<i>-<n>.jsonl``: a line the kill cut
short never runs into the next process's first line). A consumer that SIGKILLs itself (its
``--crash-after-commit``) is counted as a crash and restarted too. Any other exit of a
consumer before :meth:`Supervisor.stop` is a failure of the run (:class:`ConsumerFailed`,
with the end of its stderr).
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import sa_inbox

from .consumer import ConsumerConfig

__all__ = ["STOP_TIMEOUT", "ConsumerFailed", "Supervisor"]

#: Seconds a consumer gets to stop after SIGTERM before it is SIGKILLed.
STOP_TIMEOUT = 10.0
#: Characters of a failed consumer's stderr quoted in :class:`ConsumerFailed`.
STDERR_TAIL = 2000


class ConsumerFailed(Exception):
    """A consumer process exited on its own (an error, not a kill): the run cannot go on."""


@dataclass
class _Slot:
    index: int
    config: ConsumerConfig
    stderr: Path
    process: subprocess.Popen[bytes] | None = None
    spawned: int = 0
    log: Path | None = None

    def working(self) -> bool:
        """Running, and it has settled a delivery (its log is not empty)."""
        if self.process is None or self.process.poll() is not None or self.log is None:
            return False
        try:
            return self.log.stat().st_size > 0
        except FileNotFoundError:
            return False


def _child_env() -> dict[str, str]:
    """The environment of a consumer: this one, with the directory that holds the running
    ``sa_inbox`` first on ``PYTHONPATH``, so that children import the same code."""
    env = dict(os.environ)
    root = str(Path(sa_inbox.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


class Supervisor:
    """Starts the consumer processes, kills one at random intervals, restarts it.

    :param configs: one :class:`ConsumerConfig` per consumer process (its ``log`` is
        replaced by a file of ``log_dir`` at each start).
    :param kill_every: mean seconds between kills (exponential intervals); 0 for none.
    :param max_kills: kills after which the killer stops for good; None for no limit. A
        kill ends at most one delivery of a given message, so a message's deliveries end
        by a kill at most ``max_kills`` times.
    :param seed: seed of the intervals and the victims.
    :param log_dir: where each consumer's settlement logs (``consumer-<i>-<n>.jsonl``) and
        stderr (``consumer-<i>.err``) go.
    """

    def __init__(
        self,
        configs: Sequence[ConsumerConfig],
        *,
        kill_every: float,
        seed: int,
        log_dir: Path,
        max_kills: int | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.slots = [_Slot(i, c, log_dir / f"consumer-{i}.err") for i, c in enumerate(configs)]
        self.kill_every = kill_every
        self.max_kills = max_kills
        self.rng = random.Random(seed)
        self.env = _child_env()
        self.kills = 0
        self.crashes = 0
        self.killing = self._may_kill()
        self.next_kill = self._after(time.monotonic())

    def _may_kill(self) -> bool:
        """Kills are on and the limit, if any, is not reached."""
        return self.kill_every > 0 and (self.max_kills is None or self.kills < self.max_kills)

    def _after(self, now: float) -> float:
        if not self.killing:
            return float("inf")
        return now + self.rng.expovariate(1.0 / self.kill_every)

    def start(self) -> None:
        """Start every consumer process (again, after :meth:`stop`)."""
        for slot in self.slots:
            self._spawn(slot)

    def logs(self) -> list[Path]:
        """Every settlement log written so far."""
        return sorted(self.log_dir.glob("consumer-*.jsonl"))

    def _spawn(self, slot: _Slot) -> None:
        slot.spawned += 1
        slot.log = self.log_dir / f"consumer-{slot.index}-{slot.spawned}.jsonl"
        config = dataclasses.replace(slot.config, log=str(slot.log))
        command = [sys.executable, "-m", "sa_inbox.chaos.consumer", *config.argv()]
        with open(slot.stderr, "ab") as stderr:
            slot.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, env=self.env
            )

    def step(self) -> None:
        """Restart the consumers that crashed, and kill one if a kill is due.

        :raises ConsumerFailed: if a consumer exited on its own.
        """
        for slot in self.slots:
            self._check(slot)
        now = time.monotonic()
        if now >= self.next_kill:
            self.kill_one()
            self.next_kill = self._after(now)

    def _check(self, slot: _Slot) -> None:
        assert slot.process is not None
        code = slot.process.poll()
        if code is None:
            return
        if code != -signal.SIGKILL:
            tail = slot.stderr.read_text(errors="replace")[-STDERR_TAIL:]
            raise ConsumerFailed(
                f"consumer {slot.index} exited with code {code} (not killed):\n{tail}"
            )
        self.crashes += 1  # it killed itself (--crash-after-commit)
        self._spawn(slot)

    def kill_one(self) -> bool:
        """SIGKILL a random working consumer (one that has settled a delivery since it
        started), reap it and start a new one in its place.

        Only working consumers are victims: on a loaded machine a consumer can take longer
        to start than the interval between kills, and killing starting consumers would
        stop the run from making progress at all.

        :returns: whether a consumer was killed (none is working: the kill is skipped).
        """
        working = [slot for slot in self.slots if slot.working()]
        if not working:
            return False
        slot = self.rng.choice(working)
        assert slot.process is not None
        slot.process.send_signal(signal.SIGKILL)
        slot.process.wait()
        self.kills += 1
        self._spawn(slot)
        if not self._may_kill():
            self.stop_killing()
        return True

    def stop_killing(self) -> None:
        """No more kills until :meth:`resume_killing`."""
        self.killing = False
        self.next_kill = float("inf")

    def resume_killing(self) -> None:
        """Kill again (if ``kill_every`` > 0 and ``max_kills`` is not reached), the next
        kill an interval from now."""
        self.killing = self._may_kill()
        self.next_kill = self._after(time.monotonic())

    def stop(self, timeout: float = STOP_TIMEOUT) -> list[int | None]:
        """Stop the kills, SIGTERM every consumer and wait for it (SIGKILL after ``timeout``
        seconds). The kills stay stopped until :meth:`resume_killing`.

        :returns: each consumer's exit code (0 for a clean stop; -9 if it had to be killed).
        """
        self.stop_killing()
        running = [slot.process for slot in self.slots if slot.process is not None]
        for process in running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return [process.returncode for process in running]
