"""A coroutine of sa-inbox's code that nothing awaits fails the test that dropped it
(:mod:`tests.support.unawaited`), in one process and under pytest-xdist alike: proven on
a run of pytest in a subprocess, with the plugin and nothing else of the suite."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPOSITORY = Path(__file__).resolve().parents[2]

#: The inner run's tests: two drop a coroutine of sa-inbox's code (one at once, one in a
#: reference cycle that only the garbage collector finalises), one drops a coroutine of
#: its own, one is clean.
TESTS = """
import asyncio
from sa_inbox.asyncio import _bridge


def test_drops_an_sa_inbox_coroutine():
    _bridge.in_greenlet(print)  # made, never awaited


def test_drops_one_in_a_reference_cycle():
    holder = {"coro": _bridge.loop_sleep}
    holder["coro"] = _bridge.in_greenlet(print)
    holder["self"] = holder


async def own():
    pass


def test_drops_a_coroutine_of_its_own():
    own()


def test_clean():
    asyncio.run(_bridge.in_greenlet(print))
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    pytester.makepyfile(test_inner=TESTS)
    # the inner run's own configuration: none of this repository's (no warnings as errors)
    pytester.makeini("[pytest]\n")
    return pytester


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_dropped_coroutine_fails_its_test(inner: pytest.Pytester, workers: list[str]) -> None:
    plugins = ["-p", "tests.support.unawaited", "-p", "no:cacheprovider"]
    if not workers:
        plugins += ["-p", "no:xdist"]
    result = inner.runpytest_subprocess(*plugins, *workers, "-rA", "-W", "ignore")
    text = result.stdout.str()
    outcomes = result.parseoutcomes()
    # the coroutine dropped outright fails its call; the one in a cycle is found by the
    # collection after the teardown, which fails (pytest counts that as an error)
    assert (outcomes.get("failed"), outcomes.get("errors")) == (1, 1), text
    assert "FAILED test_inner.py::test_drops_an_sa_inbox_coroutine" in text
    assert "ERROR test_inner.py::test_drops_one_in_a_reference_cycle" in text
    assert "never awaited during call: in_greenlet" in text
    assert "never awaited during teardown: in_greenlet" in text
    for name in ("test_drops_a_coroutine_of_its_own", "test_clean"):
        assert f"PASSED test_inner.py::{name}" in text
    assert result.ret == pytest.ExitCode.TESTS_FAILED
