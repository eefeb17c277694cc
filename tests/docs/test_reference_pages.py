"""The reference pages that list what the code defines list all of it: every exception of
sa_inbox.exc on the errors page (and its docstring links there), every log event name, every
exit code and ``stats --check`` code; the intersphinx inventories match their table."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import sa_inbox.exc
from sa_inbox.cli import _common
from sa_inbox.hooks import EVENTS
from sa_inbox.stats import WARNING_CODES

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _labels(page: str) -> set[str]:
    return set(re.findall(r"^\((error-[a-z]+)\)=$", (DOCS / page).read_text(), re.MULTILINE))


@pytest.mark.parametrize("name", sa_inbox.exc.__all__)
def test_every_exception_has_an_entry_on_the_errors_page(name: str) -> None:
    label = f"error-{name.lower()}"
    page = (DOCS / "errors.md").read_text()
    assert label in _labels("errors.md"), f"docs/errors.md has no ({label})= entry"
    entry = page.split(f"({label})=", 1)[1].split("\n(error-", 1)[0]
    assert f"### {name}\n" in entry, f"the entry ({label})= is not headed {name}"
    assert "**Means**" in entry or name in ("InboxError",), f"{name}: what it means"


@pytest.mark.parametrize("name", sa_inbox.exc.__all__)
def test_every_exception_links_to_its_entry(name: str) -> None:
    doc = getattr(sa_inbox.exc, name).__doc__ or ""
    assert f".. seealso:: :ref:`error-{name.lower()}`" in doc


def test_the_errors_page_has_no_entry_for_an_exception_that_is_gone() -> None:
    expected = {f"error-{name.lower()}" for name in sa_inbox.exc.__all__}
    assert _labels("errors.md") == expected


def test_the_log_events_page_lists_every_event() -> None:
    page = (DOCS / "reference" / "log-events.md").read_text()
    listed = re.findall(r"^\| `(inbox\.[a-z_.]+)` \|", page, re.MULTILINE)
    assert listed == list(EVENTS)


def test_the_exit_codes_page_lists_every_code() -> None:
    page = (DOCS / "reference" / "exit-codes.md").read_text()
    codes = {int(c) for c in re.findall(r"^\| (\d+) \|", page, re.MULTILINE)}
    exits = {getattr(_common, name) for name in dir(_common) if name.startswith("EXIT_")}
    assert exits <= codes
    for kind, code in WARNING_CODES.items():
        assert f"| {code} | `{kind}` |" in page, f"stats --check {code} {kind} is not listed"


def test_the_inventories_are_the_ones_their_script_makes() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_inventories", DOCS / "_inventories" / "make_inventories.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for project in module.INVENTORIES:
        path = DOCS / "_inventories" / f"{project.lower()}.inv"
        assert path.read_bytes() == module.inventory(project), f"run {spec.origin}"
    assert (DOCS / "_inventories" / "python.inv").stat().st_size > 50_000
