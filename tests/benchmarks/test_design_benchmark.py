"""A tiny run of the ``design`` benchmark scenario (``python -m benchmarks.design``).

PostgreSQL at 10^4 rows (the published run is 10^7): the JSON's shape, figures measured
(non-zero and consistent with each other and with the fill), the business checks the
scenario makes itself (the purge and the partition drops took exactly the expired rows),
the projections built from them, and the PNG. Other backends are refused with a clear error.

The partition fill does not depend on the wall clock: it is run with an injected "now" at
minutes of the hour (and hours of the day) where the former fill left the oldest partition
empty, and every partition a drop takes must hold rows (about 5 s on PostgreSQL).
"""

from __future__ import annotations

import datetime
import io
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from rich.console import Console

from benchmarks import design
from benchmarks.design import (
    FILL_POLICY,
    MIN_PARTITION_ROWS,
    POLICY,
    fill_partitions,
    table,
)
from benchmarks.design_model import DESIGNS, RATES
from sa_inbox.bench.runner import BenchConfig, make_progress, run_scenario
from sa_inbox.bench.workers import BenchError
from sa_inbox.retention.partitions import (
    DEFAULT_AHEAD,
    create_partition,
    drop_expired_partitions,
    list_partitions,
    partition_range,
    partitioned_processed_messages_table,
)
from tests.conftest import backend_url

pytestmark = pytest.mark.benchmark

ROWS = 10_000
CLAIMS = 40


def run(config: BenchConfig) -> dict[str, Any]:
    console = Console(file=io.StringIO(), width=250)
    with make_progress(console) as progress:
        path = run_scenario(design, config, console=console, progress=progress)
    assert "hourly" in console.file.getvalue()  # type: ignore[attr-defined]
    document: dict[str, Any] = json.loads(path.read_text())
    return document


