"""The failover run: consumers applying a stream while the database's primary dies and its
standby is promoted, and what the promoted server holds afterwards.

:func:`run_failover` is the chaos run (:mod:`sa_inbox.chaos.run`) with the database, not the
consumers, as the victim:

1. the plan (payments, no producer retries: an id published twice would hide a loss), fresh
   business tables on the primary, a fresh queue;
2. K consumer processes (:mod:`sa_inbox.chaos.consumer`, never killed) on a database URL
   that names both servers (libpq tries each host and keeps the writable one, manual
   34.1.1.3 "Specifying Multiple Hosts", ``target_session_attrs=read-write``), so they
   reconnect to whichever server is the primary, with no help from the run;
3. once a share ``failover_at`` of the publishes is settled, the :class:`Cluster` fails
   over: the primary is frozen (SIGSTOP of all its processes: from then on nothing commits
   on it and no WAL leaves it), then SIGKILLed, then the standby promoted. Every delivery
   whose transaction had not returned is redelivered by the broker (its consumer nacked it,
   the database being unreachable, or the broker requeued it). Half of the publishes after
   that share are held back until the primary is frozen (:func:`held_back`): the failover
   meets the stream in its middle however fast the consumers run, and however late the
   failover's own thread is scheduled on a loaded machine;
4. the run ends as a chaos run does (nothing unsettled on the broker), and the promoted
   server's business state is read and checked (:mod:`sa_inbox.chaos.verify`), plus one
   check of its own: ``no_acked_message_lost``: every message a consumer acked (its
   settlement log says so) has its ledger row on the promoted server.

With a synchronous standby (``synchronous_standby_names``, ``synchronous_commit=on``), a
COMMIT returns only once the standby has flushed the transaction's WAL (manual 27.2.8
"Synchronous Replication"), so nothing acked can be missing from it. With asynchronous
replication it can: the primary acknowledges the COMMIT, the consumer acks the message,
and the WAL that the primary had not yet sent dies with it. The claim is lost with the
business change, and the broker never redelivers a message that was acked: the inbox
cannot know. Such a message is counted in :attr:`FailoverResult.lost`.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa

from sa_inbox.chaos.drivers import ChaosDriver, driver_for
from sa_inbox.chaos.run import (
    ChaosConfig,
    ChaosError,
    Producer,
    consume_until_settled,
    consumer_configs,
    log_dir,
    prepared_engine,
)
from sa_inbox.chaos.supervisor import Supervisor
from sa_inbox.chaos.tally import LogFollower, Tally, acked_ids, read_logs
from sa_inbox.chaos.verify import Verification, read_state, verify
from sa_inbox.chaos.workload import PREFIX, make_plan
from sa_inbox.demo.app import DemoSchema
from sa_inbox.demo.db import make_engine

__all__ = [
    "BALLAST_JOIN_S",
    "BALLAST_ROW_BYTES",
    "Cluster",
    "FailoverConfig",
    "FailoverResult",
    "held_back",
    "run_failover",
]

#: Seconds :meth:`_Ballast.join` waits for each writer.
BALLAST_JOIN_S = 30.0

#: Bytes of each row the ballast writers insert by default (random, so not compressed:
#: WAL traffic, which widens the window in which an asynchronous standby lags behind).
BALLAST_ROW_BYTES = 256 * 1024


class Cluster(Protocol):
    """A primary and its standby that a run can fail over (``scripts/servers.sh``'s
    ``pg-freeze-primary``, ``pg-kill-primary`` and ``pg-promote`` in the tests)."""

    def freeze(self) -> None:
        """Stop every process of the primary (SIGSTOP): no commit, no WAL sent."""

    def kill(self) -> None:
        """SIGKILL every process of the primary and wait until they are gone."""

    def promote(self) -> None:
        """Promote the standby: once this returns, it accepts writes."""


@dataclass(frozen=True)
class FailoverConfig:
    """Options of :func:`run_failover`.

    :param broker: the broker URL (``amqp://``, ``redis://``, ``nats://``).
    :param url: the consumers' database URL, naming the primary and the standby (see the
        module's step 2); the run drops and creates its tables through it.
    :param promoted_url: the standby's own URL: the state is read there after the run.
    :param replication: ``"sync"`` or ``"async"``, reported only.
    :param messages: unique payments, >= 1.
    :param consumers: consumer processes, >= 1.
    :param failover_at: share in (0, 1) of the publishes settled before the failover.
    :param frozen_s: seconds the primary stays frozen before the SIGKILL.
    :param ballast_writers: threads inserting a ``ballast_row_bytes`` row per transaction in
        a loop until the failover (write load on the primary; 0 for none).
    :param ballast_row_bytes: bytes of each ballast row.
    :param max_deliveries: deliveries before a dead letter; high, since each delivery that
        meets the dead primary is nacked and counts.
    :param seed: the plan's seed.
    :param timeout: seconds the run may take before it fails.
    :param name: the queue / stream name.
    :param prefix: the business tables' prefix.
    :param log_dir: where the consumers' logs are kept; None for a temporary directory.
    """

    broker: str
    url: str
    promoted_url: str
    replication: str
    messages: int = 600
    consumers: int = 3
    failover_at: float = 0.4
    frozen_s: float = 0.2
    ballast_writers: int = 0
    ballast_row_bytes: int = BALLAST_ROW_BYTES
    max_deliveries: int = 1000
    seed: int = 0
    timeout: float = 60.0
    name: str = "sa-inbox-failover"
    prefix: str = PREFIX
    log_dir: Path | None = None

    def chaos(self) -> ChaosConfig:
        """The chaos run's config these options amount to (no consumer kills)."""
        return ChaosConfig(
            broker=self.broker,
            url=self.url,
            messages=self.messages,
            consumers=self.consumers,
            kill_every=0.0,
            duplicates=0.0,
            max_deliveries=self.max_deliveries,
            seed=self.seed,
            timeout=self.timeout,
            name=self.name,
            prefix=self.prefix,
            log_dir=self.log_dir,
        )


@dataclass(frozen=True)
class FailoverResult:
    """One failover run.

    :param replication: ``"sync"`` or ``"async"`` (as configured).
    :param consumers: consumer processes.
    :param seed: the plan's seed.
    :param published: messages published (one per payment).
    :param acked_before_failover: messages acked before the standby was promoted (their
        commits returned on the old primary: during the freeze nothing commits, and an ack
        follows its commit within milliseconds).
    :param failover_s: seconds from the freeze until the standby was promoted.
    :param elapsed_s: seconds from the first publish until nothing was left unsettled.
    :param lost: ids acked by a consumer but without a ledger row on the promoted server,
        sorted (the loss the inbox cannot protect against).
    :param lost_acked_before_failover: of those, acked before the standby was promoted (all
        of them, unless the promoted server itself loses commits).
    :param ballast_rows: rows the ballast writers committed.
    :param tally: the consumers' settlements.
    :param verification: the promoted server's state against the plan.
    """

    replication: str
    consumers: int
    seed: int
    published: int
    acked_before_failover: int
    failover_s: float
    elapsed_s: float
    lost: list[str]
    lost_acked_before_failover: int
    ballast_rows: int
    tally: Tally
    verification: Verification

    @property
    def checks(self) -> dict[str, bool]:
        """The chaos run's checks (:class:`Verification`) and ``no_acked_message_lost``."""
        return {**self.verification.checks, "no_acked_message_lost": not self.lost}

    @property
    def ok(self) -> bool:
        """Whether every check holds."""
        return all(self.checks.values())

    def to_json(self) -> dict[str, Any]:
        """The figures, flat, with the checks and ``ok``."""
        v = self.verification
        data = {
            k: getattr(self, k)
            for k in (
                "replication",
                "consumers",
                "seed",
                "published",
                "acked_before_failover",
                "failover_s",
                "elapsed_s",
                "lost",
                "lost_acked_before_failover",
                "ballast_rows",
            )
        }
        data.update(
            lost_count=len(self.lost),
            unique_payments=v.unique_payments,
            ledger_rows=v.ledger_rows,
            inbox_rows=v.inbox_rows,
            applied_twice=v.applied_twice,
            unsettled=v.unsettled,
            dead_letters=v.dead_letters,
            deliveries=self.tally.deliveries,
            redeliveries=self.tally.redeliveries,
            retries=self.tally.retries,
            duplicates_skipped=self.tally.duplicates,
            checks=self.checks,
            ok=self.ok,
        )
        return data


class _Ballast:
    """Threads inserting ``row_bytes``-byte rows in ``{prefix}ballast`` until stopped or
    until their first database error (the primary died)."""

    def __init__(self, url: str, prefix: str, writers: int, row_bytes: int) -> None:
        self.row_bytes = row_bytes
        self.table = sa.Table(
            f"{prefix}ballast",
            sa.MetaData(),
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("payload", sa.LargeBinary, nullable=False),
        )
        self.engine = sa.create_engine(url, pool_size=max(1, writers))
        self.stop = threading.Event()
        self.rows = 0
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._write, name=f"sa-inbox-ballast-{i}", daemon=True)
            for i in range(writers)
        ]
        if writers:
            self.table.drop(self.engine, checkfirst=True)
            self.table.create(self.engine)

    def start(self) -> None:
        """Start the writers."""
        for thread in self.threads:
            thread.start()

    def _write(self) -> None:
        try:
            while not self.stop.is_set():
                with self.engine.begin() as conn:
                    conn.execute(self.table.insert(), {"payload": os.urandom(self.row_bytes)})
                with self._lock:
                    self.rows += 1
        except sa.exc.DBAPIError:
            return  # the primary is gone: the load ends with it

    def join(self) -> None:
        """Stop the writers, wait for them (at most :data:`BALLAST_JOIN_S` each: a writer
        stuck on a primary left frozen by a failed failover is a daemon thread, left
        behind), close their engine."""
        self.stop.set()
        for thread in self.threads:
            if thread.ident is not None:
                thread.join(BALLAST_JOIN_S)
        self.engine.dispose()


