"""The chaos run's NATS driver (:mod:`sa_inbox.chaos.drivers.nats`) against the live
nats-server, with the run's sync session factory and sync handler on each database (the
driver swaps in the async driver)."""

from __future__ import annotations

import os
import uuid
from decimal import Decimal

import pytest

from sa_inbox.brokers import Disposition
from sa_inbox.chaos.drivers import driver_for
from sa_inbox.chaos.drivers.nats import Driver
from tests.backends.brokers.chaos_support import consume_until
from tests.conftest import broker_url
from tests.support.app import App

pytestmark = pytest.mark.backend


@pytest.fixture
def run_name() -> str:
    prefix = os.environ.get("SA_INBOX_TEST_NATS_PREFIX")
    return f"{prefix}_chaos_{uuid.uuid4().hex[:8]}" if prefix else f"chaos_{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("key_header", ["Nats-Msg-Id", "Idempotency-Key"])
def test_the_chaos_driver_runs_the_payments_once_and_counts_what_is_left(
    url: str, app: App, run_name: str, key_header: str
) -> None:
    if url.startswith("oracle"):
        pytest.skip("no async Oracle driver")
    driver = driver_for(broker_url("nats"))
    assert isinstance(driver, Driver)
    driver.key_header = key_header
    try:
        driver.prepare(run_name, max_deliveries=2)
        sends = [(f"p-{i}", b"1.00") for i in range(5)] + [("p-0", b"1.00"), ("bad", b"boom")]
        driver.publish(run_name, sends)
        stored = 6 if key_header == "Nats-Msg-Id" else 7  # JetStream drops p-0's second copy
        assert driver.unsettled(run_name) == stored
        seen = consume_until(driver, run_name, app, settlements=stored + 1)  # bad: retry, dead
        dispositions = [s.disposition for s in seen]
        assert dispositions.count(Disposition.PROCESSED) == 5
        assert dispositions.count(Disposition.DUPLICATE) == stored - 6
        assert driver.unsettled(run_name) == 0
        assert driver.dead_letters(run_name) == ["bad"]
    finally:
        driver.delete(run_name)
        driver.close()
    assert app.ledger_rows() == 5 and app.inbox_rows() == 5
    assert app.balance(1) == Decimal("5.00")
