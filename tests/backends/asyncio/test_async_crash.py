"""Crashes of a real asyncio consumer process (:func:`sa_inbox.asyncio.handle`), killed with
SIGKILL, then redelivery to a fresh one: the sync crash tests' helpers and assertions, with
the async child :mod:`tests.backends.asyncio.crash_child` on every async driver."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.backends.claim.crash_child import AMOUNT
from tests.backends.claim.test_crash import kill_when, redeliver, start
from tests.support.app import App

pytestmark = pytest.mark.backend

CHILD = "tests.backends.asyncio.crash_child"


def test_crash_between_commit_and_ack(async_url: str, app: App) -> None:
    kill_when(start(async_url, "pay-1", "crash-after-commit", CHILD), "COMMITTED")
    assert app.ledger_rows("pay-1") == 1, "the commit happened before the crash"
    assert redeliver(async_url, "pay-1", CHILD) == ["ACKED", "duplicate"]
    assert app.ledger_rows("pay-1") == 1
    assert app.balance(1) == AMOUNT
    assert app.inbox_rows() == 1


def test_crash_before_commit(async_url: str, app: App) -> None:
    kill_when(start(async_url, "pay-1", "crash-before-commit", CHILD), "APPLIED")
    assert app.ledger_rows() == 0 and app.inbox_rows() == 0, "nothing survives the crash"
    assert redeliver(async_url, "pay-1", CHILD) == ["ACKED", "processed"]
    assert redeliver(async_url, "pay-1", CHILD) == ["ACKED", "duplicate"]
    assert app.ledger_rows("pay-1") == 1
    assert app.balance(1) == Decimal(AMOUNT)
