"""The Celery task decorator in a real ``celery worker`` (prefork, one pool process) against
the live RabbitMQ, on SQLite, PostgreSQL and MariaDB.

One flow per database (:mod:`tests.backends.brokers.celery_child`): a task sent twice with
the same key (two task ids), a task without the key, the pool process SIGKILLed after the
commit and before the ack (``reject_on_worker_lost`` requeues it to the worker's new pool
process), then the whole worker SIGKILLed before the commit (RabbitMQ requeues it to a new
worker process); then the business state and the queues (empty; the keyless task alone in the
dead-letter queue, rejected).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sa_inbox.brokers import DeliveryOptions
from tests.backends.brokers.celery_child import MAX_DELIVERIES, PLAIN, TASK, make_app
from tests.conftest import backend_url, broker_url
from tests.support.app import App

from .workers import Worker

pytestmark = pytest.mark.backend


@pytest.fixture(params=["postgresql", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[tuple[str, App]]:
    url = backend_url(request.param, tmp_path)
    engine = sa.create_engine(url)
    app = App(engine)
    app.reset()
    yield url, app
    app.drop()
    engine.dispose()


class Queues:
    """The task queue and its dead-letter queue, declared up front as the worker does."""

    def __init__(self, url: str) -> None:
        import pika

        self.name = f"sa_inbox_celery_{uuid.uuid4().hex[:10]}"
        self.connection = pika.BlockingConnection(pika.URLParameters(url))
        self.channel = self.connection.channel()
        self.channel.queue_declare(self.name + ".dead")
        self.channel.queue_declare(
            self.name,
            durable=True,  # as Celery declares it
            arguments={
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": self.name + ".dead",
            },
        )

    def left(self) -> int:
        return int(self.channel.queue_declare(self.name, passive=True).method.message_count)

    def dead_letters(self) -> list[tuple[dict[str, Any], str]]:
        found = []
        while True:
            method, properties, body = self.channel.basic_get(self.name + ".dead", auto_ack=True)
            if method is None:
                return found
            _args, kwargs, _embed = json.loads(body)
            found.append((kwargs, str(properties.headers["x-death"][0]["reason"])))

    def delete(self) -> None:
        self.channel.queue_delete(self.name)
        self.channel.queue_delete(self.name + ".dead")
        self.connection.close()


def celery_worker(url: str, db_url: str | None, queue: str, crash: str = "-") -> Worker:
    env = {"SA_INBOX_CELERY_BROKER": url, "SA_INBOX_CELERY_QUEUE": queue}
    if db_url is not None:
        env |= {"SA_INBOX_CELERY_DB": db_url, "SA_INBOX_CELERY_CRASH": crash}
    argv = [sys.executable, "-m", "celery", "-A", "tests.backends.brokers.celery_child"]
    argv += ["worker", "-P", "prefork", "-c", "1", "-Q", queue, "--loglevel", "WARNING"]
    argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    started = Worker(argv, env, new_session=True)
    started.expect(["READY"], timeout=30)
    return started


def test_worker_runs_each_payment_once_through_resends_and_crashes(db: tuple[str, App]) -> None:
    db_url, app = db
    url = broker_url("rabbitmq")
    queues = Queues(url)
    producer = make_app(url, queues.name)

    def send(key: str | None, amount: str) -> None:
        kwargs: dict[str, Any] = {"account": 1, "amount": amount}
        if key is not None:
            kwargs["idempotency_key"] = key
        producer.send_task(TASK, kwargs=kwargs, queue=queues.name)

    workers: list[Worker] = []
    try:
        # 1. a re-sent task (a new task id, the same key), a keyless one, and the pool
        #    process killed after the commit of pay-crash: requeued (reject_on_worker_lost)
        crashes = "after-commit:pay-crash,before-commit:pay-3"
        workers.append(first := celery_worker(url, db_url, queues.name, crashes))
        send("pay-1", "10.00")
        send("pay-1", "10.00")
        send(None, "5.00")
        first.expect(["processed pay-1", "duplicate pay-1", "dead_lettered None"])
        send("pay-crash", "1.00")
        first.expect(["COMMITTED pay-crash"])
        os.kill(first.pid_line(), signal.SIGKILL)
        first.expect(["duplicate pay-crash"], timeout=30)
        assert app.ledger_rows("pay-crash") == 1

        # 2. the whole worker killed before the commit of pay-3; a new worker applies it
        send("pay-3", "3.00")
        first.expect(["APPLIED pay-3"])
        first.kill_group()
        assert app.ledger_rows("pay-3") == 0, "rolled back by the kill"
        workers.append(second := celery_worker(url, db_url, queues.name))
        second.expect(["processed pay-3"])

        # 3. a poison task: retried (Task.retry, the same key) and rejected at the fifth
        #    delivery (past Celery's own max_retries=3), while pay-4 gets through
        send("poison", "not-a-number")
        send("pay-4", "4.00")
        retries = ["retry poison"] * (MAX_DELIVERIES - 1)
        second.expect([*retries, "dead_lettered poison", "processed pay-4"])
        assert second.quiet(0.3) == []
        second.stop()

        keys = ("pay-1", "pay-crash", "pay-3", "pay-4", "poison")
        assert [app.ledger_rows(k) for k in keys] == [1, 1, 1, 1, 0]
        assert app.ledger_rows() == 4, "neither the keyless nor the poison task applied"
        assert app.balance(1) == Decimal("18.00")
        assert app.inbox_rows() == 4
        assert queues.left() == 0
        assert queues.dead_letters() == [
            ({"account": 1, "amount": "5.00"}, "rejected"),
            ({"account": 1, "amount": "not-a-number", "idempotency_key": "poison"}, "rejected"),
        ]
    finally:
        for started in workers:
            started.ensure_dead()
        queues.delete()
        producer.close()


@pytest.mark.parametrize("option", ["acks_late", "reject_on_worker_lost"])
def test_decorator_refuses_to_turn_late_acks_off(option: str) -> None:
    from sa_inbox import ConfigurationError, Inbox
    from sa_inbox.brokers.celery import inbox_task

    inbox = Inbox(sa.MetaData())
    with pytest.raises(ConfigurationError, match=f"requires {option}=True"):
        inbox_task(
            make_app("memory://", "q"),
            session_factory=lambda: None,  # type: ignore[arg-type,return-value]
            inbox=inbox,
            consumer_name="billing",
            **{option: False},
        )


@pytest.mark.parametrize(
    ("keywords", "error"),
    [
        (
            {"retry_backoff": 2.0},
            r"retry_backoff is not a Celery task option: .*DeliveryOptions\(retry_delay=\.\.\.\)",
        ),
        ({"key_kwarg": "key", "max_deliveries": 3}, "key_kwarg, max_deliveries are not"),
        ({"key_source": "key", "dead_letter": "q.dead"}, "dead_letter, key_source are not"),
        ({"options": DeliveryOptions(dead_letter="q.dead")}, "options.dead_letter cannot be"),
        ({"options": DeliveryOptions(max_keyless=2)}, "options.max_keyless cannot be"),
        ({"options": {"max_deliveries": 3}}, r"options must be a sa_inbox\.brokers\.Delivery"),
    ],
    ids=["former keyword", "former keywords", "fields", "dead letter", "max_keyless", "a dict"],
)
def test_inbox_task_refuses_what_a_task_cannot_serve(keywords: dict[str, Any], error: str) -> None:
    """A former keyword would reach ``app.task`` silently; a setting a task cannot serve
    would be ignored: both are refused before the task is registered."""
    from sa_inbox import Inbox
    from sa_inbox.brokers.celery import inbox_task
    from sa_inbox.exc import InvalidArgument

    app = make_app("memory://", "q")
    before = set(app.tasks)
    with pytest.raises(InvalidArgument, match=error):
        inbox_task(
            app,
            session_factory=lambda: None,  # type: ignore[arg-type,return-value]
            inbox=Inbox(sa.MetaData()),
            consumer_name="billing",
            **keywords,
        )
    assert set(app.tasks) == before, "no task registered"


@pytest.mark.parametrize("app", [None, "memory://", object()], ids=["None", "a URL", "object"])
def test_inbox_task_refuses_what_is_no_celery_app(app: object) -> None:
    """Refused when the decorator is made, not when it is applied to a body."""
    from sa_inbox import Inbox
    from sa_inbox.brokers.celery import inbox_task
    from sa_inbox.exc import InvalidObject

    with pytest.raises(InvalidObject, match=r"^inbox_task\(\) takes a Celery app first"):
        inbox_task(
            app,  # type: ignore[arg-type]
            session_factory=lambda: None,  # type: ignore[arg-type,return-value]
            inbox=Inbox(sa.MetaData()),
            consumer_name="billing",
        )


@pytest.mark.parametrize("value", [-1, "1", True, float("nan")])
def test_the_retry_delay_must_be_a_function(value: object) -> None:
    from sa_inbox.exc import InvalidArgument

    with pytest.raises(InvalidArgument, match="retry_delay must be a function of one argument"):
        DeliveryOptions(retry_delay=value)  # type: ignore[arg-type]


def test_registered_task_acks_late_and_rejects_on_worker_lost() -> None:
    from sa_inbox import Inbox
    from sa_inbox.brokers.celery import inbox_task

    @inbox_task(
        make_app("memory://", "q"),
        session_factory=lambda: None,  # type: ignore[arg-type,return-value]
        inbox=Inbox(sa.MetaData()),
        consumer_name="billing",
    )
    def pay(session: Any, idempotency_key: str) -> None:
        """Pays."""

    assert (pay.acks_late, pay.reject_on_worker_lost) == (True, True)
    assert pay.name == f"{__name__}.pay" and pay.__doc__ == "Pays."


def test_without_reject_on_worker_lost_a_killed_pool_process_loses_its_message(
    tmp_path: Path,
) -> None:
    """Why :func:`inbox_task` requires ``reject_on_worker_lost``: a plain ``acks_late`` task
    whose pool process is SIGKILLed has its message acked by the worker, never run again."""
    url = broker_url("rabbitmq")
    queues = Queues(url)
    producer = make_app(url, queues.name)
    worker = celery_worker(url, None, queues.name)
    try:
        producer.send_task(PLAIN, kwargs={"flag": str(tmp_path / "ran")}, queue=queues.name)
        os.kill(worker.pid_line(), signal.SIGKILL)
        deadline = time.monotonic() + 15
        while not any("WorkerLostError" in line for line in worker.stderr):
            assert time.monotonic() < deadline, f"no WorkerLostError: {worker.stderr}"
            time.sleep(0.05)
        assert worker.quiet(0.5) == [], "not run again"
        worker.kill_group()  # an unacked message would now be requeued and counted below
        assert queues.left() == 0 and queues.dead_letters() == [], "acked: gone"
    finally:
        worker.ensure_dead()
        queues.delete()
        producer.close()
