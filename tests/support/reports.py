"""A failing test's report when CPython cannot build its source excerpt.

CPython 3.11 before 3.11.8 can raise ``SystemError: AST constructor recursion depth
mismatch`` from :func:`ast.parse` while another thread builds an AST too (python/cpython
gh-106905). pytest parses the test's source to show the failing statement, so a failure
reported while a thread the test left behind compiles something (a lazy import, a
dataclass) turns into an INTERNALERROR that ends the whole run, under xdist with no test
summary. :func:`native_report` gives that test the plain Python traceback instead, also
when another plugin's old-style hookwrapper turned the error into pluggy's
``PluggyTeardownRaisedWarning``.
"""

from __future__ import annotations

import traceback
from collections.abc import Generator

import pluggy
import pytest

__all__ = ["MISMATCH", "native_report"]

#: The text of CPython's error (Python/Python-ast.c).
MISMATCH = "AST constructor recursion depth mismatch"


def native_report(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """The report pytest makes of ``call``, with the exception's own traceback (as
    ``--tb=native`` shows it) as its text."""
    excinfo = call.excinfo
    assert excinfo is not None, "only a failed call has no source excerpt to build"
    text = "".join(traceback.format_exception(excinfo.value))
    return pytest.TestReport(
        item.nodeid,
        item.location,
        {name: 1 for name in item.keywords},
        "failed",
        f"{text}\n(shown as a plain traceback: CPython raised {MISMATCH!r}, gh-106905)",
        call.when,  # type: ignore[arg-type]
        user_properties=item.user_properties,
        start=call.start,
        stop=call.stop,
        duration=call.duration,
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    try:
        return (yield)
    except (SystemError, pluggy.PluggyTeardownRaisedWarning) as exc:
        # An old-style hookwrapper inside this one (hypothesis') that saw the SystemError
        # raises pluggy's warning instead, an error under ``filterwarnings = error``;
        # its message quotes the SystemError's.
        if MISMATCH not in str(exc):
            raise
        return native_report(item, call)
