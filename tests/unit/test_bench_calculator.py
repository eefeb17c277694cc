"""The growth calculator and the UUIDv7 generator of the benchmark suite (no database)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from sa_inbox.bench.growth import load_figures, parse_window, project
from sa_inbox.bench.keys import KEY_FORMATS, key_factory, uuid7
from sa_inbox.cli import main

SECONDS_PER_WEEK = 7 * 86_400


def growth_json(path: Path, backend: str, bytes_per_row: float) -> Path:
    document = {
        "scenario": "growth",
        "backend": backend,
        "server": "test",
        "finished_at": "2026-01-01T00:00:00+00:00",
        "results": {"bytes_per_row": bytes_per_row, "rows": 1_000_000, "key_format": "uuid4"},
    }
    target = path / f"growth-{backend}.json"
    target.write_text(json.dumps(document))
    return target


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7d", SECONDS_PER_WEEK),
        ("2w", 2 * SECONDS_PER_WEEK),
        ("12h", 43_200),
        ("90m", 5400),
        ("1.5s", 1.5),
    ],
)
def test_parse_window(text: str, seconds: float) -> None:
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["7", "d", "7x", "-1d", "0d", "7 days"])
def test_parse_window_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="window"):
        parse_window(text)


def test_project_rows_and_bytes() -> None:
    figures = {"postgresql": {"bytes_per_row": 150.0}, "sqlite": {"bytes_per_row": 100.0}}
    projections = project(2000, SECONDS_PER_WEEK, figures, consumers=2)
    assert [p.backend for p in projections] == ["postgresql", "sqlite"]
    assert all(p.rows == 2000 * SECONDS_PER_WEEK * 2 for p in projections)
    assert projections[0].total_bytes == 2000 * SECONDS_PER_WEEK * 2 * 150.0
    with pytest.raises(ValueError):
        project(0, 1, figures)


def test_published_figures_cover_the_three_backends() -> None:
    figures = load_figures()
    assert set(figures) == {"sqlite", "postgresql", "mariadb"}
    for figure in figures.values():
        assert figure["rows"] == 1_000_000 and figure["bytes_per_row"] > 0


def test_cli_calculator_reads_own_measurement(tmp_path: Path) -> None:
    growth_json(tmp_path, "postgresql", 200.0)
    args = ["bench", "growth", "--rate", "2000", "--window", "7d", "--figures", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "1,209,600,000" in result.output  # 2000/s x 604800 s
    assert "225.3 GiB" in result.output  # 1 209 600 000 x 200 bytes


def test_cli_calculator_usage_errors(tmp_path: Path) -> None:
    bad_window = CliRunner().invoke(main, ["bench", "growth", "--rate", "10", "--window", "7x"])
    assert bad_window.exit_code == 2 and "--window" in bad_window.output
    other = CliRunner().invoke(main, ["bench", "batch_claim", "--rate", "10"])
    assert other.exit_code == 2
    missing = CliRunner().invoke(
        main, ["bench", "growth", "--rate", "10", "--figures", str(tmp_path)]
    )
    assert missing.exit_code == 3 and "growth" in missing.output


def test_uuid7_layout() -> None:
    now_ns = 1_700_000_000_123_456_789
    value = uuid7(now_ns)
    assert value.version == 7 and value.variant == uuid.RFC_4122
    assert value.int >> 80 == now_ns // 1_000_000  # 48-bit Unix milliseconds
    assert (value.int >> 64) & 0xFFF == (now_ns % 1_000_000) * 4096 // 1_000_000


def test_uuid7_sorts_by_time() -> None:
    base = time.time_ns()
    ids = [str(uuid7(base + step * 1_000)) for step in range(0, 5000, 7)]  # 7 µs apart
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_key_formats() -> None:
    keys = {name: [key_factory(name)(n) for n in range(100)] for name in KEY_FORMATS}
    assert keys["sequential"] == sorted(keys["sequential"])
    assert keys["hash-prefixed"] != sorted(keys["hash-prefixed"])
    assert all(len(set(values)) == 100 for values in keys.values())
    with pytest.raises(ValueError, match="unknown key format"):
        key_factory("uuid1")
