"""A tiny run of ``benchmarks/store_drain.py`` per backend, so the benchmark never rots.

Figures are never asserted; the benchmark itself aborts unless every message was processed
exactly once (effect rows counted by the database).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.benchmark, pytest.mark.backend]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "store_drain.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("store_drain", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_store_drain_benchmark_runs(url: str, tmp_path: Path) -> None:
    out = tmp_path / "drain.json"
    document = load().main(
        [
            "--dburl",
            url,
            "--messages",
            "60",
            "--workers",
            "1,2",
            "--repeats",
            "1",
            "--json",
            str(out),
        ]
    )
    assert json.loads(out.read_text()) == document
    assert [run["workers"] for run in document["runs"]] == [1, 2]
    (single,) = document["receive_vs_claim"]
    assert single["messages"] == 60 and single["receive_median_us"] > 0 < single["claim_median_us"]
    for run in document["runs"]:
        assert sum(run["done_per_worker"]) == 60
        assert run["drain_per_second"] > 0 and run["receive_per_second"] > 0
