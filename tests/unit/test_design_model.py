"""The 10^9-row design model (benchmarks.design_model) against hand-computed values."""

from __future__ import annotations

import math

import pytest

from benchmarks.design_model import (
    CORE_BUDGET,
    DAY,
    DESIGNS,
    PAGE,
    RATES,
    WINDOW,
    Measured,
    fit_latency,
    fit_wal,
    fpi_per_claim,
    limit_rate,
    project,
    project_all,
)

DELETE, DAILY, HOURLY = DESIGNS

#: Round inputs: B 200, Bi 100, D 100,000/s, V 50,000/s (1/D + 1/V = 3e-5 s per row),
#: 400 WAL bytes per claim plus 8000 per full-page image, 200 per purged row, 20 µs per
#: batched claim, latency 0.1 ms at 10^6 rows and 0.2 ms at 10^7 (fit: a = -0.5 ms,
#: b = 0.1 ms per decade).
MEASURED = Measured(
    bytes_per_row=200.0,
    index_bytes_per_row=100.0,
    delete_rows_per_second=100_000.0,
    vacuum_rows_per_second=50_000.0,
    wal_bytes_per_claim=400.0,
    fpi_bytes=8000.0,
    wal_bytes_per_purged_row=200.0,
    claim_seconds_per_row_batched=2e-5,
    latency_points=[(1e6, 1e-4), (1e7, 2e-4)],
    partition_create_seconds={"daily": 0.01, "hourly": 0.005},
    partition_drop_seconds={"daily": 0.02, "hourly": 0.01},
    partition_create_wal={"daily": 20_000.0, "hourly": 20_000.0},
    partition_drop_wal={"daily": 8_000.0, "hourly": 8_000.0},
    partition_claim_overhead={"daily": 1e-5, "hourly": 2e-5},
)
BIG_MEMORY = 1e13


def test_window_and_rates_are_the_issue_s() -> None:
    assert WINDOW == 14 * 86_400 and RATES == (2_000, 10_000, 50_000)
    assert [d.name for d in DESIGNS] == ["delete", "daily", "hourly"]


def test_fit_latency_recovers_a_line() -> None:
    a, b = fit_latency([(1e6, 1e-4), (1e7, 2e-4), (1e8, 3e-4)])
    assert a == pytest.approx(-5e-4) and b == pytest.approx(1e-4)
    assert fit_latency([(1000, 0.002)]) == (0.002, 0.0)
    with pytest.raises(ValueError):
        fit_latency([])
    with pytest.raises(ValueError):
        fit_latency([(0, 1.0)])


def test_fpi_per_claim() -> None:
    assert fpi_per_claim(1000, 1000) == pytest.approx(1 - math.exp(-1))  # 0.632
    assert fpi_per_claim(1e9, 10) == pytest.approx(1.0)  # every claim on a fresh page
    assert fpi_per_claim(1, 1e6) == pytest.approx(1e-6)  # one page, one image per cycle
    assert fpi_per_claim(0, 10) == fpi_per_claim(10, 0) == 0.0


def test_fit_wal() -> None:
    assert fit_wal([(0.0, 400.0), (0.5, 4400.0), (1.0, 8400.0)]) == (
        pytest.approx(400.0),
        pytest.approx(8000.0),
    )
    assert fit_wal([(0.2, 500.0), (0.2, 700.0)]) == (600.0, 0.0)
    with pytest.raises(ValueError):
        fit_wal([])


