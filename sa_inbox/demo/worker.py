"""A worker process of the demo: take deliveries from the broker, apply them, ack.

With the inbox, each delivery goes through :func:`sa_inbox.handle` (begin, claim, apply,
commit, then ack). Without it (``--no-inbox``), the naive consumer applies every delivery
it gets, which is what at-least-once delivery does to a ledger without deduplication.

A delivery flagged ``crash_before_ack`` makes the worker "crash" after the commit: the ack
raises :class:`SimulatedCrash`, the worker drops its database connections as a dying
process would, and the broker learns that the connection holding the delivery died, so it
redelivers it. The process itself lives on, to keep the demo fast.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from ..runner import Outcome, handle, run_in_transaction
from .app import CONSUMER, DemoSchema
from .broker import Ack, Channel, ConnectionLost, Nack, Report, WorkerExit, WorkerReady
from .db import make_engine
from .stream import Delivery

__all__ = ["SimulatedCrash", "WorkerConfig", "worker_main"]

logger = logging.getLogger(__name__)


class SimulatedCrash(Exception):
    """Raised by the ack of a delivery flagged to crash: the commit is done, the ack lost."""


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker process needs (picklable, for the spawn start method).

    :param index: the worker's number, from 0.
    :param url: the database URL, password included.
    :param use_inbox: claim through the inbox (True) or apply naively (False).
    """

    index: int
    url: str
    use_inbox: bool


class _RetryCounter(logging.Handler):
    """Counts the "transient error, retrying" records of :mod:`sa_inbox.runner`."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "action", None) == "retry":
            self.count += 1


class _OneLineErrors(logging.Handler):
    """Prints sa-inbox warnings as one line per event on stderr, without the traceback."""

    def __init__(self, index: int) -> None:
        super().__init__(logging.WARNING)
        self.index = index

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        detail = f": {type(error).__name__}: {error}" if error else ""
        print(f"worker {self.index}: {record.getMessage()}{detail}", file=sys.stderr)


class _Consumer:
    """Applies deliveries on one engine; recreated after a simulated crash."""

    def __init__(self, config: WorkerConfig, schema: DemoSchema, channel: Channel) -> None:
        self.config = config
        self.schema = schema
        self.channel = channel
        self.engine = make_engine(config.url)
        self.sessions = sessionmaker(self.engine)

    def deliver(self, delivery: Delivery) -> tuple[Outcome, bool]:
        """Apply one delivery; returns its outcome and whether the worker crashed."""
        applied = False  # whether the attempt that committed ran the handler

        def session_factory() -> Session:
            nonlocal applied
            applied = False
            return self.sessions()

        def handler(session: Session) -> None:
            nonlocal applied
            self.schema.apply_payment(session, delivery.payment)
            applied = True

        def ack() -> None:
            if delivery.crash_before_ack:
                raise SimulatedCrash(delivery.payment.message_id)
            self.channel.send(Ack(delivery.tag))

        def nack() -> None:
            self.channel.send(Nack(delivery.tag))

        if delivery.slow_s:
            time.sleep(delivery.slow_s)  # slow work before the transaction (see stream.py)
        try:
            if self.config.use_inbox:
                payment = delivery.payment
                result = handle(
                    session_factory,
                    self.schema.inbox,
                    payment.message_id,
                    CONSUMER,
                    handler,
                    ack=ack,
                    nack=nack,
                    message_type=payment.message_type,
                )
                return result.outcome, False
            return _naive(session_factory, handler, ack=ack, nack=nack), False
        except SimulatedCrash:
            self.crash(delivery)
            return (Outcome.PROCESSED if applied else Outcome.DUPLICATE), True

    def crash(self, delivery: Delivery) -> None:
        """Die after the commit: drop the connections; the broker redelivers."""
        self.engine.dispose()
        self.engine = make_engine(self.config.url)
        self.sessions = sessionmaker(self.engine)
        self.channel.send(ConnectionLost(delivery.tag))


def _naive(
    session_factory: Callable[[], Session],
    handler: Callable[[Session], None],
    *,
    ack: Callable[[], None],
    nack: Callable[[], None],
) -> Outcome:
    """The consumer without an inbox: apply, commit, ack, whatever came before."""
    try:
        run_in_transaction(session_factory, handler)
    except Exception:
        logger.warning("naive handler failed, nacking", exc_info=True)
        nack()
        return Outcome.FAILED
    ack()
    return Outcome.PROCESSED


def _consume(config: WorkerConfig, channel: Channel) -> None:
    consumer = _Consumer(config, DemoSchema(), channel)
    pid = os.getpid()
    try:
        with consumer.engine.connect():  # connect now, so that all workers start together
            pass
        channel.send(WorkerReady(config.index))
        while (delivery := channel.get()) is not None:
            started = time.monotonic_ns()
            outcome, crashed = consumer.deliver(delivery)
            channel.send(
                Report(
                    tag=delivery.tag,
                    message_id=delivery.payment.message_id,
                    outcome=outcome.value,
                    crashed=crashed,
                    pid=pid,
                    started_ns=started,
                    ended_ns=time.monotonic_ns(),
                )
            )
    finally:
        consumer.engine.dispose()


def worker_main(config: WorkerConfig, channel: Channel) -> None:
    """Entry point of a worker process: consume until the broker says stop.

    Ctrl-C is left to the main process, which stops the workers itself. Always ends by
    sending a :class:`WorkerExit`, with the traceback if something unexpected failed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    retries = _RetryCounter()
    retry_logger = logging.getLogger("sa_inbox.runner")
    retry_logger.addHandler(retries)
    retry_logger.setLevel(logging.INFO)
    logging.getLogger("sa_inbox").addHandler(_OneLineErrors(config.index))
    error: str | None = None
    try:
        _consume(config, channel)
    except Exception:
        error = traceback.format_exc()
    channel.send(WorkerExit(config.index, retries.count, error))
    channel.events.close()
    channel.events.join_thread()
