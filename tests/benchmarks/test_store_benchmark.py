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
    """Both handlers, both transaction modes, two worker processes (pactix is not importable
    here: Python < 3.12), each drain checked by the scenario itself."""
    config = BenchConfig(
        url=url,
        messages=40,
        workers=2,
        repeat=1,
        out=tmp_path / "out",
        options={"batch_size": 10, "levels": [2]},
    )
    console = Console(file=io.StringIO(), width=200)
    with make_progress(console) as progress:
        path = run_scenario(scenario("store_drain"), config, console=console, progress=progress)
    document = json.loads(path.read_text())
    assert path.name == f"store_drain-{document['backend']}.json"
    results = document["results"]
    cells = [(r["handler"], r["workers"], r["contender"]) for r in results["runs"]]
    assert sorted(cells) == sorted(
        (h, 2, c) for h in ("noop", "ledger") for c in ("message", "batch")
    )
    assert {(r["handler"], r["workers"], r["contender"]) for r in results["summary"]} == set(cells)
    (single,) = results["receive_vs_claim"]
    assert single["messages"] == 40
    assert {"receive_median_us", "claim_median_us", "ratio"} <= single.keys()
    for run in results["runs"]:
        assert run["messages"] == 40 and sum(run["done_per_worker"]) == 40
        assert len(run["done_per_worker"]) == run["workers"] and run["errors"] == 0
    for row in results["summary"]:
        if row["contender"] == "batch":
            assert row["x_message"] > 0 and row["x_pactix"] is None
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "receive vs claim" in output and "batch / message" in output
