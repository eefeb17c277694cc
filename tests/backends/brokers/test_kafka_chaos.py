"""``sa-inbox chaos --broker kafka://...`` against Tansu, small: consumers SIGKILLed at
random and right after their commit, producer retries, poison records; every payment
applied once, nothing left after the group's committed offsets, the dead letters the poison.

Kafka's own pace sets the run's: a SIGKILLed member keeps its partitions until its session
times out (:data:`~sa_inbox.chaos.drivers.kafka.SESSION_TIMEOUT_MS`) and each rebalance
costs Tansu a held JoinGroup, so kills come seconds apart (kills faster than rebalances
starve a group). No crash in the handler: Kafka keeps no delivery count, so a record whose
handler kills its process comes back as a first delivery, and the chaos run's crash (on a
first delivery only) would follow it for ever.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from sa_inbox.chaos.consumer import AFTER_COMMIT, crash_chosen
from sa_inbox.chaos.drivers import driver_for
from sa_inbox.chaos.workload import PREFIX, make_plan
from tests.acceptance.test_chaos import assert_applied_once
from tests.conftest import backend_url, broker_url
from tests.support.cli import run_cli

pytestmark = [pytest.mark.backend, pytest.mark.slow]

SEED, MESSAGES, POISON, DUPLICATES = 7, 300, 3, 0.1
CRASHES = 0.01
MAX_KILLS = 2
#: Seconds the run may take (the CLI's --timeout); the test waits a bit longer.
RUN_TIMEOUT = 400
PLAN = make_plan(MESSAGES, seed=SEED, duplicates=DUPLICATES, poison=POISON)
CHOSEN = sum(crash_chosen(SEED, i, AFTER_COMMIT, CRASHES) for i in PLAN.payments)


def run_chaos(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """``sa-inbox chaos ARGS --json FILE``: the exit code, the JSON, the output."""
    report = tmp_path / "result.json"
    completed = run_cli(
        "chaos", *args, "--json", str(report), timeout=RUN_TIMEOUT + 60, traceback=True
    )
    output = completed.stdout + completed.stderr
    assert report.exists(), output
    return completed.returncode, json.loads(report.read_text()), output


def test_chaos_run_on_kafka_applies_every_payment_once(tmp_path: Path) -> None:
    broker = broker_url("kafka")
    url = backend_url("postgresql", tmp_path)
    name = f"sa-inbox-chaos-{uuid.uuid4().hex[:10]}"
    code, result, output = run_chaos(
        tmp_path,
        *("--broker", broker, "--url", url, "--name", name),
        *("--messages", str(MESSAGES), "--consumers", "1", "--kill-every", "8"),
        *("--max-kills", str(MAX_KILLS), "--max-deliveries", "4"),
        *("--poison", str(POISON), "--duplicates", str(DUPLICATES)),
        *("--crash-after-commit", str(CRASHES), "--seed", str(SEED)),
        *("--timeout", str(RUN_TIMEOUT)),
    )
    assert code == 0, output
    assert result["ok"] is True and all(result["checks"].values()), output
    assert 0 < result["crashes_after_commit"] <= CHOSEN, output
    assert result["duplicates_skipped"] >= PLAN.duplicate_publishes > 0
    assert_applied_once(url, PREFIX, PLAN.expected_balances(), MESSAGES)
    driver = driver_for(broker)
    try:
        assert driver.unsettled(name) == 0
        assert sorted(driver.dead_letters(name)) == sorted(PLAN.poison_ids)
    finally:
        driver.close()
