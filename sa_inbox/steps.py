"""Run a sans-I/O step on a client: a step is a generator that yields the calls it needs and
gets each one's reply (or its error, thrown in) back; what it returns is the result.

The Redis Streams and SQS adapters write their protocol once as steps,
:mod:`sa_inbox.brokers.process` its outage rules, and the database outage gate
(:mod:`sa_inbox.outage`) its probes and waits; each runs them with :func:`drive` on a
thread and :func:`drive_async` on the event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["drive", "drive_async"]

C = TypeVar("C")
T = TypeVar("T")

Errors = type[Exception] | tuple[type[Exception], ...]


def drive(step: Generator[C, Any, T], run: Callable[[C], Any], errors: Errors) -> T:
    """Run ``step`` to its end, each call it yields made by ``run``; an exception of
    ``errors`` that ``run`` raises is thrown into the step.

    :raises Exception: what the step raises, or lets through.
    """
    stepper = _Stepper(step)
    while stepper.running:
        try:
            reply = run(stepper.call)
        except errors as exc:
            stepper.throw(exc)
        else:
            stepper.answer(reply)
    return stepper.result  # type: ignore[no-any-return]


async def drive_async(
    step: Generator[C, Any, T], run: Callable[[C], Awaitable[Any]], errors: Errors
) -> T:
    """:func:`drive` with ``run`` a coroutine function."""
    stepper = _Stepper(step)
    while stepper.running:
        try:
            reply = await run(stepper.call)
        except errors as exc:
            stepper.throw(exc)
        else:
            stepper.answer(reply)
    return stepper.result  # type: ignore[no-any-return]


class _Stepper:
    """A step in progress: its pending ``call``, or, once it has returned, its ``result``."""

    def __init__(self, step: Generator[Any, Any, Any]) -> None:
        self.step = step
        self.running = True
        self.call: Any = None
        self.result: Any = None
        self.answer(None)

    def answer(self, reply: Any) -> None:
        self._advance(self.step.send, reply)

    def throw(self, error: Exception) -> None:
        self._advance(self.step.throw, error)

    def _advance(self, resume: Callable[[Any], Any], value: Any) -> None:
        try:
            self.call = resume(value)
        except StopIteration as finished:
            self.running, self.result = False, finished.value
