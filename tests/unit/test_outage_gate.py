"""The outage gate's decisions (sa_inbox.outage): probe, wait with capped jittered back-off,
keep leases alive, log an outage once, tell the hooks; on a fake clock and fake probes (the
real outages are tests/backends/outages)."""

from __future__ import annotations

import itertools
import logging
import threading

import pytest

from sa_inbox.backoff import Backoff
from sa_inbox.hooks import InboxHooks
from sa_inbox.outage import OutageGate, Verdict


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Probe:
    """Fails ``failures`` times, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionRefusedError("refused")


class Hooks(InboxHooks):
    def __init__(self) -> None:
        self.outages: list[tuple[str, float]] = []

    def database_outage(self, consumer_name: str, *, seconds: float) -> None:
        self.outages.append((consumer_name, seconds))


def gate_on(clock: Clock, waits: list[float], **kw: object) -> OutageGate:
    def sleep(seconds: float) -> bool:
        waits.append(seconds)
        clock.now += seconds
        return False

    return OutageGate("billing", sleep=sleep, clock=clock, **kw)  # type: ignore[arg-type]


def test_a_probe_that_answers_at_once_is_no_outage(caplog: pytest.LogCaptureFixture) -> None:
    waits: list[float] = []
    gate = gate_on(Clock(), waits)
    with caplog.at_level(logging.DEBUG, "sa_inbox.outage"):
        assert gate.wait(ConnectionResetError(), Probe(0)) is Verdict.REACHABLE
    assert waits == [] and caplog.records == [] and gate.outages == 0


def test_an_outage_waits_with_capped_jittered_backoff_and_logs_once_each_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, waits, hooks = Clock(), [], Hooks()
    backoff = Backoff(base=0.5, maximum=4.0)
    gate = gate_on(clock, waits, backoff=backoff, hooks=hooks)
    with caplog.at_level(logging.DEBUG, "sa_inbox.outage"):
        assert gate.wait(ConnectionResetError(), Probe(6)) is Verdict.RECOVERED
    assert len(waits) == 6  # one wait after each failed probe
    assert all(0 <= w <= backoff.delay(n) for n, w in enumerate(waits, 1))
    levels = [(r.levelname, r.event) for r in caplog.records]  # type: ignore[attr-defined]
    assert levels == [
        ("WARNING", "inbox.database.unavailable"),
        ("INFO", "inbox.database.available"),
    ]
    assert caplog.records[0].exc_info is None
    assert hooks.outages == [("billing", pytest.approx(sum(waits)))]
    assert gate.outages == 1 and not gate.in_outage


def test_leases_are_kept_alive_at_the_start_and_every_interval_of_waiting() -> None:
    clock, waits, kept = Clock(), [], []
    gate = gate_on(
        clock,
        waits,
        backoff=Backoff(base=4.0, maximum=4.0),
        keep_alive=lambda: kept.append(clock.now),
        keep_alive_every=1.0,
    )
    gate.wait(ConnectionResetError(), Probe(3))
    assert all(w <= 1.0 for w in waits)  # waits are cut at each keep-alive
    start = kept[0]
    gaps = [b - a for a, b in itertools.pairwise(kept)]
    assert start == 100.0 and all(g <= 1.0 + 1e-9 for g in gaps)
    assert kept[-1] >= 100.0 + sum(waits) - 1.0


def test_a_stop_during_an_outage_ends_the_wait_unsettled() -> None:
    gate = OutageGate("billing", sleep=lambda seconds: True)
    assert gate.wait(ConnectionResetError(), Probe(100)) is Verdict.STOPPED
    assert gate.in_outage  # no probe got through: the outage goes on


def test_threads_of_one_consumer_log_one_outage(caplog: pytest.LogCaptureFixture) -> None:
    up = threading.Event()
    barrier = threading.Barrier(4)

    def probe() -> None:
        if not up.is_set():
            raise ConnectionRefusedError("refused")

    def sleep(seconds: float) -> bool:
        up.wait(0.01)
        return False

    gate = OutageGate("billing", sleep=sleep, backoff=Backoff(base=0.001, maximum=0.001))
    verdicts: list[Verdict] = []

    def consumer() -> None:
        barrier.wait()
        verdicts.append(gate.wait(ConnectionResetError(), probe))

    with caplog.at_level(logging.DEBUG, "sa_inbox.outage"):
        threads = [threading.Thread(target=consumer) for _ in range(3)]
        for thread in threads:
            thread.start()
        barrier.wait()
        while not gate.in_outage:
            up.wait(0.001)
        up.set()
        for thread in threads:
            thread.join(10)
    events = [r.event for r in caplog.records]  # type: ignore[attr-defined]
    assert events.count("inbox.database.unavailable") == 1
    assert events.count("inbox.database.available") == 1
    assert len(verdicts) == 3 and Verdict.STOPPED not in verdicts


def test_the_async_driver_takes_the_same_steps() -> None:
    import asyncio

    waits: list[float] = []

    async def sleep(seconds: float) -> bool:
        waits.append(seconds)
        return False

    probe = Probe(2)

    async def aprobe() -> None:
        probe()

    gate = OutageGate("billing", sleep=sleep, backoff=Backoff(base=0.5, maximum=1.0))
    assert asyncio.run(gate.wait_async(ConnectionResetError(), aprobe)) is Verdict.RECOVERED
    assert len(waits) == 2 and probe.calls == 3
