"""Chaos on the live Galera cluster (small): store workers on the three nodes drain a store
while one node is SIGKILLed and restarted (IST rejoin); every message is applied exactly
once on every node. The bigger runs are ``benchmarks/galera_chaos.py`` (RESULTS.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import galera_chaos
from tests.support.galera_chaos import run_galera_chaos

pytestmark = [pytest.mark.backend, pytest.mark.slow]


def test_a_node_killed_and_restarted_mid_run_every_message_applied_once(
    galera_urls: list[str], galera_dir: str
) -> None:
    # seed 14 kills node 1, the one bootstrapped: its data dir was made as root, and even
    # an IST rejoin gets a file through rsync's daemon, as nobody (a failed rejoin, found
    # by the benchmark and fixed in servers.sh galera-restart).
    figures = run_galera_chaos(galera_urls, galera_dir, messages=600, kills=1, seed=14)
    print(figures.as_dict())
    assert figures.killed_nodes == [1] and figures.rejoined_by == ["IST"]
    assert figures.exactly_once, figures.as_dict()
    assert figures.reasons == ["empty"] * 3, figures.as_dict()


def test_the_chaos_benchmark_script_runs_and_writes_its_json(
    galera_urls: list[str], galera_dir: str, tmp_path: Path
) -> None:
    """``benchmarks/galera_chaos.py`` at its smallest (no kill): figures never asserted,
    only the JSON's shape and the run's verification."""
    out = tmp_path / "chaos.json"
    status = galera_chaos.main(
        ["--runs", "1", "--messages", "60", "--kills", "0", "--handler-ms", "0", "--out", str(out)]
    )
    assert status == 0
    written = json.loads(out.read_text())
    assert written["totals"]["runs"] == 1 and written["totals"]["lost"] == 0
    assert written["runs"][0]["store_done"] == [60, 60, 60]
