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

from sa_inbox.demo.stream import Stream, generate_stream
from tests.conftest import backend_url

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


@pytest.mark.backend
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


@pytest.mark.backend
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


def test_demo_stream_is_deterministic() -> None:
    """The same seed plans the same stream: ids, amounts, duplicates and crashes."""

    def plan(seed: int) -> Stream:
        return generate_stream(300, seed=seed, duplicate_rate=0.1, crash_rate=0.05)

    first, second, other = plan(7), plan(7), plan(8)

    assert first == second
    assert first.payments != other.payments
    assert first.reasons["producer-retry"] > 0
    assert first.reasons["concurrent"] > 0
    assert first.crashes_planned > 0
    assert all(len(payment.message_id) == 40 for payment in first.payments)
