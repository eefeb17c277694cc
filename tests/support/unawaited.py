"""A coroutine made by sa-inbox's code and never awaited fails the test that dropped it.

Such a coroutine is work sa-inbox promised and never did (a claim never made, a handler's
statement never run). CPython reports each one it finalises un-awaited through
``warnings._warn_unawaited_coroutine`` (``Objects/genobject.c``); this plugin wraps that
function once per process and records those whose code lives in the ``sa_inbox`` package.

After each phase of each test (setup, call, teardown), a phase that passed while a
coroutine was recorded is reported failed, naming it. A coroutine dropped outright is
finalised at once (its last reference went); one kept in a reference cycle only by the
garbage collector, which runs after each test's teardown (once per test), then freezes
what survived (:func:`gc.freeze`: the next collection walks only what the next test made,
milliseconds instead of tens of them as the session's heap grows). The verdict is the phase's
own report: it holds in one process and under pytest-xdist alike (a worker sends its
reports to the controller; a status set at the session's end in a worker is not).

Registered by ``tests/conftest.py`` (``pytest_plugins``); ``-p tests.support.unawaited``
loads it in any run.
"""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Callable, Generator

import pytest

__all__ = ["UNAWAITED", "install"]

#: Qualified names of sa-inbox's coroutines finalised un-awaited, in order.
UNAWAITED: list[str] = []

_WRAPPED = "__sa_inbox_tests_recording__"
_SEEN = pytest.StashKey[int]()
_PACKAGE = f"{os.sep}sa_inbox{os.sep}"


def install() -> bool:
    """Wrap ``warnings._warn_unawaited_coroutine`` (once; idempotent).

    :returns: False on an interpreter without it (not CPython): nothing is recorded.
    """
    report: Callable[[object], None] | None = getattr(warnings, "_warn_unawaited_coroutine", None)
    if report is None:
        return False
    if getattr(report, _WRAPPED, False):
        return True

    def recording(coro: object) -> None:
        code = getattr(coro, "cr_code", None)
        if code is not None and _PACKAGE in code.co_filename:
            UNAWAITED.append(str(getattr(coro, "__qualname__", coro)))
        report(coro)

    setattr(recording, _WRAPPED, True)
    warnings._warn_unawaited_coroutine = recording  # type: ignore[attr-defined]
    return True


def pytest_configure(config: pytest.Config) -> None:
    install()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_SEEN] = len(UNAWAITED)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    if call.when == "teardown":
        gc.collect()
        gc.freeze()  # what outlived the test: the next test's collection skips it
    seen = item.stash.get(_SEEN, len(UNAWAITED))
    dropped = UNAWAITED[seen:]
    item.stash[_SEEN] = len(UNAWAITED)
    if dropped and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"sa-inbox coroutine(s) never awaited during {call.when}: "
            f"{', '.join(sorted(set(dropped)))} (a call of sa-inbox's asyncio API made a "
            "coroutine that nothing awaited: its work never ran)"
        )