def test_delete_at_2000_per_second() -> None:
    p = project(DELETE, 2_000, WINDOW, MEASURED, BIG_MEMORY)
    # 2000 x (14 + 1) days = 2000 x 1,296,000 s
    assert p.rows == pytest.approx(2.592e9)
    assert p.total_bytes == pytest.approx(5.184e11)
    assert p.hot_rows == p.rows and p.hot_index_bytes == pytest.approx(2.592e11)
    assert p.claim_latency_seconds == pytest.approx(-5e-4 + 1e-4 * math.log10(2.592e9))
    # 2000 x 86400 rows/day x 3e-5 s = 5184 s/day = 0.06 of a core
    assert p.retention_seconds_per_day == pytest.approx(5184)
    assert p.retention_core_share == pytest.approx(0.06)
    assert p.retention_wal_bytes_per_day == pytest.approx(3.456e10)
    # 31,640,625 primary-key pages, 600,000 claims per 5-minute checkpoint cycle:
    # f = (1 - e^-x) / x with x = 600,000 / 31,640,625, ~ 1 - x/2 + x^2/6
    x = 600_000 / (2.592e11 / PAGE)
    assert p.fpi_per_claim == pytest.approx(1 - x / 2 + x**2 / 6, rel=1e-6)
    assert p.claim_wal_bytes_per_day == pytest.approx(2000 * 86400 * (400 + 8000 * p.fpi_per_claim))
    assert p.claim_wal_bytes_per_day == pytest.approx(1.43846e12, rel=1e-4)
    assert p.claims_core_share == pytest.approx(0.04)
    assert p.partitions == 0
    # the core limit: 0.25 / 3e-5 = 8333 msg/s (memory allows 1e13 / (100 x 1,296,000))
    assert (p.limit_rate, p.limit) == (pytest.approx(CORE_BUDGET / 3e-5), "retention core share")
    assert p.viable and p.why_not == ""


def test_delete_stops_past_its_core_budget() -> None:
    p = project(DELETE, 10_000, WINDOW, MEASURED, BIG_MEMORY)
    assert p.retention_core_share == pytest.approx(0.3)
    assert not p.viable and "0.30 of a core" in p.why_not


def test_hourly_at_50000_per_second() -> None:
    p = project(HOURLY, 50_000, WINDOW, MEASURED, BIG_MEMORY)
    assert p.rows == pytest.approx(50_000 * (WINDOW + 3_600))
    assert p.hot_rows == pytest.approx(1.8e8)
    assert p.hot_index_bytes == pytest.approx(1.8e10)
    assert p.claim_latency_seconds == pytest.approx(-5e-4 + 1e-4 * math.log10(1.8e8) + 2e-5)
    # 24 partitions a day, each created (5 ms, 20,000 B) and dropped (10 ms, 8,000 B)
    assert p.retention_seconds_per_day == pytest.approx(0.36)
    assert p.retention_core_share == pytest.approx(0.36 / DAY)
    assert p.retention_wal_bytes_per_day == pytest.approx(24 * 28_000)
    # 2,197,265.625 pages of the hour's primary key, 15,000,000 claims per cycle
    pages = 1.8e10 / PAGE
    assert p.fpi_per_claim == pytest.approx(pages * (1 - math.exp(-15e6 / pages)) / 15e6)
    assert p.fpi_per_claim == pytest.approx(0.14633, rel=1e-4)  # 0.1465 x (1 - e^-6.83)
    assert p.partitions == 337 + 168  # ceil(1,213,200 / 3600) + 7 days ahead
    assert p.limit_rate == pytest.approx(1e13 / (100 * 3_600)) and p.limit == "hot index > memory"
    assert p.viable


def test_daily_partitions_stop_when_the_day_s_index_outgrows_memory() -> None:
    memory = 1e11
    fits = project(DAILY, 10_000, WINDOW, MEASURED, memory)
    assert fits.hot_index_bytes == pytest.approx(8.64e10) and fits.viable
    assert fits.partitions == 15 + 7
    assert fits.limit_rate == pytest.approx(memory / (100 * DAY))  # 11,574 msg/s
    too_big = project(DAILY, 50_000, WINDOW, MEASURED, memory)
    assert not too_big.viable and "hot index 402 GiB > 93 GiB" in too_big.why_not
    rate, name = limit_rate(DELETE, MEASURED, WINDOW, memory)
    assert (rate, name) == (pytest.approx(memory / (100 * (WINDOW + DAY))), "hot index > memory")


def test_project_all_and_bad_input() -> None:
    projections = project_all(MEASURED, BIG_MEMORY)
    assert [(p.design, p.rate) for p in projections] == [
        (d.name, r) for d in DESIGNS for r in RATES
    ]
    with pytest.raises(ValueError):
        project(DELETE, 0, WINDOW, MEASURED, BIG_MEMORY)
    with pytest.raises(ValueError):
        project(DELETE, 1, WINDOW, MEASURED, 0)
