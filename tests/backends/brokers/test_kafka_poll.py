"""The Kafka consumers' poll transaction (:class:`~sa_inbox.brokers.kafka.poll.PollRunner`) on
every database, given records made in memory: the paths a live broker rarely takes.

Business state (ledger), the adapter's attempts and stored offsets are asserted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery
from sa_inbox.brokers.kafka import kafka_tables
from sa_inbox.brokers.kafka.poll import PollRunner
from sa_inbox.brokers.kafka.records import Record, make_record
from sa_inbox.brokers.kafka.state import Attempts, Offsets
from sa_inbox.exc import TransientClaimError
from sa_inbox.outage import OutageGate, probe_sessions
from tests.backends.brokers.kafka_support import attempts, kafka_app, ledger, stored_offsets
from tests.backends.brokers.payments import pay
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

TOPIC = "payments"


@pytest.fixture
def app(engine: sa.Engine) -> Iterator[App]:
    app = kafka_app(engine)
    yield app
    app.drop()


def records(*ids: str) -> list[Record]:
    """One record per id, at offsets 0, 1, ... of partition 0."""
    return [
        make_record(TOPIC, 0, offset, b"1.00", None, [("message_id", i.encode())],
                    key_header="message_id")
        for offset, i in enumerate(ids)
    ]  # fmt: skip


def runner(app: App, handler: Callable[[Session, Delivery], None]) -> PollRunner:
    tables = kafka_tables(app.inbox)
    return PollRunner(
        session_factory=app.Session,
        inbox=app.inbox,
        consumer_name=CONSUMER,
        handler=handler,
        max_deliveries=5,
        attempts=Attempts(tables, CONSUMER),
        offsets=Offsets(tables, CONSUMER),
        dead_letter=lambda *_: None,
        gate=OutageGate(CONSUMER),
        probe=probe_sessions(app.Session),
        sleep=lambda seconds: None,
    )


def test_the_fallback_to_one_transaction_per_record_keeps_earlier_failures(app: App) -> None:
    """``x`` fails (the poll re-runs with savepoints), then ``y`` deadlocks every time (the
    re-runs end in one transaction per record): ``z`` alone commits, both failures are
    counted, and the stored offset stays at ``x``, the first record to retry."""
    apply = pay(app)

    def handler(session: Session, delivery: Delivery) -> None:
        apply(session, delivery)
        if delivery.message_id == "x":
            raise RuntimeError("poison")
        if delivery.message_id == "y":
            raise TransientClaimError("deadlock, every time")

    poll = records("x", "y", "z")
    result = runner(app, handler).run(poll, poll, {})
    assert [r.delivery.message_id for r in result.processed] == ["z"]
    assert sorted(f.record.delivery.message_id for f in result.failures) == ["x", "y"]
    assert not any(f.dead for f in result.failures)
    assert ledger(app) == ["z"]
    assert attempts(app) == {"x": 1, "y": 1}
    assert stored_offsets(app) == {(TOPIC, 0): 0}, "not past x, the first record to retry"
