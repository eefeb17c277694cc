"""The suite's report of a failure whose source excerpt CPython cannot build
(:mod:`tests.support.reports`): a failed test with its traceback, never an INTERNALERROR."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytest_plugins = ["pytester"]

#: A conftest that makes pytest's source excerpt raise as CPython 3.11.7 does under threads.
BROKEN_EXCERPT = """
import _pytest._code.code as code

def raising(*args, **kwargs):
    raise SystemError("AST constructor recursion depth mismatch (before=147, after=75)")

code.getstatementrange_ast = raising
"""


@pytest.fixture(autouse=True)
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner run imports :mod:`tests.support.reports` from this checkout."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def run(pytester: pytest.Pytester, conftest: str) -> pytest.RunResult:
    pytester.makeconftest(conftest)
    pytester.makepyfile(
        test_one="""
        def test_fails():
            balance = 3
            assert balance == 4

        def test_passes():
            assert True
        """
    )
    return pytester.runpytest_subprocess("-p", "tests.support.reports", "-p", "no:cacheprovider")


def test_a_failure_is_reported_with_its_traceback(pytester: pytest.Pytester) -> None:
    result = run(pytester, BROKEN_EXCERPT)
    result.assert_outcomes(failed=1, passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*assert balance == 4*", "*gh-106905*", "FAILED test_one.py::test_fails*"]
    )
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


def test_without_the_plugin_it_is_an_internal_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(BROKEN_EXCERPT)
    pytester.makepyfile(test_one="def test_fails():\n    assert 3 == 4\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR


def test_another_system_error_is_left_alone(pytester: pytest.Pytester) -> None:
    result = run(pytester, BROKEN_EXCERPT.replace("AST constructor", "something else"))
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR


#: An old-style hookwrapper as hypothesis' (``(yield).get_result()``): pluggy turns the error
#: its teardown re-raises into ``PluggyTeardownRaisedWarning``, an error under ``-W error``.
OLD_STYLE_WRAPPER = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    (yield).get_result()
"""


def test_a_failure_is_reported_through_an_old_style_hookwrapper(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(BROKEN_EXCERPT)
    pytester.makepyfile(oldstyle=OLD_STYLE_WRAPPER)
    pytester.makepyfile(
        test_one="def test_fails():\n    assert 3 == 4\n\ndef test_passes():\n    pass\n"
    )
    result = pytester.runpytest_subprocess(
        "-p", "oldstyle", "-p", "tests.support.reports", "-p", "no:cacheprovider", "-W", "error"
    )
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*gh-106905*", "FAILED test_one.py::test_fails*"])
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
