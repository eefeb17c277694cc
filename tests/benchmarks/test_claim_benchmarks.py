"""A tiny run of ``benchmarks/claim_rtt.py`` and ``benchmarks/claim_cost.py`` per backend,
so neither rots.

Figures are never asserted: only the JSON's shape; each repeat checks the business state
itself (ledger rows, balances, claim rows counted by the database) and exits otherwise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchmarks import claim_cost, claim_rtt

pytestmark = [pytest.mark.benchmark, pytest.mark.backend]


def test_claim_rtt_runs_behind_the_delaying_proxy(url: str) -> None:
    if sa.make_url(url).get_backend_name() == "sqlite":
        pytest.skip("a network round trip needs a server")
    ways = ["core-handle", "orm-handle", "orm-extension", "core-connection"]
    args = argparse.Namespace(
        url=url, delay_ms=0.5, messages=3, warmup=1, repeat=1, ways=",".join(ways)
    )
    results = claim_rtt.main(args)
    assert results["scenario"] == "claim_rtt"
    assert list(results["summary"]) == ways
    # the proxy added a round trip of its own to SELECT 1
    assert results["select_1_us"]["through_proxy"] > results["select_1_us"]["direct"]
    for figures in results["summary"].values():
        assert figures["plain_us"] > 0 and figures["claim_us"] > 0


def test_claim_cost_runs(url: str, tmp_path: Path) -> None:
    args = argparse.Namespace(url=url, messages=3, warmup=1, repeat=1, out=tmp_path / "c.json")
    results = claim_cost.main(args)
    assert results["scenario"] == "claim_cost"
    assert {"raw", "raw+claim", "core", "core+claim", "core+SELECT 1", "session+guard"} <= set(
        results["ways"]
    )
    assert "core_over_raw_wall_us" in results["summary"]
    assert results["loadavg"]["samples_1min"]
