"""A tiny run of the ``scale`` benchmark (``python -m benchmarks.scale``): figures never
asserted; the JSON's shape, the business checks the scenario makes itself (every new claim
claimed and in the table, every duplicate skipped, the fill's rows counted), the sample
against the exact figures, and the refusal of a fill the disk cannot hold."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from rich.console import Console

from benchmarks import scale
from benchmarks.scale import CONSUMERS, KINDS, RETIRED, consumer_of, message_id
from sa_inbox import stats as stats_module
from sa_inbox.bench.runner import BenchConfig, make_progress, run_scenario
from tests.conftest import backend_url

pytestmark = pytest.mark.benchmark

ROWS = 3_000
CLAIMS = 30


def run(url: str, out: Path, **options: Any) -> dict[str, Any]:
    config = BenchConfig(
        url=url, rows=ROWS, repeat=1, out=out, options={"claims": CLAIMS, **options}
    )
    console = Console(file=io.StringIO(), width=120)
    with make_progress(console) as progress:
        path = run_scenario(scale, config, console=console, progress=progress)
    assert "monitoring" in console.file.getvalue()  # type: ignore[attr-defined]
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def check(document: dict[str, Any], *, sampled: bool) -> dict[str, Any]:
    (size,) = document["results"]["sizes"]
    assert size["rows"] == ROWS
    for kind in KINDS:
        claims = size["claims"][kind]
        assert claims["n"] == CLAIMS and 0 < claims["median_s"] <= claims["p99_s"]
    monitoring = size["monitoring"]
    for key in ("stats", "stats_exact", "cli_stats", "cli_help", "cli_stats_exact", "scrape"):
        assert monitoring[key]["median_s"] > 0, key
    accuracy = monitoring["accuracy"]
    # the exact figures include the new claims: the warm-up round's and the measured ones
    assert accuracy["exact_rows"] == ROWS + min(scale.ROUND, CLAIMS) + CLAIMS
    assert set(accuracy["consumers"]) == {*CONSUMERS, RETIRED} and accuracy["missed"] == []
    assert accuracy["table_rows_estimated"] is sampled
    assert (monitoring["sampled_rows"] > 0) is sampled
    return size


def test_scale_tiny_run_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/scale.db"
    size = check(run(url, tmp_path / "out"), sampled=False)
    assert size["fill"]["method"] == "executemany from Python"
    assert not sa.inspect(sa.create_engine(url)).has_table(scale.TABLE)  # dropped after


@pytest.mark.backend
@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_scale_tiny_run_on_the_servers(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server-side fill, the caches' counters and the sampled monitoring (EXACT_BELOW
    lowered under the tiny table)."""
    url = backend_url(backend, tmp_path)
    monkeypatch.setattr(stats_module, "EXACT_BELOW", ROWS // 10)
    size = check(run(url, tmp_path / "out"), sampled=True)
    assert "SELECT" in size["fill"]["method"]
    assert size["pk_bytes"] > 0 and 0 < size["pk_to_cache"] < 1
    assert size["claims"]["dup_recent"]["hit_ratio"] is not None
    engine = sa.create_engine(url)
    try:
        assert not sa.inspect(engine).has_table(scale.TABLE)
    finally:
        engine.dispose()


def test_the_ids_are_the_servers() -> None:
    """Python's ids and consumers are the ones the servers' fill makes (the duplicates
    claimed must exist): md5 of the row number as a UUID, the retired consumer early."""
    assert message_id(1) == "c4ca4238-a0b9-2382-0dcc-509a6f75849b"  # md5('1')
    assert consumer_of(5, 100) == RETIRED and consumer_of(25, 100) == CONSUMERS[1]
    assert consumer_of(4, 100) == CONSUMERS[0] and consumer_of(7, 100) == CONSUMERS[3]


def test_a_fill_the_disk_cannot_hold_is_refused_before_it_starts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/scale.db"
    result = CliRunner().invoke(
        scale.main, ["--url", url, "--rows", "1000", "--min-free-gb", "1e9"]
    )
    assert result.exit_code == 3 and "must stay free" in result.output
    assert not sa.inspect(sa.create_engine(url)).has_table(scale.TABLE)
