"""A tiny run of every benchmark scenario, so the suite never rots.

The figures are never asserted: only that each scenario ran on the real backend, wrote its
JSON with the expected shape, and left the business state it promises (ledger rows ==
messages processed, one inbox row per claimed id, rows counted by the database).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from sa_inbox.bench import SCENARIOS, scenario
from sa_inbox.bench.async_layer import async_layers
from sa_inbox.bench.claim_overhead import LAYERS, MODES, WARMUP
from sa_inbox.bench.keys import KEY_FORMATS
from sa_inbox.bench.runner import BenchConfig, make_progress, run_scenario
from sa_inbox.bench.workers import share
from sa_inbox.cli import main
from tests.conftest import backend_url

pytestmark = pytest.mark.benchmark

BENCH_BACKENDS = ("sqlite", "postgresql", "mysql")


@pytest.fixture(params=BENCH_BACKENDS)
def bench_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    request.applymarker(pytest.mark.backend)
    return backend_url(request.param, tmp_path)


def run(name: str, config: BenchConfig) -> dict[str, Any]:
    """Run scenario ``name`` quietly; return its JSON document as written."""
    console = Console(file=io.StringIO(), width=200)
    with make_progress(console) as progress:
        path = run_scenario(scenario(name), config, console=console, progress=progress)
    assert path.parent == config.out and path.name.startswith(f"{name}-")
    document: dict[str, Any] = json.loads(path.read_text())
    assert document["scenario"] == name
    assert {"label", "backend", "server", "machine", "config", "results"} <= document.keys()
    assert document["label"] and document["backend"] in ("sqlite", "postgresql", "mariadb", "mysql")
    return document


def tiny(url: str, tmp_path: Path, **kw: Any) -> BenchConfig:
    return BenchConfig(url=url, workers=2, repeat=1, out=tmp_path / "out", **kw)


def test_claim_overhead(bench_url: str, tmp_path: Path) -> None:
    messages = 12
    results = run("claim_overhead", tiny(bench_url, tmp_path, messages=messages))["results"]
    cells = results["cells"]
    assert results["workers_kind"] == "processes"
    # every async driver of the backend is installed with the test extra
    layers = [*LAYERS, *async_layers(bench_url)]
    assert len(layers) == len(LAYERS) + (2 if bench_url.startswith("postgresql") else 1)
    assert results["skipped_layers"] == []
    assert {(c["workers"], c["layer"], c["mode"]) for c in cells} == {
        (w, layer, mode) for w in (1, 2) for layer in layers for mode in MODES
    }
    for cell in cells:
        workers, mode = cell["workers"], cell["mode"]
        # paired: plain / claim (sync layers), plain / hand-written / claim (async layers)
        kinds = {"plain": 1, "claim": 1, "paired": 2 if cell["layer"] in LAYERS else 3}[mode]
        warmups = WARMUP * workers * kinds
        claimed = [
            # in each worker's cycle of `kinds` messages, all but the first insert a claim
            sum(1 for n in range(share(messages, w, workers)) if n % kinds) + WARMUP * (kinds - 1)
            for w in range(workers)
        ]
        claims = {"plain": 0, "claim": messages + warmups, "paired": sum(claimed)}[mode]
        assert cell["state"] == {
            "ledger_rows": messages + warmups,
            "inbox_rows": claims,
            "balance_total": f"{messages + warmups}.00",
        }
        assert cell["label"] and cell["per_second"] > 0
        if mode == "paired":
            assert cell["paired_plain_median_us"] > 0 and cell["paired_claim_median_us"] > 0
            assert ("paired_hand_median_us" in cell) == (cell["layer"] not in LAYERS)
    summary = results["summary"]
    assert [(r["workers"], r["layer"]) for r in summary] == [(w, x) for w in (1, 2) for x in layers]
    keys = {"ratio", "paired_ratio", "plain_us_per_message", "claim_us_per_message"}
    for row in summary:
        assert keys <= row.keys()
        assert ("paired_claim_vs_hand" in row) == (row["layer"] not in LAYERS)


def test_batch_claim(bench_url: str, tmp_path: Path) -> None:
    results = run("batch_claim", tiny(bench_url, tmp_path, messages=3))["results"]
    sizes = [c["batch_size"] for c in results["cells"]]
    assert sizes == [1, 10, 100, 500, 1000]
    for cell in results["cells"]:
        assert cell["messages"] == max(3, 10 * cell["batch_size"]) == cell["inbox_rows"]
        assert cell["transactions"] == cell["messages"] // cell["batch_size"]
    assert [r["batch_size"] for r in results["summary"]] == sizes


def test_index_hotspots(bench_url: str, tmp_path: Path) -> None:
    document = run("index_hotspots", tiny(bench_url, tmp_path, messages=20))
    cells = document["results"]["cells"]
    assert len(cells) == len(KEY_FORMATS) * 2 * 2
    for cell in cells:
        assert cell["rows"] == 20
        assert {"index_bytes", "leaf_pages", "leaf_density_pct"} <= cell["index"].keys()
        assert cell["index"]["index_bytes"] > 0
        assert cell["waits"]["samples"] >= 0
        if document["backend"] == "mariadb":
            assert "index_page_splits" in cell["innodb_metrics"]


def test_growth(bench_url: str, tmp_path: Path) -> None:
    results = run("growth", tiny(bench_url, tmp_path, rows=3000))["results"]
    assert results["rows"] == 3000
    assert results["total_bytes"] == results["table_bytes"] + results["index_bytes"] > 0
    assert results["bytes_per_row"] == results["total_bytes"] / 3000


@pytest.fixture(scope="module")
def sqlite_results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every scenario's JSON from one tiny SQLite run of the CLI."""
    out = tmp_path_factory.mktemp("bench")
    args = ["bench", "--messages", "4", "--workers", "2", "--repeat", "1", "--rows", "500"]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    yield out


def test_cli_runs_every_scenario(sqlite_results: Path) -> None:
    assert sorted(p.name for p in sqlite_results.glob("*.json")) == sorted(
        f"{name}-sqlite.json" for name in SCENARIOS
    )


def test_report_writes_markdown_and_plots(sqlite_results: Path) -> None:
    result = CliRunner().invoke(main, ["bench", "report", "--out", str(sqlite_results)])
    assert result.exit_code == 0, result.output
    report = (sqlite_results / "report.md").read_text()
    for name in SCENARIOS:
        label = json.loads((sqlite_results / f"{name}-sqlite.json").read_text())["label"]
        assert f"## {label}" in report
        assert (sqlite_results / f"{name}.png").read_bytes().startswith(b"\x89PNG")


def test_report_without_results_fails(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["bench", "report", "--out", str(tmp_path)])
    assert result.exit_code == 3
    assert "no benchmark JSON" in result.output
