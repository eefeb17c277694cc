"""A broker connection lost under the consumers: each keeps running and applies every
message once.

The broker's side of :mod:`tests.support.db_outage`: the database stays up while
``rabbitmqctl close_all_connections`` closes every AMQP connection, or RabbitMQ, Redis or
NATS is SIGKILLed and restarted (``scripts/servers.sh kill`` / ``restart``), under a steady
publish rate. Each lane then has every published id in its ledger exactly once, no dead
letter, no retry, no settlement past the second delivery (what the dead connection held
unsettled comes back once, counted by the broker), and, for sa-inbox's own consumers, one
WARNING when the connection was lost and one INFO when it was made again. FastStream and
Celery reconnect by their frameworks' own means (aio-pika's ``connect_robust``, kombu). And
a pika or aio-pika consumer whose handler blocks past the heartbeat gets its connection
closed by RabbitMQ, and reconnects. moto, SQS's emulator, is SIGKILLed while the SQS
consumers hold a message in their handler, and restarted: they reconnect.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery
from tests.support.db_outage import (
    AioPikaLane,
    AsyncSqsLane,
    Lane,
    LaneFigures,
    Outage,
    PikaLane,
    SqsLane,
    rabbitmqctl,
    run_outage,
    servers_sh,
)

pytestmark = [
    pytest.mark.backend,
    pytest.mark.slow,
    # Celery's notice on a lost connection (the lane's worker keeps the default)
    pytest.mark.filterwarnings("ignore::celery.exceptions.CPendingDeprecationWarning"),
]

RATE = 10.0
#: Seconds a killed broker stays down (a closed connection: seconds of publishing after).
DOWN = 3.0
#: Seconds a restarted moto runs without the queues, before the test makes them again.
QUEUELESS = 2.0
#: The lanes of each broker, and which of them are sa-inbox's own consumers.
RABBITMQ_LANES = ("pika", "aio-pika", "faststream", "celery")
OWN = {"pika", "aio-pika", "redis", "redis-async", "nats", "sqs", "sqs-async"}


def check_reconnected(figures: list[LaneFigures], *, losses: int) -> None:
    for lane in figures:
        name = f"{lane.lane} ({lane})"
        assert not lane.stopped_early, f"{name}: the consumer stopped"
        assert lane.drain_seconds >= 0, f"{name}: not drained within its bound"
        assert (lane.lost, lane.doubled) == (0, 0), name
        # a publish that raised may have reached the broker: applied, never twice
        assert lane.published <= lane.applied <= lane.attempted, name
        assert (lane.dead_letters, lane.retries) == (0, 0), name
        assert lane.max_delivery_count <= 1 + losses, name
        assert (lane.outage_warnings, lane.tracebacks) == (0, 0), name
        if lane.lane in OWN:
            assert lane.connection_losses == lane.reconnections <= losses, name


def test_rabbitmq_closing_every_connection_stops_no_consumer(
    server_dir: Path, brokers: None
) -> None:
    settings = Outage(
        "postgresql",
        server_dir,
        lanes=RABBITMQ_LANES,
        rate=RATE,
        outage=DOWN,
        disrupt=lambda: rabbitmqctl(server_dir, "close_all_connections", "sa-inbox test"),
    )
    figures = run_outage(settings)
    check_reconnected(figures, losses=1)
    assert all(f.connection_losses == 1 for f in figures if f.lane in OWN)


@pytest.mark.parametrize(
    ("server", "lanes"),
    [("rabbitmq", RABBITMQ_LANES), ("redis", ("redis", "redis-async")), ("nats", ("nats",))],
)
def test_a_broker_killed_and_restarted_stops_no_consumer(
    server: str, lanes: tuple[str, ...], server_dir: Path, brokers: None
) -> None:
    settings = Outage("postgresql", server_dir, lanes=lanes, rate=RATE, outage=DOWN, server=server)
    check_reconnected(run_outage(settings), losses=1)


#: The heartbeat the blocked consumers negotiate (seconds; the URL's ``heartbeat``), and how
#: long one handler blocks its thread or loop: past two missed heartbeats, RabbitMQ closes
#: the connection ("Detecting Dead TCP Connections with Heartbeats": after two missed).
HEARTBEAT = 2
BLOCKED = 3 * HEARTBEAT + 1


def blocking(lane_type: type[Lane]) -> type[Lane]:
    """``lane_type`` on a connection with a :data:`HEARTBEAT` s heartbeat, whose handler
    blocks for :data:`BLOCKED` seconds (``time.sleep``: no heartbeat is sent) on the fifth
    message, the first time."""

    class Blocking(lane_type):  # type: ignore[valid-type,misc]
        blocked = False

        def setup(self) -> None:
            self.urls = dataclasses.replace(
                self.urls, amqp=f"{self.urls.amqp}?heartbeat={HEARTBEAT}"
            )
            super().setup()

        def block(self, delivery: Delivery) -> None:
            if delivery.message_id == f"{self.token}-5" and not self.blocked:
                type(self).blocked = True
                time.sleep(BLOCKED)

        def handler(self, session: Session, delivery: Delivery) -> None:
            self.block(delivery)
            super().handler(session, delivery)

        async def handler_async(self, session: AsyncSession, delivery: Delivery) -> None:
            self.block(delivery)  # blocks the event loop
            await super().handler_async(session, delivery)

    return Blocking


def test_a_consumer_blocked_past_its_heartbeat_reconnects(server_dir: Path, brokers: None) -> None:
    """The connection RabbitMQ closes for missed heartbeats is made again: the blocked
    message committed, its ack was lost with the connection, so it comes back once and is
    acked as a duplicate."""
    types = {"pika": blocking(PikaLane), "aio-pika": blocking(AioPikaLane)}
    settings = Outage(
        "postgresql",
        server_dir,
        lanes=tuple(types),
        rate=RATE,
        outage=BLOCKED,
        disrupt=lambda: None,
    )
    figures = run_outage(settings, types)
    check_reconnected(figures, losses=1)
    assert all((f.connection_losses, f.duplicates) == (1, 1) for f in figures), figures


#: Seconds the restart test waits for a step (a message in the handler, the queue drained).
STEP = 30.0


def wait_for(
    condition: Callable[[], bool], what: str, state: Callable[[], object] = lambda: None
) -> None:
    """Wait up to :data:`STEP` seconds for ``condition``; the failure says ``state()``."""
    deadline = time.monotonic() + STEP
    while not condition():
        assert time.monotonic() < deadline, f"not within {STEP} s: {what}; {state()}"
        time.sleep(0.05)


def restart_moto(server_dir: Path, lanes: list[SqsLane]) -> Callable[[], None]:
    """The disruption: publishing paused until each queue is empty (a message received
    but not yet in its handler would be the one held, and the next one would wait), then
    one message published to each lane and held in its handler, so nothing else waits in
    its queue; moto is SIGKILLed; the handlers go on (they commit, and the deletes find no
    server); moto is restarted after :data:`DOWN` seconds, empty, and after
    :data:`QUEUELESS` seconds more without queues (the consumers' lookups find none) the
    queues are made again (as a deployment would), then publishing resumes.

    moto keeps its queues in memory: a message it held unreceived at the kill would be
    gone, which SQS never does; hence the drained queue at the kill (a message published
    while a handler held the lane's consumer would wait until the release)."""

    def drained() -> bool:
        return all(lane.waiting() == 0 for lane in lanes)

    def empty() -> bool:
        return all(lane.empty() for lane in lanes)

    def state() -> dict[str, tuple[int, int, str | None, bool]]:
        """Each lane's (visible, in flight, message held, paused)."""
        return {
            lane.name: (
                lane.count(""),
                lane.count("NotVisible"),
                lane.held_id,
                lane.paused.is_set(),
            )
            for lane in lanes
        }

    def disrupt() -> None:
        for lane in lanes:
            lane.pause()
        try:
            wait_for(empty, "the queues emptied", state)
            for lane in lanes:
                lane.hold_next.set()
                lane.pause_after_one.set()
                lane.paused.clear()
            wait_for(lambda: all(lane.holding.is_set() for lane in lanes), "a message held")
            wait_for(lambda: all(lane.paused.is_set() for lane in lanes), "publishing paused")
            wait_for(drained, "the held message received", state)
            servers_sh("kill", str(server_dir), "sqs")
        finally:
            for lane in lanes:
                lane.release.set()  # a held handler never outlives a failed disruption
        time.sleep(DOWN)
        servers_sh("restart", str(server_dir), "sqs")
        time.sleep(QUEUELESS)  # each consumer finds the server without its queues
        for lane in lanes:
            lane.make_queues()
            lane.paused.clear()

    return disrupt


def test_moto_killed_and_restarted_under_the_sqs_consumers(server_dir: Path, brokers: None) -> None:
    """Each SQS consumer holds a message in its handler when moto dies: it commits, its
    delete fails, the loss is logged once (WARNING), the consumer reconnects with back-off
    (the queue missing after the restart is part of the loss) and applies every message
    published after it, once. No receive was made twice: moto lost what it held, and
    nothing it held was waiting (every ``ApproximateReceiveCount`` 1)."""
    made: list[SqsLane] = []

    def registered(lane_type: type[SqsLane]) -> type[Lane]:
        class Registered(lane_type):  # type: ignore[valid-type,misc]
            def setup(self) -> None:
                super().setup()
                made.append(self)

        return Registered

    types = {"sqs": registered(SqsLane), "sqs-async": registered(AsyncSqsLane)}
    settings = Outage(
        "postgresql",
        server_dir,
        lanes=tuple(types),
        rate=RATE,
        outage=DOWN,
        disrupt=restart_moto(server_dir, made),
    )
    figures = run_outage(settings, types)
    check_reconnected(figures, losses=1)
    for lane in figures:
        assert lane.connection_losses == lane.reconnections == 1, lane
        assert lane.max_delivery_count == 1, lane
        # publishing went on after the restart
        assert lane.published > RATE * DOWN, lane