def held_back(publishes: int, at: int) -> int:
    """The publishes held back until the primary is frozen: half of those after the first
    ``at`` (at least one, when there is one after them), so that some are still in flight
    at the freeze and some can only be settled after the promotion."""
    return max(1, (publishes - at) // 2) if publishes > at else 0


class _Failover(threading.Thread):
    """Waits until ``at`` publishes are settled, then freezes, kills and promotes;
    ``frozen`` is set once the primary is frozen (or the failover ended without it)."""

    def __init__(self, cluster: Cluster, logs: Path, at: int, frozen_s: float) -> None:
        super().__init__(name="sa-inbox-failover", daemon=True)
        self.cluster, self.follower = cluster, LogFollower(logs)
        self.at, self.frozen_s = at, frozen_s
        self.frozen_at: float | None = None  # time.time(), as the consumers' log lines
        self.promoted_at: float | None = None
        self.failover_s = 0.0
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.cancel = threading.Event()
        self.frozen = threading.Event()

    def run(self) -> None:
        try:
            while self.follower.final < self.at:
                if self.cancel.wait(0.01):
                    return
                self.follower.poll()
            started = time.monotonic()
            self.frozen_at = time.time()
            self.cluster.freeze()
            self.frozen.set()
            time.sleep(self.frozen_s)
            self.cluster.kill()
            self.cluster.promote()
            self.promoted_at = time.time()
            self.failover_s = time.monotonic() - started
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self.frozen.set()  # the held publishes never wait for a failover that ended
            self.done.set()


def run_failover(config: FailoverConfig, cluster: Cluster) -> FailoverResult:
    """Run one failover run (see the module docstring) and return its result.

    :param config: the options.
    :param cluster: the primary and standby ``config.url`` names.
    :raises ChaosError: if a consumer or the producer failed, the failover failed or never
        happened, or the run did not end within ``config.timeout``.
    :raises ValueError: for ``failover_at`` outside (0, 1), or a broker without a driver.
    """
    if not 0 < config.failover_at < 1:
        raise ValueError("failover_at must be in (0, 1)")
    chaos = config.chaos()
    plan = make_plan(config.messages, seed=config.seed, duplicates=0.0)
    schema = DemoSchema(config.prefix)
    driver = driver_for(config.broker)
    engine = prepared_engine(config.url, schema, plan)
    promoted = make_engine(config.promoted_url)
    try:
        ballast = _Ballast(
            config.url, config.prefix, config.ballast_writers, config.ballast_row_bytes
        )
        driver.prepare(config.name, max_deliveries=config.max_deliveries)
        with log_dir(config.log_dir) as logs:
            supervisor = Supervisor(
                consumer_configs(chaos), kill_every=0.0, seed=config.seed, log_dir=Path(logs)
            )
            at = max(1, int(len(plan.publishes) * config.failover_at))
            failover = _Failover(cluster, Path(logs), at, config.frozen_s)
            producer = Producer(
                config.broker,
                config.name,
                plan,
                held=held_back(len(plan.publishes), at),
                release=failover.frozen,
            )
            try:
                failover.start()  # watching before anything is published: a late start on
                # a loaded machine let the whole stream settle before the failover
                supervisor.start()
                started = time.monotonic()
                ballast.start()
                producer.start()
                _consume_with_failover(chaos, driver, supervisor, producer, logs, failover)
                elapsed = time.monotonic() - started
            finally:
                failover.cancel.set()
                ballast.join()
                supervisor.stop()
            tally = read_logs(supervisor.logs())
            acks = acked_ids(supervisor.logs())
        state = read_state(promoted, schema)
        verification = verify(
            plan,
            state,
            unsettled=driver.unsettled(config.name),
            dead_letters=driver.dead_letters(config.name),
        )
    finally:
        driver.close()
        engine.dispose()
        promoted.dispose()
    promoted_at = failover.promoted_at or 0.0
    lost = sorted(set(acks) - state.ledger_ids)
    return FailoverResult(
        replication=config.replication,
        consumers=config.consumers,
        seed=config.seed,
        published=len(plan.publishes),
        acked_before_failover=sum(1 for t in acks.values() if t < promoted_at),
        failover_s=failover.failover_s,
        elapsed_s=elapsed,
        lost=lost,
        lost_acked_before_failover=sum(1 for i in lost if acks[i] < promoted_at),
        ballast_rows=ballast.rows,
        tally=tally,
        verification=verification,
    )


def _consume_with_failover(
    chaos: ChaosConfig,
    driver: ChaosDriver,
    supervisor: Supervisor,
    producer: Producer,
    logs: str,
    failover: _Failover,
) -> None:
    """:func:`consume_until_settled`, then the failover's own outcome.

    :raises ChaosError: if the failover failed, or never happened (everything was settled
        first).
    """
    try:
        consume_until_settled(chaos, driver, supervisor, producer, LogFollower(Path(logs)))
    except ChaosError:
        _raise_failover_error(failover)  # a failed failover shows as a timeout: say why
        raise
    failover.cancel.set()
    failover.join()
    _raise_failover_error(failover)
    if failover.promoted_at is None:
        raise ChaosError("the run settled everything before the failover")


def _raise_failover_error(failover: _Failover) -> None:
    """Raise :class:`ChaosError` if the failover thread failed."""
    if failover.error is not None:
        raise ChaosError(f"the failover failed: {failover.error!r}") from failover.error
