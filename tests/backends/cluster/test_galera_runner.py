"""The runner on a live 3-node MariaDB Galera cluster: one message handled on two nodes.

Row locks are local to a node on Galera: two nodes can both ``INSERT IGNORE`` the same claim,
each sees its own row, and the conflict is found when the second write-set fails
certification at COMMIT, which MariaDB reports as a deadlock, error 1213 (MariaDB KB,
"MariaDB Galera Cluster - Known Limitations": "Galera Cluster uses at the cluster-level
optimistic concurrency control, which can result in transactions that issue a COMMIT aborting
at that stage"). The runner takes it as transient, runs the transaction again, and the claim
is then a duplicate: the payment is applied once, on every node.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from sa_inbox import Outcome, Result, TransientClaimError, handle
from sa_inbox.hooks import InboxHooks
from tests.support.app import CONSUMER, App
from tests.support.galera import GaleraCluster

pytestmark = pytest.mark.backend

AMOUNT = Decimal(5)


class Retries(InboxHooks):
    """Counts the runner's retries (:meth:`~sa_inbox.hooks.InboxHooks.retried`)."""

    def __init__(self) -> None:
        self.count = 0

    def retried(self, consumer_name: str, *, attempt: int) -> None:
        self.count += 1


class Broker:
    """Acks and nacks of the deliveries."""

    def __init__(self) -> None:
        self.acks = 0
        self.nacks = 0
        self.lock = threading.Lock()

    def ack(self) -> None:
        with self.lock:
            self.acks += 1

    def nack(self) -> None:
        with self.lock:
            self.nacks += 1


def paying(app: App, barrier: threading.Barrier, message_id: str) -> Callable[[Session], None]:
    """The payment, waiting on the first call for the other node's to be done too: both
    transactions have claimed and changed the balance before either commits."""
    calls = []

    def handler(session: Session) -> None:
        app.apply_payment(session, message_id, 1, AMOUNT)
        calls.append(1)
        if len(calls) == 1:
            barrier.wait(timeout=30)

    return handler


def race(
    cluster: GaleraCluster, message_id: str, broker: Broker, **kw: object
) -> tuple[list[Result], Retries]:
    """Node 1 and node 2 handle ``message_id`` at once (a thread each, own engine)."""
    barrier = threading.Barrier(2)
    retries = Retries()
    apps = cluster.apps[:2]
    for app in apps:
        app.inbox.hooks = retries

    def deliver(app: App) -> Result:
        return handle(
            app.Session,
            app.inbox,
            message_id,
            CONSUMER,
            paying(app, barrier, message_id),
            ack=broker.ack,
            nack=broker.nack,
            **kw,  # type: ignore[arg-type]
        )

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(deliver, apps)), retries


def assert_applied_once(cluster: GaleraCluster, messages: int = 1) -> None:
    """On every node: one ledger row per message, the balance credited once each, one claim
    each."""
    expected = (messages, messages, AMOUNT * messages, messages)
    assert cluster.states() == [expected] * 3


def test_two_nodes_claim_one_id_the_loser_retries_into_a_duplicate(
    cluster: GaleraCluster,
) -> None:
    broker = Broker()
    results, retries = race(cluster, "m-1", broker)

    assert sorted(r.outcome.value for r in results) == ["duplicate", "processed"]
    assert (broker.acks, broker.nacks) == (2, 0)
    assert retries.count >= 1  # the loser's certification failure was retried
    assert_applied_once(cluster)


def test_with_one_attempt_the_loser_fails_and_its_redelivery_is_a_duplicate(
    cluster: GaleraCluster, caplog: pytest.LogCaptureFixture
) -> None:
    broker = Broker()
    with caplog.at_level(logging.WARNING, logger="sa_inbox"):
        results, retries = race(cluster, "m-1", broker, max_retries=0)
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events == ["inbox.commit.failed"]  # not the handler's failure: the commit's

    outcomes = {r.outcome for r in results}
    assert outcomes == {Outcome.PROCESSED, Outcome.FAILED}
    assert (broker.acks, broker.nacks, retries.count) == (1, 1, 0)
    error = next(r.error for r in results if r.outcome is Outcome.FAILED)
    assert isinstance(error, TransientClaimError)
    cause = error.__cause__
    assert isinstance(cause, DBAPIError) and cause.orig.args[0] == 1213  # type: ignore[union-attr]
    assert_applied_once(cluster)

    # The broker redelivers to the node that lost: a duplicate, acked, nothing applied.
    loser = next(i for i, r in enumerate(results) if r.outcome is Outcome.FAILED)
    app = cluster.apps[loser]
    redelivered = handle(
        app.Session,
        app.inbox,
        "m-1",
        CONSUMER,
        paying(app, threading.Barrier(1), "m-1"),
        ack=broker.ack,
        nack=broker.nack,
    )
    assert redelivered.outcome is Outcome.DUPLICATE
    assert (broker.acks, broker.nacks) == (2, 1)
    assert_applied_once(cluster)


def test_a_delivery_to_a_dead_node_is_nacked_and_its_redelivery_elsewhere_applies_once(
    cluster: GaleraCluster, galera_dir: str
) -> None:
    """Node 3 SIGKILLed: ``handle()`` there fails to connect (2003), nacks and never acks;
    the broker's redelivery to node 1 applies the payment; node 3, restarted (IST), has it
    once too."""
    broker = Broker()
    dead = cluster.apps[2]
    with cluster.killed(3):
        failed = handle(
            dead.Session,
            dead.inbox,
            "m-1",
            CONSUMER,
            functools.partial(dead.apply_payment, message_id="m-1", account_id=1, amount=AMOUNT),
            ack=broker.ack,
            nack=broker.nack,
        )
        assert failed.outcome is Outcome.FAILED and (broker.acks, broker.nacks) == (0, 1)
        assert isinstance(failed.error, DBAPIError) and failed.error.orig.args[0] == 2003  # type: ignore[union-attr]

        alive = cluster.apps[0]
        redelivered = handle(
            alive.Session,
            alive.inbox,
            "m-1",
            CONSUMER,
            functools.partial(alive.apply_payment, message_id="m-1", account_id=1, amount=AMOUNT),
            ack=broker.ack,
            nack=broker.nack,
        )
        assert redelivered.outcome is Outcome.PROCESSED
    assert (broker.acks, broker.nacks) == (1, 1)
    assert_applied_once(cluster)
