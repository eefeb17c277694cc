"""A database SIGKILLed under every consumer and restarted: no delivery is spent.

PostgreSQL, then MariaDB, is killed (``scripts/servers.sh kill``), left down :data:`OUTAGE`
seconds and restarted, while the nine broker adapters (pika, aio-pika, Redis sync and
asyncio, NATS, FastStream on RabbitMQ, Celery, SQS sync and asyncio on moto) consume their
own queue or stream at a steady rate and the inbox store's Worker and the outbox relay work
through what their producers write; the publishing goes on throughout
(:mod:`tests.support.db_outage`). Each lane then has: every published id applied exactly
once, no dead letter, no retry, every delivery at the count 1 (none was returned to the
broker: RabbitMQ counts each requeue, and a Redis reclaim, a JetStream redelivery or an SQS
receive would count too: SQS's ``ApproximateReceiveCount`` is 1, the receive that brought
the message), one WARNING and one INFO of the outage gate, no traceback. The SQS consumers
also kept what they held hidden through the outage (longer than their visibility timeout):
no other receiver could have taken and counted it. The matrix at 100 msg/s and the 60 s
outage are the benchmark's (``benchmarks/db_outage.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.db_outage import LaneFigures, Outage, run_outage

pytestmark = [
    pytest.mark.backend,
    pytest.mark.slow,
    # Celery's notice on a lost connection (the lane's worker keeps the default)
    pytest.mark.filterwarnings("ignore::celery.exceptions.CPendingDeprecationWarning"),
]

#: Seconds the database is down, and messages per second to each lane.
OUTAGE = 15.0
RATE = 10.0
#: The lanes whose producer writes to the database (the store's receive, the outbox).
DATABASE_PRODUCERS = {"store-worker", "relay"}
#: The lanes on SQS, whose consumers keep the visibility of what they hold up.
SQS_LANES = {"sqs", "sqs-async"}


def check_no_delivery_spent(figures: list[LaneFigures], settings: Outage) -> None:
    for lane in figures:
        name = f"{lane.lane} on {lane.database}"
        # publishing never stopped: the outage's worth of messages, less one second's for
        # the paced producer's scheduling on a loaded machine, was tried (and sent, where
        # the producer writes to a broker, not to the database that is down)
        floor = settings.rate * (settings.outage - 1.0)
        assert lane.attempted >= floor, name
        if lane.lane not in DATABASE_PRODUCERS:
            assert lane.published >= floor, name
        assert not lane.stopped_early, f"{name}: the consumer stopped"
        assert lane.drain_seconds >= 0, f"{name}: not drained within its bound: {lane}"
        assert (lane.lost, lane.doubled) == (0, 0), name
        # a publish that raised may have reached the broker: applied, never twice
        assert lane.published <= lane.applied <= lane.attempted, name
        assert (lane.dead_letters, lane.retries, lane.max_delivery_count) == (0, 0, 1), name
        assert (lane.outage_warnings, lane.outage_infos) == (1, 1), name
        assert lane.tracebacks == 0, name
        if lane.lane in SQS_LANES and not settings.at_start:
            # the message in the handler when the database died (and the rest of its
            # receive) were still hidden when it came back, OUTAGE s later
            assert lane.hidden_at_restart is not None and lane.hidden_at_restart >= 1, name


@pytest.mark.parametrize("database", ["postgresql", "mysql"])
def test_a_database_killed_and_restarted_costs_no_delivery(
    database: str, server_dir: Path, brokers: None
) -> None:
    settings = Outage(database, server_dir, rate=RATE, outage=OUTAGE)
    check_no_delivery_spent(run_outage(settings), settings)


@pytest.mark.parametrize("database", ["postgresql", "mysql"])
def test_a_consumer_started_while_the_database_is_down_waits_for_it(
    database: str, server_dir: Path, brokers: None
) -> None:
    """Each consumer starts while the database is down: its start-up check (the store
    Worker's owner check; FastStream and Celery have none, their first deliveries meet the
    outage) waits the outage out (one WARNING, one INFO) instead of raising, then every
    message is applied once."""
    settings = Outage(database, server_dir, rate=RATE, outage=8.0, at_start=True)
    check_no_delivery_spent(run_outage(settings), settings)
