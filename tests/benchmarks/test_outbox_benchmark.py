"""A tiny run of the outbox benchmark on PostgreSQL and the live RabbitMQ (the scenario's code
is the same on every database; one run keeps the suite fast). The figures are never
asserted, only the JSON's shape and the state the scenario checks itself (one outbox row per
publishing transaction; every row dispatched, the queue holding each message once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sa_inbox.bench.outbox import RELAY_LEVELS
from tests.benchmarks.test_benchmarks import run, tiny
from tests.conftest import backend_url, broker_url

pytestmark = [pytest.mark.benchmark, pytest.mark.backend]


def test_outbox_scenario_tiny_run(tmp_path: Path) -> None:
    url = backend_url("postgresql", tmp_path)
    config = tiny(url, tmp_path, messages=20, options={"broker": broker_url("rabbitmq")})
    results = run("outbox", config)["results"]
    assert {(c["workers"], c["layer"]) for c in results["write_cells"]} == {
        (w, layer) for w in (1, 2) for layer in ("orm", "core")
    }
    assert all(c["outbox_rows"] == 10 + 5 * c["workers"] for c in results["write_cells"])
    assert [(c["client"], c["relays"]) for c in results["relay_cells"]] == [
        (client, n) for client in ("pika", "aio-pika") for n in RELAY_LEVELS
    ]
    assert all(c["per_second"] > 0 for c in results["relay_cells"])
    assert results["relay_skipped"] is None
