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

from benchmarks.drain_peers import WithPeers, load_peers
from sa_inbox.bench import scenario
from sa_inbox.bench.runner import BenchConfig, make_progress, run_scenario
from sa_inbox.bench.workers import BenchError
from tests.support import drain_peer

pytestmark = [pytest.mark.benchmark, pytest.mark.backend]


def test_store_drain_benchmark_runs(url: str, tmp_path: Path) -> None:
    """Both handlers, both transaction modes, two worker processes, no peer, each drain
    checked by the scenario itself."""
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
            assert row["x_message"] > 0
            assert not [key for key in row if key.startswith("x_") and key != "x_message"]
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "receive vs claim" in output and "batch / message" in output


def test_a_peer_contends_in_the_no_op_cells(url: str, tmp_path: Path) -> None:
    """A peer (:class:`benchmarks.drain_peers.WithPeers`) drains beside both transaction
    modes in the no-op cells only (its own drain checked by its ``check``), with its ratio
    and its column."""
    config = BenchConfig(
        url=url,
        messages=20,
        workers=1,
        repeat=1,
        out=tmp_path / "out",
        options={"batch_size": 10, "levels": [1]},
    )
    peers = WithPeers(load_peers([drain_peer.__name__]))
    console = Console(file=io.StringIO(), width=200)
    with make_progress(console) as progress:
        path = run_scenario(peers, config, console=console, progress=progress)
    results = json.loads(path.read_text())["results"]
    cells = {(r["handler"], r["contender"]) for r in results["runs"]}
    assert cells == {("noop", "message"), ("noop", "batch"), ("noop", "peer"),
                     ("ledger", "message"), ("ledger", "batch")}  # fmt: skip
    (peer,) = [r for r in results["runs"] if r["contender"] == "peer"]
    assert peer["done_per_worker"] == [20] and peer["errors"] == 0
    batch = [r for r in results["summary"] if r["contender"] == "batch"]
    ratios = {r["handler"]: r.get("x_peer") for r in batch}
    assert ratios["noop"] > 0 and ratios["ledger"] is None
    assert "batch / peer" in console.file.getvalue()  # type: ignore[attr-defined]


def test_a_peer_named_as_an_own_contender_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(drain_peer, "NAME", "batch")
    with pytest.raises(BenchError, match="'batch' is already taken"):
        load_peers([drain_peer.__name__])
