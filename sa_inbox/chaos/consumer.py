"""A chaos consumer process: ``python -m sa_inbox.chaos.consumer --broker URL --url DB ...``.

It runs the broker's chaos driver (``driver.consume``) with the payment handler of
:mod:`.workload` until SIGTERM, and appends every settlement to its own log file as one
JSON line, flushed per line, so that a SIGKILL loses at most a partial last line
(:mod:`.tally` skips it). The supervisor (:mod:`.supervisor`) starts, kills and restarts
these processes.

With ``--crash-after-commit RATE`` the process SIGKILLs itself right after the commit of
the handler's transaction and before the ack (the demo's crashes, made real); with
``--crash-in-handler RATE``, inside the handler after its writes, before the commit. Each
is done for a share ``RATE`` of the messages, chosen by a hash of the run's seed and the
message id, on the message's first delivery only (:func:`crash_chosen`): a crash is
repeatable from the seed, and never follows a message around (a message crashing every
consumer that takes it would be dead-lettered at the delivery limit, as the rules say, and
fail the run). Each crash is logged first, as a ``{"crash": "after_commit" | "in_handler"}``
line.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import IO, Any

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from .._signals import on_signals
from ..brokers import Delivery, Settlement
from ..demo.app import DemoSchema
from ..demo.db import make_engine
from .drivers import driver_for
from .workload import CONSUMER, payment_handler

__all__ = [
    "AFTER_COMMIT",
    "IN_HANDLER",
    "ConsumerConfig",
    "SettlementLog",
    "crash_chosen",
    "main",
    "record_line",
    "run_consumer",
]

#: A crash right after the commit, before the ack (the broker redelivers a committed message).
AFTER_COMMIT = "after_commit"
#: A crash inside the handler, after its writes, before the commit (nothing survives it).
IN_HANDLER = "in_handler"


@dataclass(frozen=True)
class ConsumerConfig:
    """What one consumer process runs.

    :param broker: the broker URL (``amqp://``, ``redis://``, ``nats://``).
    :param url: the database URL.
    :param name: the run's queue / stream name.
    :param log: the file settlements are appended to (JSON lines).
    :param max_deliveries: deliveries of a message before it is dead-lettered, >= 1.
    :param prefix: the business tables' prefix (``chaos_``, or ``demo_`` for the demo).
    :param crash_after_commit: share in [0, 1] of messages whose first delivery's commit is
        followed by a SIGKILL of the process, before the ack.
    :param crash_in_handler: share in [0, 1] of messages whose handler SIGKILLs the process
        on their first delivery, after its writes, before the commit.
    :param seed: the run's seed (which messages crash, see :func:`crash_chosen`).
    """

    broker: str
    url: str
    name: str
    log: str
    max_deliveries: int
    prefix: str = "chaos_"
    crash_after_commit: float = 0.0
    crash_in_handler: float = 0.0
    seed: int = 0

    def argv(self) -> list[str]:
        """The command-line options that rebuild this config in the child (:func:`main`)."""
        options: list[str] = []
        for key, value in asdict(self).items():
            options += [f"--{key.replace('_', '-')}", str(value)]
        return options


def record_line(settlement: Settlement) -> str:
    """One settlement as a JSON line: id, disposition, delivery count, reason, pid, time."""
    delivery = settlement.delivery
    return (
        json.dumps(
            {
                "id": delivery.message_id,
                "disposition": settlement.disposition.value,
                "delivery_count": delivery.delivery_count,
                "reason": settlement.reason.value if settlement.reason else None,
                "pid": os.getpid(),
                "t": time.time(),
            }
        )
        + "\n"
    )


class SettlementLog:
    """Appends each settlement to a file, one JSON line, flushed per line.

    :param stream: a text file opened for appending.
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def __call__(self, settlement: Settlement) -> None:
        self.write(record_line(settlement))

    def crash(self, where: str, message_id: str | None = None) -> None:
        """Log a crash this process is about to inflict on itself (:data:`AFTER_COMMIT`,
        :data:`IN_HANDLER`), then SIGKILL it."""
        self.write(json.dumps({"crash": where, "id": message_id, "pid": os.getpid()}) + "\n")
        os.kill(os.getpid(), signal.SIGKILL)

    def write(self, line: str) -> None:
        """Append ``line`` and flush it to the file."""
        self.stream.write(line)
        self.stream.flush()


def crash_chosen(seed: int, message_id: str | None, kind: str, rate: float) -> bool:
    """Whether message ``message_id`` crashes its consumer (``kind``: :data:`AFTER_COMMIT`
    or :data:`IN_HANDLER`): true for a share ``rate`` of the ids, the same in every process
    for a given ``seed`` (a BLAKE2b hash of the three, not Python's salted ``hash``)."""
    if rate <= 0 or message_id is None:
        return False
    digest = hashlib.blake2b(f"{seed}:{kind}:{message_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < rate * 2**64


def _crash_after_commits(log: SettlementLog) -> None:
    """SIGKILL this process right after the commit of a session the handler marked (its
    ``info[AFTER_COMMIT]``): the change is committed, the broker never gets the ack.

    The listener is on the ``Session`` class (this process is ours alone), so it also fires
    for the sync session inside an ``AsyncSession``, when a driver consumes on asyncio with
    sessions of its own (NATS: nats-py is asyncio only).
    """

    def maybe_die(session: Session) -> None:
        if session.in_nested_transaction():
            return  # a savepoint released (SQLAlchemy fires after_commit for it too)
        message_id = session.info.pop(AFTER_COMMIT, None)
        if message_id is not None:
            log.crash(AFTER_COMMIT, message_id)

    event.listen(Session, "after_commit", maybe_die)


def _crashing_handler(
    handler: Callable[[Session, Delivery], object], config: ConsumerConfig, log: SettlementLog
) -> Callable[[Session, Delivery], object]:
    """``handler``, crashing its process on the first delivery of the chosen messages
    (:func:`crash_chosen`): after its writes (the database rolls them back, claim included),
    or by marking the session to crash after its commit."""
    if config.crash_after_commit <= 0 and config.crash_in_handler <= 0:
        return handler

    @functools.wraps(handler)  # one handler name with or without crashes (sa_inbox.consumers)
    def handle_or_crash(session: Session, delivery: Delivery) -> object:
        result = handler(session, delivery)
        if delivery.delivery_count != 1:
            return result
        message_id, seed = delivery.message_id, config.seed
        if crash_chosen(seed, message_id, IN_HANDLER, config.crash_in_handler):
            session.flush()
            log.crash(IN_HANDLER, message_id)
        if crash_chosen(seed, message_id, AFTER_COMMIT, config.crash_after_commit):
            session.info[AFTER_COMMIT] = message_id
        return result

    return handle_or_crash


def run_consumer(config: ConsumerConfig, stop: threading.Event) -> None:
    """Consume ``config.name`` through the broker's driver until ``stop`` is set.

    :raises ValueError: for a broker URL without a chaos driver.
    :raises ImportError: if the broker's client library is not installed.
    """
    schema = DemoSchema(config.prefix)
    engine = make_engine(config.url)
    driver = driver_for(config.broker)
    try:
        with open(config.log, "a", encoding="utf-8") as stream:
            log = SettlementLog(stream)
            _crash_after_commits(log)
            handler = _crashing_handler(payment_handler(schema), config, log)
            driver.consume(
                config.name,
                session_factory=sessionmaker(engine),
                inbox=schema.inbox,
                consumer_name=CONSUMER,
                handler=handler,
                max_deliveries=config.max_deliveries,
                on_settled=log,
                stop=stop,
            )
    finally:
        driver.close()
        engine.dispose()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sa_inbox.chaos.consumer")
    types: dict[str, Callable[[str], Any]] = {
        "max_deliveries": int,
        "crash_after_commit": float,
        "crash_in_handler": float,
        "seed": int,
    }
    for name in ConsumerConfig.__dataclass_fields__:
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=types.get(name, str))
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of a consumer process: SIGTERM (or SIGINT) stops it cleanly."""
    config = ConsumerConfig(**vars(_parser().parse_args(argv)))
    logging.basicConfig(
        level=logging.WARNING, format=f"consumer {os.getpid()}: %(name)s: %(message)s"
    )
    stop = threading.Event()
    with on_signals(lambda _: stop.set()):
        run_consumer(config, stop)


if __name__ == "__main__":
    main()
