"""``sa_inbox.asyncio._unawaited``: dropped coroutines seen per context, warned elsewhere."""

from __future__ import annotations

import asyncio
import gc
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
    assert dropped == ["_statement"]
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_a_drop_outside_any_block_still_warns() -> None:
    _unawaited.install()
    with pytest.warns(RuntimeWarning, match="coroutine '_statement' was never awaited"):
        _statement()  # type: ignore[unused-coroutine]
        gc.collect()


def test_a_drop_in_another_thread_is_not_recorded_here() -> None:
    _unawaited.install()
    started, finish = threading.Event(), threading.Event()
    others: list[list[str]] = []

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
    assert mine == [] and others == [["_statement"]]


def test_a_drop_in_another_task_is_not_recorded_here() -> None:
    _unawaited.install()

    async def watched(gate: asyncio.Event) -> list[str]:
        with _unawaited.tracking() as dropped:
            gate.set()
            await asyncio.sleep(0.01)  # the other task drops its coroutine meanwhile
        return dropped

    async def careless(gate: asyncio.Event) -> list[str]:
        await gate.wait()
        with _unawaited.tracking() as dropped:
            _statement()  # type: ignore[unused-coroutine]
        return dropped

    async def main() -> tuple[list[str], list[str]]:
        gate = asyncio.Event()
        mine, theirs = await asyncio.gather(watched(gate), careless(gate))
        return mine, theirs

    assert asyncio.run(main()) == ([], ["_statement"])
