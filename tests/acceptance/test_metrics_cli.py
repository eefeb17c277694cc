"""``sa-inbox worker --metrics-port`` and ``sa-inbox relay --metrics-port``: the process's
metrics scraped over HTTP while it runs, as Prometheus would, against the store's and the
outbox's real rows (and the live Redis for the relay)."""

from __future__ import annotations

import signal
import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.acceptance.test_store_cli import cli
from tests.conftest import broker_url, importorskip
from tests.support.console_app import ConsoleApp
from tests.support.store_app import make_engine

importorskip("prometheus_client", "prometheus")

pytestmark = pytest.mark.backend


@pytest.fixture
def capp(url: str) -> Iterator[ConsoleApp]:
    engine = make_engine(url)
    app = ConsoleApp(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_until(port: int, line: str, child: object, timeout: float = 90) -> str:
    """GET /metrics until it holds ``line`` (the child still running)."""
    deadline = time.monotonic() + timeout
    text = ""
    while line not in text:
        assert child.poll() is None, child.communicate()  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"no {line!r} in:\n{text}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            pass  # not listening yet
        time.sleep(0.1)
    return text


def test_the_worker_serves_its_failure_counters(url: str, capp: ConsoleApp) -> None:
    for n in range(3):
        capp.receive(f"m-{n}", {"amount": n})
    port = free_port()
    child = cli(
        "worker", "--url", url, "--consumer", "billing", "--max-attempts", "2",
        "--backoff", "0", "--poll-interval", "0.05", "--metrics-port", str(port),
        "--handler", "tests.acceptance.cli_handler:fail",
    )  # fmt: skip
    try:
        text = scrape_until(port, 'sa_inbox_handler_failures_total{consumer="billing"} 6.0', child)
        assert 'sa_inbox_handler_seconds_count{consumer="billing"} 6.0' in text
    finally:
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert f"worker metrics on http://127.0.0.1:{port}/metrics" in err
    assert capp.statuses() == {"m-0": "dead", "m-1": "dead", "m-2": "dead"}


def test_the_relay_serves_its_counts(url: str, capp: ConsoleApp) -> None:
    client = redis.Redis.from_url(broker_url("redis"))
    stream = f"sa-inbox-metrics:{uuid.uuid4().hex}"
    for n in range(3):
        capp.publish(f"o-{n}", stream, b"{}")
    port = free_port()
    child = cli(
        "relay", "--url", url, "--broker", broker_url("redis"), "--metrics-port", str(port),
    )  # fmt: skip
    try:
        text = scrape_until(port, 'sa_inbox_relay_messages_total{outcome="dispatched"} 3.0', child)
        assert 'sa_inbox_relay_messages_total{outcome="dead"} 0.0' in text
        assert client.xlen(stream) == 3
    finally:
        child.send_signal(signal.SIGTERM)
        child.communicate(timeout=60)
        client.delete(stream)
        client.close()
    assert child.returncode == 0
    assert {capp.outbox_status(f"o-{n}") for n in range(3)} == {"dispatched"}


def test_a_metrics_port_in_use_is_refused(url: str, capp: ConsoleApp) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        child = cli(
            "worker", "--url", url, "--consumer", "billing", "--metrics-port", str(port),
            "--handler", "tests.acceptance.cli_handler:record",
        )  # fmt: skip
        _, err = child.communicate(timeout=60)
    assert child.returncode == 3, err
    assert f"cannot serve the metrics on 127.0.0.1:{port}" in err
