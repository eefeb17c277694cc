"""A tiny run of the hooks benchmark (figures never asserted; the ledger check is inside)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import hooks_cost

pytestmark = pytest.mark.benchmark


def test_hooks_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "hooks.json"
    hooks_cost.main(
        [
            "--url",
            f"sqlite:///{tmp_path}/b.db",
            "--messages",
            "5",
            "--rounds",
            "1",
            "--noop-repeat",
            "1000",
            "--json",
            str(out),
        ]
    )
    document = json.loads(out.read_text())
    assert set(document["deliveries_per_second_median"]) == {"noop", "prometheus", "opentelemetry"}
    assert document["noop_hooks_ns_per_delivery"] > 0
