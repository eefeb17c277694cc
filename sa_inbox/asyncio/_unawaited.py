"""Work a handler started and did not finish: coroutines dropped un-awaited, tasks left behind.

Two ways an ``async def`` handler returns normally while part of its change never ran (or
runs only after the commit): the claim would then commit and the message be acked without
it, and the transaction guard cannot see either (no statement is sent in the transaction):

* **a coroutine dropped without ``await``**: ``session.execute(stmt)`` only makes a
  coroutine; Python finalises it with ``RuntimeWarning: coroutine ... was never awaited``.
  CPython reports such a coroutine by calling ``warnings._warn_unawaited_coroutine(coro)``
  (``Objects/genobject.c``, ``_PyErr_WarnUnawaitedCoroutine``, looked up on the
  ``warnings`` module at each call, CPython 3.8 to 3.14);
* **a task left running or failed unseen**: ``asyncio.create_task(session.execute(...))``,
  ``ensure_future``, ``shield``, or ``gather`` whose other awaitable raised (the rest keep
  running): the task runs during or after the commit (and fails on the closed
  transaction), or failed with nobody retrieving its exception. Every task is made by the
  event loop's task factory (``loop.create_task``; asyncio docs, "Event Loop",
  ``loop.set_task_factory``), called in the context of the code creating it.

The first :func:`tracking` block (the first async handler call, never the import of
:mod:`sa_inbox.asyncio`) wraps CPython's hook once per process (:func:`install`), and each
block wraps the running loop's task factory once per loop (chaining to a factory already set, e.g.
``asyncio.eager_task_factory``). While a :func:`tracking` block is active **in the current
context** (a ContextVar: each asyncio task, greenlet and thread has its own), a coroutine
finalised un-awaited is recorded there instead of warned about, and every task created is
recorded; everywhere else both behave as before. Unlike swapping the process's warning
filters (``warnings.catch_warnings``, not thread- or task-safe before Python 3.14), this sees
only what the code running in that context does, while other tasks and threads run.

Limits: a coroutine kept alive past the block (stored in a container, or in a reference
cycle that the garbage collector finalises later) is not seen, and neither is one the
garbage collector finalises during the block (it cannot be told from other code's: it is
warned about as usual); ``anext(agen)`` / ``agen.asend(None)`` without ``await`` make an
awaitable that CPython never reports; a task factory set on the loop *after* the first
block replaces the wrapper (tasks are then not seen); an interpreter that does not call
``warnings._warn_unawaited_coroutine`` (not CPython) sees no dropped coroutine, and
:func:`install` returns False there.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from .._compat import task_failed_unseen, unawaited_coroutine_hook

__all__ = ["Unfinished", "install", "tracking"]


@dataclass
class Unfinished:
    """What the code of one :func:`tracking` block started: filled as it runs."""

    #: Qualified names of the coroutines finalised un-awaited.
    dropped: list[str] = field(default_factory=list)
    #: Every task created (see :meth:`left_behind`).
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    def left_behind(self) -> list[asyncio.Task[Any]]:
        """The tasks still running, and those that failed with an exception nobody
        retrieved (``Task.exception()`` / ``await``; asyncio's own "Task exception was
        never retrieved" flag)."""
        return [task for task in self.tasks if not task.done() or task_failed_unseen(task)]


#: The record of the :func:`tracking` block active in the current context, if any.
_SINK: ContextVar[Unfinished | None] = ContextVar("sa_inbox_unfinished_work", default=None)

_WRAPPED = "__sa_inbox_wrapped__"

#: Per thread: how many garbage collections are running (a finalisation then is not the
#: current code's doing).
_collecting = threading.local()


def _on_gc(phase: str, info: dict[str, int]) -> None:
    depth = getattr(_collecting, "depth", 0)
    _collecting.depth = depth + 1 if phase == "start" else max(depth - 1, 0)


def install() -> bool:
    """Wrap ``warnings._warn_unawaited_coroutine`` and watch the garbage collector, once per
    process; :func:`tracking` calls it.

    Idempotent, and without a lock (an event loop's thread never waits on one): a call finds
    the wrapper in place and returns. Two threads racing the first call may both wrap; the
    outer wrapper then passes what it does not record to the inner one, which does the same,
    so a coroutine is recorded or warned about once either way.

    :returns: True if the interpreter has the hook (CPython), so dropped coroutines are seen.
    """
    current = unawaited_coroutine_hook()
    if current is None:
        return False
    if getattr(current, _WRAPPED, None) is None:
        unawaited_coroutine_hook(_recording)
        if _on_gc not in gc.callbacks:
            gc.callbacks.append(_on_gc)
    return True


def _recording(original: Callable[[Any], None]) -> Callable[[Any], None]:
    def warn_unawaited_coroutine(coro: Any) -> None:
        sink = _SINK.get()
        if sink is None or getattr(_collecting, "depth", 0) > 0:
            original(coro)
        else:
            sink.dropped.append(str(getattr(coro, "__qualname__", coro)))

    setattr(warn_unawaited_coroutine, _WRAPPED, original)
    return warn_unawaited_coroutine


def _watch_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Wrap ``loop``'s task factory so that the tasks created in a :func:`tracking` block
    are recorded there (once per loop; a factory already set is called by the wrapper)."""
    current = loop.get_task_factory()
    if current is not None and getattr(current, _WRAPPED, False):
        return

    def task_factory(
        loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Future[Any]:
        if current is None:
            task: asyncio.Future[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        else:
            task = current(loop, coro, **kwargs)
        sink = _SINK.get()
        if sink is not None and isinstance(task, asyncio.Task):
            sink.tasks.append(task)
        return task

    setattr(task_factory, _WRAPPED, True)
    loop.set_task_factory(task_factory)


@contextlib.contextmanager
def tracking() -> Iterator[Unfinished]:
    """Record what the code in this context starts and leaves unfinished while the block
    runs: the coroutines it drops un-awaited, the tasks it creates.

    :returns: (as the ``with`` target) an :class:`Unfinished`, filled as things happen;
        nested blocks each have their own.
    """
    install()
    with contextlib.suppress(RuntimeError):  # no running loop: no task can be created
        _watch_tasks(asyncio.get_running_loop())
    sink = Unfinished()
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)
