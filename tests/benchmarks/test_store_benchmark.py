"""A tiny run of the ``store_drain`` scenario of ``sa-inbox bench`` per backend, so the
benchmark never rots.

Figures are never asserted: only the JSON's shape and the state the scenario checks itself
(every message processed exactly once, effect rows counted by the database).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from sa_inbox.bench import scenario
from sa_inbox.bench.runner import BenchConfig, make_progress, run_scenario

pytestmark = [pytest.mark.benchmark, pytest.mark.backend]


def test_store_drain_benchmark_runs(url: str, tmp_path: Path) -> None:
    config = BenchConfig(url=url, messages=60, workers=2, repeat=1, out=tmp_path / "out")
    console = Console(file=io.StringIO(), width=200)
    with make_progress(console) as progress:
        path = run_scenario(scenario("store_drain"), config, console=console, progress=progress)
    document = json.loads(path.read_text())
    assert path.name == f"store_drain-{document['backend']}.json"
    results = document["results"]
    assert [run["workers"] for run in results["runs"]] == [1, 2]
    assert [row["workers"] for row in results["summary"]] == [1, 2]
    (single,) = results["receive_vs_claim"]
    assert single["messages"] == 60
    assert {"receive_median_us", "claim_median_us", "ratio"} <= single.keys()
    for run in results["runs"]:
        assert run["messages"] == 60 and sum(run["done_per_worker"]) == 60
        assert len(run["done_per_worker"]) == run["workers"]
    assert "receive vs claim" in console.file.getvalue()  # type: ignore[attr-defined]
