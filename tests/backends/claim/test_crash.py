"""Crashes of a real consumer process, killed with SIGKILL, then redelivery to a fresh one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from tests.backends.claim.crash_child import AMOUNT
from tests.support.app import App

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[3]


#: The consumer process: ``crash_child`` (sync); the asyncio tests pass their own.
CHILD = "tests.backends.claim.crash_child"


def start(url: str, message_id: str, mode: str, child: str = CHILD) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", child, url, message_id, mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def kill_when(child: subprocess.Popen[str], line: str) -> None:
    assert child.stdout is not None
    got = child.stdout.readline().strip()
    assert got == line, f"child said {got!r}; stderr: {child.stderr.read() if child.stderr else ''}"
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)  # reap it and close its pipes
    assert child.returncode == -signal.SIGKILL


def redeliver(url: str, message_id: str, child_module: str = CHILD) -> list[str]:
    child = start(url, message_id, "deliver", child_module)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    return out.split()


def test_crash_between_commit_and_ack(url: str, app: App) -> None:
    kill_when(start(url, "pay-1", "crash-after-commit"), "COMMITTED")
    assert app.ledger_rows("pay-1") == 1, "the commit happened before the crash"
    assert redeliver(url, "pay-1") == ["ACKED", "duplicate"]
    assert app.ledger_rows("pay-1") == 1
    assert app.balance(1) == AMOUNT
    assert app.inbox_rows() == 1


def test_crash_before_commit(url: str, app: App) -> None:
    kill_when(start(url, "pay-1", "crash-before-commit"), "APPLIED")
    assert app.ledger_rows() == 0 and app.inbox_rows() == 0, "nothing survives the crash"
    assert redeliver(url, "pay-1") == ["ACKED", "processed"]
    assert redeliver(url, "pay-1") == ["ACKED", "duplicate"]
    assert app.ledger_rows("pay-1") == 1
    assert app.balance(1) == Decimal(AMOUNT)
