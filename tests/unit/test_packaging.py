"""What the distribution says of itself: one version (pyproject.toml's), the MIT licence
file it ships, the same pinned tool versions for pre-commit and the test extra."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import metadata, version
from pathlib import Path

import sa_inbox

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_version_is_written_once_in_pyproject() -> None:
    assert sa_inbox.__version__ == version("sa-inbox") == PROJECT["version"]
    literal = re.compile(rf"""["']{re.escape(PROJECT["version"])}["']""")
    copies = [
        p for p in Path(sa_inbox.__file__).parent.rglob("*.py") if literal.search(p.read_text())
    ]
    assert copies == []


def test_the_mit_licence_is_shipped() -> None:
    assert PROJECT["license"] == "MIT"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n\nCopyright (c) the sa-inbox authors\n")
    assert metadata("sa-inbox")["License-Expression"] == "MIT"


def test_pre_commit_pins_the_test_extras_versions() -> None:
    """.pre-commit-config.yaml runs ruff and mypy at the versions the test extra pins."""
    pins = {}
    for requirement in PROJECT["optional-dependencies"]["test"]:
        name, _, pin = requirement.partition("==")
        if name in ("ruff", "mypy"):
            pins[name] = pin
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    hooks = re.findall(r'"(ruff|mypy)==([^"]+)"', config)
    assert sorted(set(hooks)) == sorted(pins.items()) and len(pins) == 2
    assert re.findall(r"entry: (ruff \w+|mypy)", config) == ["ruff check", "ruff format", "mypy"]
