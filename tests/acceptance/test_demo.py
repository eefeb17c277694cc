"""``sa-inbox demo`` end to end: the real CLI in a subprocess, on every backend.

Each run replays a small seeded stream through 3 worker processes and writes its
verification to JSON; the tests assert the business state from it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import backend_url

pytestmark = pytest.mark.backend

#: A small stream: enough for every kind of duplicate to happen with this seed.
SMALL = ["--messages", "300", "--workers", "3", "--seed", "7", "--crash-rate", "0.05"]
#: Seconds a run may take before the test gives up.
TIMEOUT = 120


def run_demo(tmp_path: Path, url: str, *options: str) -> tuple[int, dict[str, Any], str]:
    """Run ``python -m sa_inbox.cli demo`` on ``url``; return exit code, JSON and output."""
    report = tmp_path / "verification.json"
    target = (
        ["--db-file", url.removeprefix("sqlite:///")]
        if url.startswith("sqlite")
        else ["--url", url]
    )
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "sa_inbox.cli",
            "demo",
            *SMALL,
            *target,
            "--json",
            str(report),
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert report.exists(), output
    return completed.returncode, json.loads(report.read_text()), output


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_demo_applies_every_payment_exactly_once(backend: str, tmp_path: Path) -> None:
    code, result, output = run_demo(tmp_path, backend_url(backend, tmp_path))

    assert code == 0, output
    assert result["ok"] is True, output
    assert result["mode"] == "inbox"
    assert result["unique_messages"] == 300
    # Business state: each payment once in the ledger, balances equal to the stream's.
    assert result["ledger_rows"] == result["unique_messages"]
    assert result["ledger_messages"] == result["unique_messages"]
    assert result["inbox_rows"] == result["unique_messages"]
    assert result["actual_balance_cents"] == result["expected_balance_cents"]
    assert result["account_mismatches"] == 0
    # Every kind of duplicate happened, and the inbox skipped each one.
    assert result["producer_retries"] > 0
    assert result["concurrent_copies"] > 0
    assert result["crashes"] > 0
    assert result["redeliveries"] >= result["crashes"]
    assert result["concurrent_overlaps"] > 0
    assert result["duplicates_skipped"] > 0
    assert result["processed"] == result["unique_messages"]
    assert result["deliveries"] == (
        result["processed"] + result["duplicates_skipped"] + result["failed"]
    )
    assert "PASS" in output


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_demo_without_inbox_shows_double_applied_money(backend: str, tmp_path: Path) -> None:
    code, result, output = run_demo(tmp_path, backend_url(backend, tmp_path), "--no-inbox")

    assert code == 1, output
    assert result["ok"] is False
    assert result["mode"] == "no-inbox"
    assert result["ledger_rows"] > result["unique_messages"]
    assert result["ledger_rows"] == result["deliveries"] - result["failed"]
    assert result["account_mismatches"] > 0
    assert result["actual_balance_cents"] != result["expected_balance_cents"]
    assert "expected demonstration" in output


def test_demo_stream_is_deterministic(tmp_path: Path) -> None:
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    _, first, _ = run_demo(first_dir, backend_url("sqlite", first_dir))
    _, second, _ = run_demo(second_dir, backend_url("sqlite", second_dir))

    for key in (
        "published",
        "producer_retries",
        "concurrent_copies",
        "crashes",
        "deliveries",
        "expected_balance_cents",
        "duplicates_skipped",
    ):
        assert first[key] == second[key], key
