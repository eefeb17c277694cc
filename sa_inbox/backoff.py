"""Exponential back-off: the waits of the store worker, the outbox relay, the outage gate
and the broker reconnects."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .exc import InvalidArgument

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off between attempts: ``base * 2 ** (attempts - 1)``, capped.

    :param base: seconds before the second attempt, >= 0.
    :param maximum: the longest wait in seconds, >= 0.
    :raises InvalidArgument: when made, for a value that is not a number of seconds >= 0.
    """

    base: float = 1.0
    maximum: float = 300.0

    def __post_init__(self) -> None:
        for name in ("base", "maximum"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or math.isnan(value)
                or value < 0
            ):
                raise InvalidArgument(
                    f"Backoff(): {name} must be a number of seconds >= 0, not {value!r}"
                )

    def delay(self, attempts: int) -> float:
        """Seconds to wait after the ``attempts``-th failed attempt (1-based)."""
        return float(min(self.maximum, self.base * 2 ** max(0, min(attempts - 1, 62))))

    def jittered(
        self, attempts: int, uniform: Callable[[float, float], float] = random.uniform
    ) -> float:
        """:meth:`delay` with full jitter: a uniform random wait in ``[0, delay]`` seconds, so
        that consumers which lost the same server do not come back in step ("Exponential
        Backoff And Jitter", AWS Architecture Blog: "Full Jitter")."""
        return uniform(0.0, self.delay(attempts))