@pytest.mark.backend
def test_design_scenario_tiny_run_on_postgresql(tmp_path: Path) -> None:
    out = tmp_path / "out"
    config = BenchConfig(
        url=backend_url("postgresql", tmp_path),
        rows=ROWS,
        repeat=1,
        out=out,
        options={"claims": CLAIMS, "partition_rows": 2_000},
    )
    document = run(config)
    assert document["scenario"] == "design"
    assert document["label"] == (
        "Design: the 10^9-row inbox on PostgreSQL, measured at 100 / 1,000 / 10,000 rows "
        "(partitions: 2,000 rows) and projected"
    )
    results = document["results"]

    growth = results["growth"]
    assert [g["fill_rows"] for g in growth] == [100, 900, 9_000]
    measured_rows = [g["rows"] for g in growth]  # the fill plus the claims measured so far
    assert measured_rows == [100, 1_000 + 5_040, 10_000 + 2 * 5_040]
    for g in growth:
        assert g["total_bytes"] > g["index_bytes"] > g["pk_bytes"] > 0
        assert g["pk_pages"] == g["pk_bytes"] / 8192
        assert 100 < g["bytes_per_row"] < 2_000
        single, batched = g["single_claim"], g["batched_claim"]
        assert single["n"] == single["reference"]["n"] == CLAIMS
        assert 0 < single["median_s"] <= single["p99_s"]
        assert single["ratio"] == single["median_s"] / single["reference"]["median_s"]
        assert batched["seconds_per_row"] > 0 and batched["reference_seconds_per_row"] > 0
        assert batched["wal_bytes_per_row"] > 0
        assert 0 < batched["fpi_per_claim_expected"] < 1

    purge = results["purge"]
    assert abs(purge["expired"] - ROWS // 15) <= 2  # 1/15 of the fill is past 14 of 15 days
    assert purge["deleted"] >= purge["expired"] and purge["rows_left_older_than_cutoff"] == 0
    left = measured_rows[-1] + 5_040 - purge["deleted"] + purge["claims_during"].get("n", 0)
    assert purge["rows_kept"] == left
    for key in ("rows_per_second", "wal_bytes_per_row", "vacuum_rows_per_second"):
        assert purge[key] > 0

    daily, hourly = results["partitions"]["daily"], results["partitions"]["hourly"]
    assert daily["runs"][0]["partitions_created"] == 25  # 17 days + 7 ahead + today
    assert hourly["runs"][0]["partitions_created"] == 24 * 24 + 1
    # the 3 days past the 14-day window (one more if a boundary passed since the creation)
    assert daily["runs"][0]["partitions_dropped"] in (3, 4)
    assert hourly["runs"][0]["partitions_dropped"] in (72, 73)
    for part in (daily, hourly):
        run_ = part["runs"][0]
        assert 0 < run_["rows_dropped"] < 2_000
        assert run_["drop_seconds_per_partition"] > 0 and run_["create_seconds_per_partition"] > 0
        assert run_["hot_partition_rows"] >= CLAIMS
        claim = run_["single_claim"]
        assert run_["claim_overhead_s"] == claim["median_s"] - claim["reference"]["median_s"]

    inputs = results["model_inputs"]
    assert inputs["delete_rows_per_second"] == purge["rows_per_second"]
    assert inputs["bytes_per_row"] == growth[-1]["bytes_per_row"]
    assert inputs["index_bytes_per_row"] == growth[-1]["pk_bytes_per_row"]
    assert [p[0] for p in inputs["latency_points"]] == measured_rows
    assert len(inputs["wal_points"]) == 3
    projections = results["projections"]
    assert [(p["design"], p["rate"]) for p in projections] == [
        (d.name, r) for d in DESIGNS for r in RATES
    ]
    by = {(p["design"], p["rate"]): p for p in projections}
    for rate in RATES:
        assert (
            by["delete", rate]["retention_core_share"] > by["hourly", rate]["retention_core_share"]
        )
        assert by["hourly", rate]["hot_rows"] * 24 == pytest.approx(by["daily", rate]["hot_rows"])
    assert results["load_average"]["before"] and results["memory_bytes"] > 0
    assert (out / "design.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    readable_at_80_columns(results)


def readable_at_80_columns(results: dict[str, Any]) -> None:
    """The table as a pipe prints it (80 columns): no cell cut, every figure whole."""
    console = Console(file=io.StringIO(), width=80)
    console.print(table(results))
    text: str = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in text, text
    assert max(map(len, text.splitlines())) <= 80
    flat = " ".join(text.split())
    for p in results["projections"]:
        assert f"{p['rate']:,.0f}" in flat and f"{p['rows']:.2e}" in flat
        if not p["viable"]:  # the verdict wraps over lines but loses no word
            cells = [line.split("│")[-2] for line in text.splitlines() if line.count("│") == 5]
            assert all(word in " ".join(cells) for word in p["why_not"].split())


HOUR, DAY = datetime.timedelta(hours=1), datetime.timedelta(days=1)
#: Where "now" falls in its hour (or day): :48-:59 left the oldest hourly partition empty
#: with the former fill (one row per 12.2 minutes from now - 17 days), 23:48-23:59 the daily.
FRACTIONS = (0.0, 0.2, 0.5, 0.8, 0.85, 0.95, 0.995, 0.99999)


def partition_rows(conn: sa.Connection, part: sa.Table) -> dict[str, int]:
    counts = {p.name: 0 for p in list_partitions(conn, part)}
    rows = conn.execute(
        sa.text(f"SELECT tableoid::regclass::text, count(*) FROM {part.name} GROUP BY 1")
    ).all()
    counts.update({str(name): int(count) for name, count in rows})
    return counts


@pytest.mark.backend
@pytest.mark.parametrize("interval", [HOUR, DAY], ids=["hourly", "daily"])
def test_partition_fill_leaves_no_expired_partition_empty_at_any_minute(
    tmp_path: Path, interval: datetime.timedelta
) -> None:
    """The scenario's fill, with "now" injected at several points of one past hour (day):
    every partition from the oldest to now holds rows, at the minimum size and the test's,
    so those the 14-day drop takes (72 hourly, 3 daily) are full; then the real drop, at
    the database's clock, takes only full partitions."""
    engine = sa.create_engine(backend_url("postgresql", tmp_path))
    part = partitioned_processed_messages_table(sa.MetaData(), table_name="bench_design_clock")
    part.metadata.drop_all(engine, checkfirst=True)
    part.metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            now = conn.execute(sa.select(sa.func.now())).scalar_one()
            base = partition_range(now, interval)[0] - interval  # the previous hour (day)
            # the partitions ensure_partitions() creates at any moment of [base, base + interval)
            lower = partition_range(base - FILL_POLICY.window, interval)[0]
            while lower <= base + interval + DEFAULT_AHEAD:
                create_partition(conn, part, lower, interval)
                lower += interval
        for rows in (MIN_PARTITION_ROWS, 2_000):
            for fraction in FRACTIONS:
                fake = base + fraction * interval
                with engine.begin() as conn:
                    conn.execute(part.delete())
                fill_partitions(engine, part, rows, now=fake)
                with engine.connect() as conn:
                    counts = partition_rows(conn, part)
                    partitions = list_partitions(conn, part)
                up_to_now = [p.name for p in partitions if p.lower <= fake]
                expired = [p.name for p in partitions if p.upper <= fake - POLICY.window]
                where = f"{rows} rows, now = {fake:%H:%M:%S}"
                assert len(expired) == 3 * DAY // interval, where
                assert [n for n in up_to_now if counts[n] == 0] == [], where
                assert sum(counts.values()) == sum(counts[n] for n in up_to_now) == rows, where
        dropped = drop_expired_partitions(engine, part, policy=POLICY)
        assert set(expired) <= set(dropped)
        assert [n for n in dropped if counts[n] == 0] == []
    finally:
        part.metadata.drop_all(engine, checkfirst=True)
        engine.dispose()


def test_design_scenario_refuses_too_few_partition_rows(tmp_path: Path) -> None:
    config = BenchConfig(
        url=f"sqlite:///{tmp_path}/x.db",
        rows=100_000,
        out=tmp_path / "out",
        options={"partition_rows": MIN_PARTITION_ROWS - 1},
    )
    with pytest.raises(BenchError, match=f"need at least {MIN_PARTITION_ROWS:,} rows"):
        run(config)
    assert not (tmp_path / "out").exists() and not (tmp_path / "x.db").exists()


def test_design_scenario_refuses_sqlite(tmp_path: Path) -> None:
    config = BenchConfig(url=f"sqlite:///{tmp_path}/x.db", rows=100, out=tmp_path / "out")
    with pytest.raises(BenchError, match="PostgreSQL partitions; sqlite has none"):
        run(config)
    assert not (tmp_path / "out").exists()
    result = CliRunner().invoke(
        design.main, ["--url", f"sqlite:///{tmp_path}/x.db", "--rows", "100"]
    )
    assert result.exit_code == 3 and "PostgreSQL partitions" in result.output
