"""A tiny run of the ``purge`` benchmark scenario (``sa-inbox bench purge``) per backend.

The figures are never asserted: only that the scenario ran on the real backend, wrote its
JSON, and deleted exactly the expired half in batches of at most the batch size (the
scenario itself raises if any row inside the window went).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from sa_inbox.bench import scenario
from sa_inbox.bench.runner import BenchConfig, make_progress, run_scenario
from tests.conftest import backend_url

pytestmark = pytest.mark.benchmark


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_purge_scenario_tiny_run(backend: str, tmp_path: Path) -> None:
    config = BenchConfig(
        url=backend_url(backend, tmp_path),
        repeat=2,
        rows=3000,
        out=tmp_path / "out",
        options={"batch_size": 400},
    )
    console = Console(file=io.StringIO(), width=200)
    with make_progress(console) as progress:
        path = run_scenario(scenario("purge"), config, console=console, progress=progress)
    document = json.loads(path.read_text())
    assert document["scenario"] == "purge" and document["label"].startswith("Purge")
    results = document["results"]
    assert (results["rows"], results["expired_rows"], results["batch_size"]) == (3000, 1500, 400)
    assert [(r["deleted"], r["batches"]) for r in results["runs"]] == [(1500, 4), (1500, 4)]
    assert "rows/s" in console.file.getvalue()  # type: ignore[attr-defined]
