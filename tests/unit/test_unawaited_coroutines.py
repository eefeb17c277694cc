"""``sa_inbox.asyncio._unawaited``: dropped coroutines seen per context, warned elsewhere."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import warnings

import pytest

from sa_inbox.asyncio import _unawaited


async def _statement() -> None:
    """Stands for ``AsyncSession.execute``."""


def test_the_hook_is_installed_once() -> None:
    assert _unawaited.install() and _unawaited.install()
    hook = warnings._warn_unawaited_coroutine  # type: ignore[attr-defined]
    assert hook.__sa_inbox_wrapped__ is not None
    assert getattr(hook.__sa_inbox_wrapped__, "__sa_inbox_wrapped__", None) is None


def test_a_drop_inside_the_block_is_recorded_and_not_warned() -> None:
    _unawaited.install()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _unawaited.tracking() as dropped:
            _statement()  # type: ignore[unused-coroutine]
            gc.collect()
    assert dropped.dropped == ["_statement"]
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_a_drop_outside_any_block_still_warns() -> None:
    _unawaited.install()
    with pytest.warns(RuntimeWarning, match="coroutine '_statement' was never awaited"):
        _statement()  # type: ignore[unused-coroutine]
        gc.collect()


def test_a_drop_in_another_thread_is_not_recorded_here() -> None:
    _unawaited.install()
    started, finish = threading.Event(), threading.Event()
    others: list[_unawaited.Unfinished] = []

    def other_thread() -> None:
        with _unawaited.tracking() as theirs:
            started.set()
            finish.wait(5)
            _statement()  # type: ignore[unused-coroutine]
        others.append(theirs)

    thread = threading.Thread(target=other_thread)
    thread.start()
    started.wait(5)
    with _unawaited.tracking() as mine:
        finish.set()
        thread.join(5)
    assert mine.dropped == [] and [o.dropped for o in others] == [["_statement"]]


def test_a_drop_in_another_task_is_not_recorded_here() -> None:
    _unawaited.install()

    async def watched(gate: asyncio.Event) -> list[str]:
        with _unawaited.tracking() as started:
            gate.set()
            await asyncio.sleep(0.01)  # the other task drops its coroutine meanwhile
        return started.dropped

    async def careless(gate: asyncio.Event) -> list[str]:
        await gate.wait()
        with _unawaited.tracking() as started:
            _statement()  # type: ignore[unused-coroutine]
        return started.dropped

    async def main() -> tuple[list[str], list[str]]:
        gate = asyncio.Event()
        mine, theirs = await asyncio.gather(watched(gate), careless(gate))
        return mine, theirs

    assert asyncio.run(main()) == ([], ["_statement"])


def test_a_coroutine_finalised_by_the_garbage_collector_is_not_recorded() -> None:
    """A cycle's coroutine is finalised by whichever code triggers the collection: not that
    code's doing, so it is warned about as usual instead of recorded."""
    _unawaited.install()
    gc.disable()
    try:
        cycle: list[object] = [_statement()]
        cycle.append(cycle)
        del cycle
        with (
            _unawaited.tracking() as started,
            pytest.warns(RuntimeWarning, match="'_statement' was never awaited"),
        ):
            gc.collect()
    finally:
        gc.enable()
    assert started.dropped == []


def test_tasks_created_in_the_block_are_recorded_and_judged() -> None:
    async def quick() -> None:
        await asyncio.sleep(0)

    async def fails() -> None:
        raise LookupError

    async def main() -> tuple[list[str], list[str]]:
        outside = asyncio.create_task(quick())
        with _unawaited.tracking() as started:
            done = asyncio.create_task(quick())
            await done
            running = asyncio.create_task(asyncio.sleep(1), name="running")
            unseen = asyncio.create_task(fails(), name="unseen")
            seen = asyncio.create_task(fails(), name="seen")
            await asyncio.sleep(0.01)
            assert isinstance(seen.exception(), LookupError)
        recorded = [t.get_name() for t in started.tasks]
        left = [t.get_name() for t in started.left_behind()]
        assert outside not in started.tasks and done in started.tasks
        running.cancel()
        unseen.exception()
        await outside
        return left, [n for n in recorded if n in ("running", "unseen", "seen")]

    assert asyncio.run(main()) == (["running", "unseen"], ["running", "unseen", "seen"])


IMPORT_THEN_HANDLE = r"""
import asyncio, gc, sys, warnings
original, callbacks = warnings._warn_unawaited_coroutine, list(gc.callbacks)
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
import sa_inbox, sa_inbox.asyncio
from sa_inbox import Inbox
from sa_inbox.asyncio import handle
assert warnings._warn_unawaited_coroutine is original, "patched at import"
assert gc.callbacks == callbacks, "gc.callbacks changed at import"

async def main():
    engine = create_async_engine(f"sqlite+aiosqlite:///{sys.argv[1]}")
    metadata = sa.MetaData()
    inbox = Inbox(metadata, consumers=False)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    async def handler(session):
        return None
    result = await handle(
        async_sessionmaker(engine), inbox, "m-1", "c", handler, ack=lambda: None, nack=lambda: None
    )
    await engine.dispose()
    return result

assert asyncio.run(main()).error is None
hook = warnings._warn_unawaited_coroutine
assert hook.__sa_inbox_wrapped__ is original, "not installed by the first handler call"
assert len(gc.callbacks) == len(callbacks) + 1
print("ok")
"""


def test_the_hooks_are_installed_by_the_first_async_handler_call_not_the_import(
    tmp_path: object,
) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", IMPORT_THEN_HANDLE, f"{tmp_path}/lazy.db"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


RACE = r"""
import gc, threading, warnings
original, callbacks = warnings._warn_unawaited_coroutine, list(gc.callbacks)
from sa_inbox.asyncio import _unawaited
threads, barrier = 8, threading.Barrier(8)
def first_call():
    barrier.wait()
    assert _unawaited.install()
workers = [threading.Thread(target=first_call) for _ in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
async def statement(): pass
with _unawaited.tracking() as started:
    statement()
    gc.collect()
assert started.dropped == ["statement"]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    statement()
    gc.collect()
assert len([w for w in caught if "never awaited" in str(w.message)]) == 1, caught
print("ok")
"""


def test_racing_first_calls_install_without_a_lock_and_warn_once() -> None:
    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
