"""The machine's load while a benchmark runs: ``/proc/loadavg`` sampled in a thread."""

from __future__ import annotations

import statistics
import threading
from pathlib import Path
from typing import Any

__all__ = ["LoadSampler", "read_loadavg"]


def read_loadavg() -> tuple[float, float, float]:
    """The 1-, 5- and 15-minute load averages."""
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return float(one), float(five), float(fifteen)


class LoadSampler:
    """The 1-minute load average every ``interval`` seconds, in a thread, while the block
    runs; :meth:`summary` gives the samples, their median and maximum."""

    def __init__(self, interval: float = 2.0) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.samples.append(read_loadavg()[0])
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, Any]:
        """``samples_1min``, ``median_1min``, ``max_1min`` and the load ``at_end``."""
        return {
            "samples_1min": self.samples,
            "median_1min": statistics.median(self.samples),
            "max_1min": max(self.samples),
            "at_end": read_loadavg(),
        }
