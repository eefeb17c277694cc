"""Coroutines a handler made and dropped without awaiting them, seen per task.

``await session.execute(stmt)`` without its ``await`` only makes a coroutine: the statement
never runs, Python finalises the coroutine with a ``RuntimeWarning: coroutine ... was never
awaited``, and the handler returns normally. The claim would then commit and the message be
acked without the business change: the one way an asyncio consumer acks without applying
that the transaction guard cannot see (no statement is ever sent).

CPython reports such a coroutine, when it is finalised, by calling
``warnings._warn_unawaited_coroutine(coro)`` (``Objects/genobject.c``,
``_PyErr_WarnUnawaitedCoroutine``, looked up on the ``warnings`` module at each call, CPython
3.8 to 3.14). :func:`install` wraps that function once per process: while a
:func:`tracking` block is active **in the current context** (a ContextVar: each asyncio task
and each greenlet or thread has its own), a finalised coroutine is recorded there instead of
warned about; everywhere else the original runs unchanged. Unlike swapping the process's
warning filters (``warnings.catch_warnings``, not thread- or task-safe before Python 3.14),
this sees only the coroutines dropped by the code running in that context, while other
tasks and threads run.

Limits: a coroutine kept alive past the block (stored in a container, caught in a reference
cycle until the garbage collector finalises it later) is not seen; an interpreter that does
not call ``warnings._warn_unawaited_coroutine`` (not CPython) sees nothing, and
:func:`install` returns False there.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

__all__ = ["install", "tracking"]

#: The names of the coroutines dropped in the current :func:`tracking` block, if any.
_SINK: ContextVar[list[str] | None] = ContextVar("sa_inbox_unawaited_coroutines", default=None)

_HOOK_NAME = "_warn_unawaited_coroutine"


def install() -> bool:
    """Wrap ``warnings._warn_unawaited_coroutine`` (once per process; idempotent).

    :returns: True if the interpreter has the hook (CPython), so :func:`tracking` works.
    """
    original = getattr(warnings, _HOOK_NAME, None)
    if not callable(original):
        return False
    if getattr(original, "__sa_inbox_wrapped__", None) is not None:
        return True
    setattr(warnings, _HOOK_NAME, _recording(original))
    return True


def _recording(original: Callable[[Any], None]) -> Callable[[Any], None]:
    def warn_unawaited_coroutine(coro: Any) -> None:
        sink = _SINK.get()
        if sink is None:
            original(coro)
        else:
            sink.append(str(getattr(coro, "__qualname__", coro)))

    warn_unawaited_coroutine.__sa_inbox_wrapped__ = original  # type: ignore[attr-defined]
    return warn_unawaited_coroutine


@contextlib.contextmanager
def tracking() -> Iterator[list[str]]:
    """Record the coroutines finalised un-awaited in this context while the block runs.

    :returns: (as the ``with`` target) the list of their qualified names, filled as they
        are finalised; nested blocks each see their own.
    """
    sink: list[str] = []
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)
