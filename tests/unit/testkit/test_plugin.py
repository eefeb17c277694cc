"""The pytest plugin is opt-in in effect: loaded by its ``pytest11`` entry point wherever
sa-inbox is installed, it defines one fixture and nothing else and imports neither sa-inbox
nor SQLAlchemy, so a project that does not ask for ``exactly_once`` runs exactly as without
it; with autoloading off it is enabled by ``-p sa_inbox.testing.plugin``."""

from __future__ import annotations

import pytest

import _sa_inbox_pytestplugin as entry_point
import sa_inbox.testing.plugin as plugin

pytest_plugins = ["pytester"]

#: A project that knows nothing of sa-inbox: passes, a failure, a skip, an xfail, a marker.
PROJECT = """
import pytest

def test_passes():
    assert 1 + 1 == 2

def test_fails():
    assert 1 + 1 == 3

@pytest.mark.skip(reason="not today")
def test_skipped():
    pass

@pytest.mark.xfail(reason="known")
def test_known():
    assert False

@pytest.mark.parametrize("n", [1, 2, 3])
def test_many(n):
    assert n
"""


def _summary(result: pytest.RunResult) -> tuple[dict[str, int], list[str]]:
    collected = [line for line in result.outlines if "::" in line]
    return result.parseoutcomes(), collected


def test_a_project_not_using_it_runs_as_without_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_project=PROJECT)
    with_it = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    without = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", "-p", "no:sa_inbox")
    assert _summary(with_it) == _summary(without)
    assert with_it.parseoutcomes() == {
        "passed": 4,
        "failed": 1,
        "skipped": 1,
        "xfailed": 1,
    }


def test_it_is_loaded_by_its_entry_point_and_offers_one_fixture(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fixtures")
    result.stdout.fnmatch_lines(["*fixtures defined from _sa_inbox_pytestplugin*", "exactly_once*"])
    for module in (entry_point, plugin):
        assert [name for name in vars(module) if name.startswith("pytest_")] == []
    assert plugin.exactly_once is entry_point.exactly_once


def test_loading_it_imports_neither_sa_inbox_nor_sqlalchemy(pytester: pytest.Pytester) -> None:
    """A project's run pays nothing for it: the module the entry point names is outside the
    package, and the fixture imports the checks only when a test asks for it."""
    pytester.makepyfile(
        test_modules="import sys\n\n"
        "def test_untouched():\n"
        "    assert [m for m in ('sa_inbox', 'sqlalchemy') if m in sys.modules] == []\n\n"
        "def test_used(exactly_once):\n"
        "    assert exactly_once.__name__ == 'check_exactly_once'\n"
        "    assert 'sa_inbox' in sys.modules\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_with_autoloading_off_it_is_enabled_by_name(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(
        test_uses="def test_it(exactly_once):\n    assert exactly_once.__name__ == "
        "'check_exactly_once'\n"
    )
    off = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    off.assert_outcomes(errors=1)
    off.stdout.fnmatch_lines(["*fixture 'exactly_once' not found*"])
    for name in ("sa_inbox", "sa_inbox.testing.plugin"):  # the entry point's, the module's
        on = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", name)
        on.assert_outcomes(passed=1)


def test_a_projects_own_fixture_of_that_name_wins(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import pytest\n\n@pytest.fixture\ndef exactly_once():\n    return 'mine'\n"
    )
    pytester.makepyfile(test_mine="def test_it(exactly_once):\n    assert exactly_once == 'mine'\n")
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
