"""A PostgreSQL failover under consumers applying a stream: a primary and a streaming
standby started by ``scripts/servers.sh``, RabbitMQ consumer processes applying payments
through ``sa_inbox.brokers`` (``handle()``: claim + ledger row + balance, one transaction,
ack after the commit) while 4 threads write 256 KiB rows, the primary frozen (SIGSTOP) then
SIGKILLed mid-stream, the standby promoted; the consumers reconnect by themselves (a URL
naming both servers, ``target_session_attrs=read-write``) and RabbitMQ redelivers every
delivery not acked.

Synchronous standby: nothing acked is lost and nothing is applied twice, asserted on the
promoted server's business state. Asynchronous standby: the run's detection of acked
messages missing from the promoted server is shown working (its count is reported, not
asserted: whether a commit is lost depends on the WAL in flight at the kill; the
benchmark ``benchmarks/pg_failover.py`` measures it over many failovers).

Needs PostgreSQL 15 (``scripts/servers.sh install``) and RabbitMQ
(``SA_INBOX_TEST_AMQP_URL``). About 10 s per test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from benchmarks.failover import FailoverConfig, FailoverResult, run_failover
from sa_inbox.chaos.workload import PREFIX, make_plan
from tests.conftest import broker_url
from tests.support.pgha import ReplicatedServers, delete_queue, replicated_servers
from tests.support.waiting import LIVENESS_SECONDS

pytestmark = [pytest.mark.backend, pytest.mark.slow]

MESSAGES, CONSUMERS, SEED = 600, 3, 16
#: Write load on the primary until the failover (threads, bytes per transaction): with it,
#: an asynchronous standby lags enough to lose acked commits in most runs.
BALLAST_WRITERS, BALLAST_ROW_BYTES = 4, 256 * 1024


@pytest.fixture
def amqp_url() -> str:
    return broker_url("rabbitmq")


@pytest.fixture
def queue(amqp_url: str) -> Iterator[str]:
    name = f"sa-inbox-failover-{uuid.uuid4().hex[:12]}"
    yield name
    delete_queue(amqp_url, name)


def failover(servers: ReplicatedServers, amqp_url: str, queue: str) -> FailoverResult:
    config = FailoverConfig(
        broker=amqp_url,
        url=servers.failover_url,
        promoted_url=servers.standby_url,
        replication=servers.mode,
        messages=MESSAGES,
        consumers=CONSUMERS,
        failover_at=0.3,
        ballast_writers=BALLAST_WRITERS,
        ballast_row_bytes=BALLAST_ROW_BYTES,
        seed=SEED,
        name=queue,
        timeout=LIVENESS_SECONDS * 2,
    )
    return run_failover(config, servers)


def promoted_state(url: str) -> tuple[bool, int, int, int, int]:
    """From the promoted server itself: in recovery?, ledger rows, distinct ids, claims,
    the sum of the balances."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            recovery = conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar_one()
            rows, ids = conn.execute(
                sa.text(f"SELECT count(*), count(DISTINCT message_id) FROM {PREFIX}ledger")
            ).one()
            claims = conn.execute(
                sa.text(f"SELECT count(*) FROM {PREFIX}inbox_processed_messages")
            ).scalar_one()
            total = conn.execute(
                sa.text(f"SELECT COALESCE(SUM(balance_cents), 0) FROM {PREFIX}accounts")
            ).scalar_one()
    finally:
        engine.dispose()
    return bool(recovery), int(rows), int(ids), int(claims), int(total)


def test_synchronous_standby_loses_no_acked_message_and_applies_none_twice(
    amqp_url: str, queue: str
) -> None:
    with replicated_servers("sync") as servers:
        result = failover(servers, amqp_url, queue)
        recovery, rows, ids, claims, total = promoted_state(servers.standby_url)

    # The failover hit the stream in the middle: some messages acked before it (the
    # deliveries that met the dead primary were held through the outage, uncounted).
    assert 0 < result.acked_before_failover < MESSAGES
    assert result.failover_s > 0
    # Nothing acked is missing from the promoted server, nothing is there twice.
    assert result.lost == []
    assert result.verification.applied_twice == []
    assert result.ok, result.checks
    plan = make_plan(MESSAGES, seed=SEED, duplicates=0.0)
    expected = (False, MESSAGES, MESSAGES, MESSAGES, sum(plan.expected_balances().values()))
    assert (recovery, rows, ids, claims, total) == expected


def test_asynchronous_standby_reports_acked_messages_missing_after_failover(
    amqp_url: str, queue: str
) -> None:
    with replicated_servers("async") as servers:
        result = failover(servers, amqp_url, queue)
        recovery, rows, ids, claims, _ = promoted_state(servers.standby_url)

    assert 0 < result.acked_before_failover < MESSAGES
    # Never applied twice, whatever the replication.
    assert result.verification.applied_twice == []
    assert rows == ids and not recovery
    # The detection: each lost message was acked, on the old primary (the broker holds
    # nothing unsettled and will never redeliver it), and it is exactly what the promoted
    # server lacks.
    assert result.verification.unsettled == 0
    assert result.lost_acked_before_failover == len(result.lost)
    assert rows == MESSAGES - len(result.lost) == claims
    assert result.checks["no_acked_message_lost"] is (not result.lost)
    assert result.checks["ledger_rows"] is (not result.lost)
