"""Run a sans-I/O step on a client: a step is a generator that yields the calls it needs and
gets each one's reply (or its error, thrown in) back; what it returns is the result.

The Redis Streams and SQS adapters write their protocol once as steps and run them with
:func:`drive` on a sync client and :func:`drive_async` on an asyncio one;
:mod:`.process` runs its outage rules the same way on both halves.
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
    reply: Any = None
    error: Exception | None = None
    while True:
        done, value = _advance(step, reply, error)
        if done:
            return value  # type: ignore[no-any-return]
        try:
            reply, error = run(value), None
        except errors as exc:
            reply, error = None, exc


async def drive_async(
    step: Generator[C, Any, T], run: Callable[[C], Awaitable[Any]], errors: Errors
) -> T:
    """:func:`drive` with ``run`` a coroutine function."""
    reply: Any = None
    error: Exception | None = None
    while True:
        done, value = _advance(step, reply, error)
        if done:
            return value  # type: ignore[no-any-return]
        try:
            reply, error = await run(value), None
        except errors as exc:
            reply, error = None, exc


def _advance(
    step: Generator[Any, Any, Any], reply: Any, error: Exception | None
) -> tuple[bool, Any]:
    """(False, the step's next call) or (True, its result)."""
    try:
        return False, step.throw(error) if error is not None else step.send(reply)
    except StopIteration as finished:
        return True, finished.value
