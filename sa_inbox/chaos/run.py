"""The chaos run's orchestration: plan, database, broker, consumers, killer, end, verification.

:func:`run_chaos` is what ``sa-inbox chaos`` runs:

1. the plan (:mod:`.workload`) and fresh business tables;
2. a fresh queue / stream and its dead-letter path (``driver.prepare``);
3. K consumer processes (:mod:`.consumer`) under the killer (:mod:`.supervisor`);
4. the producer publishes the plan through its own driver, in a thread, while the
   killer kills;
5. the end: once everything is published and the consumers' logs show a final settlement
   (ack or dead letter) per publish, or nothing new for :data:`QUIET_S`, the killer stops
   and the consumers are stopped (SIGTERM: they finish what they hold); if
   ``driver.unsettled(name)`` is then 0 the run is over, else the consumers start again
   (and the kills) and the end is sought again, now once they have logged a final
   settlement per message left unsettled (redeliveries skipped as duplicates count as
   final settlements too, so the logs may show one per publish while messages are still
   on the broker); past ``timeout`` the run fails (:class:`ChaosError`);
6. the consumers are stopped (SIGTERM), their logs tallied (:mod:`.tally`), and the
   database and the broker verified (:mod:`.verify`).

What a SIGKILLed consumer held comes back by each broker's own rule, which its driver names:
RabbitMQ requeues a closed channel's unacked deliveries at once (RabbitMQ docs, "Consumer
Acknowledgements and Publisher Confirms", "Automatic Requeueing"); Redis Streams keep them
in the group's pending list until another consumer takes them with ``XAUTOCLAIM`` (Redis
docs, ``XAUTOCLAIM``); JetStream redelivers them after the consumer's ``AckWait`` (NATS
docs, "JetStream Model Deep Dive"). The run only waits for them: it never settles anything
itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from rich.console import Console
from rich.status import Status

from ..demo.app import DemoSchema
from .consumer import ConsumerConfig
from .drivers import ChaosDriver, driver_for
from .report import ChaosResult
from .supervisor import ConsumerFailed, Supervisor
from .tally import LogFollower, read_logs
from .verify import read_state, verify
from .workload import PREFIX, ChaosPlan, make_plan

__all__ = [
    "LAST_RESORT_S",
    "POLL_S",
    "QUIET_S",
    "ChaosConfig",
    "ChaosError",
    "Producer",
    "broker_label",
    "consume_until_settled",
    "consumer_configs",
    "log_dir",
    "prepared_engine",
    "run_chaos",
]

#: Seconds without a new settlement logged after which the consumers are stopped to ask the
#: broker what is left unsettled (longer than the drivers' visibility timeouts in the run).
QUIET_S = 3.0
#: Seconds without a line at all after which the broker is asked anyway (a restarted
#: consumer killed between its ack and its first log line leaves no line).
LAST_RESORT_S = 30.0
#: Seconds between two looks at the broker and the consumers.
POLL_S = 0.1


class ChaosError(Exception):
    """The run could not finish: a consumer or the producer failed, or the timeout passed
    with messages still unsettled."""


@dataclass(frozen=True)
class ChaosConfig:
    """Options of ``sa-inbox chaos``.

    :param broker: the broker URL (``amqp://``, ``redis://``, ``nats://``).
    :param url: the database URL (a sync driver; the run drops and creates its tables).
    :param messages: unique payments, >= 1.
    :param consumers: consumer processes, >= 1.
    :param kill_every: mean seconds between two SIGKILLs of a consumer; 0 for no kills.
    :param max_kills: SIGKILLs after which the killer stops; None for no limit. A healthy
        message's deliveries end by a kill at most this often, and by a crash of the
        consumer holding it at most as often as messages crash (``crash_after_commit``,
        ``crash_in_handler``: each chosen message once, on its first delivery): a
        ``max_deliveries`` above the two together keeps every healthy message out of the
        dead letters.
    :param duplicates: share in [0, 1] of payments published twice with the same id.
    :param poison: poison messages (their handler always fails).
    :param max_deliveries: deliveries of a message before it is dead-lettered, >= 1.
    :param seed: seed of the plan and the killer; None for a random one.
    :param crash_after_commit: share in [0, 1] of messages whose first delivery SIGKILLs
        its consumer after the commit, before the ack (the demo's crashes).
    :param crash_in_handler: share in [0, 1] of messages whose first delivery SIGKILLs its
        consumer in the handler, after its writes, before the commit.
    :param timeout: seconds the run may take before it fails.
    :param name: the queue / stream name; None for ``sa-inbox-chaos-<random>``.
    :param prefix: the business tables' prefix.
    :param log_dir: where the consumers' settlement logs and stderr are kept (created);
        None for a temporary directory, removed at the end.
    """

    broker: str
    url: str
    messages: int = 1000
    consumers: int = 3
    kill_every: float = 1.0
    max_kills: int | None = None
    duplicates: float = 0.1
    poison: int = 0
    max_deliveries: int = 5
    seed: int | None = None
    crash_after_commit: float = 0.0
    crash_in_handler: float = 0.0
    timeout: float = 600.0
    name: str | None = None
    prefix: str = PREFIX
    log_dir: Path | None = None

    def with_seed(self) -> ChaosConfig:
        """This config with a concrete seed and queue name."""
        return dataclasses.replace(
            self,
            seed=self.seed if self.seed is not None else random.SystemRandom().randrange(10**6),
            name=self.name or f"sa-inbox-chaos-{uuid.uuid4().hex[:12]}",
        )


class Producer(threading.Thread):
    """Publishes the plan through its own driver (a driver's connection is one thread's).

    :param held: publishes at the end of the plan held back until ``release`` is set (0:
        none, all published at once).
    :param release: the event the held publishes wait for.
    """

    def __init__(
        self,
        broker: str,
        name: str,
        plan: ChaosPlan,
        *,
        held: int = 0,
        release: threading.Event | None = None,
    ) -> None:
        super().__init__(name="sa-inbox-chaos-producer", daemon=True)
        self.broker, self.queue, self.plan = broker, name, plan
        self.split = len(plan.publishes) - (held if release is not None else 0)
        self.release = release
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            driver = driver_for(self.broker)
            try:
                driver.publish(self.queue, self.plan.publishes[: self.split])
                if self.release is not None and self.split < len(self.plan.publishes):
                    self.release.wait()
                    driver.publish(self.queue, self.plan.publishes[self.split :])
            finally:
                driver.close()
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self.done.set()


def _until_quiet(
    config: ChaosConfig,
    supervisor: Supervisor,
    producer: Producer,
    follower: LogFollower,
    deadline: float,
    status: Status | None,
    settled_at: int,
    quiet_s: float = QUIET_S,
) -> None:
    """Step the killer until everything is published and the logs show ``settled_at``
    final settlements in all, or nothing new for ``quiet_s`` after at least one new
    line since this call (a kill can lose the log line of a delivery it acked; and the
    consumers just (re)started, still importing, log nothing: stopping them then would
    restart them for ever on a slow machine), or nothing new for :data:`LAST_RESORT_S`.

    :param settled_at: the count of final settlements (:attr:`LogFollower.final`) that
        ends the wait: the publishes at first; after a restart, the count then plus what
        the broker still held, so the restarted consumers are not stopped before they
        settled anything.
    :param quiet_s: seconds without a new log line that end the wait (a driver's
        ``quiet_seconds``: a Kafka rebalance is silent for longer than :data:`QUIET_S`).
    :raises ChaosError: if the producer or a consumer failed, or at the deadline.
    """
    published = len(producer.plan.publishes)
    quiet_since = time.monotonic()
    follower.poll()
    lines_before = follower.lines
    while True:
        try:
            supervisor.step()
        except ConsumerFailed as exc:
            raise ChaosError(str(exc)) from exc
        if producer.error is not None:
            raise ChaosError(f"the producer failed: {producer.error!r}") from producer.error
        now = time.monotonic()
        if follower.poll():
            quiet_since = now
            if status is not None:
                status.update(
                    f"chaos run: {follower.final} of {published} publishes settled, "
                    f"{supervisor.kills} kills, {supervisor.crashes} crashes ..."
                )
        quiet = now - quiet_since
        if producer.done.is_set() and (
            follower.final >= settled_at
            or (quiet >= quiet_s and follower.lines > lines_before)
            or quiet >= LAST_RESORT_S
        ):
            return
        if now > deadline:
            raise ChaosError(
                f"timeout after {config.timeout:.0f} s: {follower.final} of {published} "
                "publishes settled"
                + ("" if producer.done.is_set() else ", the producer still publishing")
            )
        time.sleep(POLL_S)


def consume_until_settled(
    config: ChaosConfig,
    driver: ChaosDriver,
    supervisor: Supervisor,
    producer: Producer,
    follower: LogFollower,
    status: Status | None = None,
) -> None:
    """Run until the consumers are stopped with nothing unsettled (the module's step 5).

    A driver whose broker needs longer than :data:`QUIET_S` to hand a killed consumer's
    deliveries to the others (Kafka: the session timeout, then a rebalance) says so in its
    ``quiet_seconds``. The consumers are stopped before each look at
    ``driver.unsettled`` (on RabbitMQ only a queue without consumers tells its unsettled
    count: the unacked ones are back to ready);
    if something is left (the logs were quiet for a while in the middle of the run, or a
    redelivery was waiting out its visibility timeout), they are started again and the
    kills go on.

    :raises ChaosError: if the producer or a consumer failed, or at the timeout.
    """
    assert config.name is not None
    deadline = time.monotonic() + config.timeout
    settled_at = len(producer.plan.publishes)
    quiet_s = float(getattr(driver, "quiet_seconds", QUIET_S))
    while True:
        _until_quiet(config, supervisor, producer, follower, deadline, status, settled_at, quiet_s)
        supervisor.stop()
        unsettled = driver.unsettled(config.name)
        if unsettled == 0:
            return
        if time.monotonic() > deadline:
            raise ChaosError(f"timeout after {config.timeout:.0f} s: {unsettled} unsettled")
        follower.poll()  # what the stopped consumers logged last
        settled_at = follower.final + unsettled
        supervisor.start()
        supervisor.resume_killing()


@contextlib.contextmanager
def log_dir(path: Path | None) -> Iterator[str]:
    """``path`` (created), or a temporary directory removed at the end."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield str(path)
        return
    with tempfile.TemporaryDirectory(prefix="sa-inbox-chaos-") as directory:
        yield directory


def prepared_engine(url: str, schema: DemoSchema, plan: ChaosPlan) -> sa.Engine:
    """An engine on ``url`` with the run's tables freshly created."""
    try:
        return schema.prepared(url, plan.accounts)
    except sa.exc.SQLAlchemyError as exc:
        raise ChaosError(f"cannot prepare the database: {exc}") from exc


def consumer_configs(config: ChaosConfig) -> list[ConsumerConfig]:
    """One :class:`ConsumerConfig` per consumer process of ``config`` (seed and name set)."""
    assert config.name is not None and config.seed is not None
    template = ConsumerConfig(
        broker=config.broker,
        url=config.url,
        name=config.name,
        log="",
        max_deliveries=config.max_deliveries,
        prefix=config.prefix,
        crash_after_commit=config.crash_after_commit,
        crash_in_handler=config.crash_in_handler,
        seed=config.seed,
    )
    return [template] * config.consumers


def broker_label(url: str) -> str:
    """``scheme://host:port`` of a broker URL, without credentials."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2].split('/', 1)[0]}"


def run_chaos(config: ChaosConfig, *, console: Console | None = None) -> ChaosResult:
    """Run the whole chaos run and return its result (not printed).

    :param config: the options; ``config.seed`` and ``config.name`` must be set (see
        :meth:`ChaosConfig.with_seed`).
    :param console: where a status line goes while the run lasts; None for none.
    :raises ChaosError: as the class says; the consumers are stopped first.
    :raises ValueError: for a broker URL without a driver, or a config without a seed.
    :raises ImportError: if the broker's client library is not installed.
    """
    if config.seed is None or config.name is None:
        raise ValueError("run_chaos needs a seed and a name: use config.with_seed()")
    plan = make_plan(
        config.messages, seed=config.seed, duplicates=config.duplicates, poison=config.poison
    )
    schema = DemoSchema(config.prefix)
    driver = driver_for(config.broker)
    engine = prepared_engine(config.url, schema, plan)
    try:
        driver.prepare(config.name, max_deliveries=config.max_deliveries)
        with log_dir(config.log_dir) as logs:
            supervisor = Supervisor(
                consumer_configs(config),
                kill_every=config.kill_every,
                seed=config.seed,
                log_dir=Path(logs),
                max_kills=config.max_kills,
            )
            producer = Producer(config.broker, config.name, plan)
            follower = LogFollower(Path(logs))
            try:
                supervisor.start()
                started = time.monotonic()
                producer.start()
                with _status(console, config) as status:
                    consume_until_settled(config, driver, supervisor, producer, follower, status)
                elapsed = time.monotonic() - started
            finally:
                supervisor.stop()
            tally = read_logs(supervisor.logs())
        state = read_state(engine, schema)
        verification = verify(
            plan,
            state,
            unsettled=driver.unsettled(config.name),
            dead_letters=driver.dead_letters(config.name),
        )
    finally:
        driver.close()
        engine.dispose()
    return ChaosResult(
        broker=broker_label(config.broker),
        backend=engine.dialect.name,
        name=config.name,
        consumers=config.consumers,
        kill_every=config.kill_every,
        seed=config.seed,
        published=len(plan.publishes),
        duplicate_publishes=plan.duplicate_publishes,
        poison=len(plan.poison_ids),
        kills=supervisor.kills,
        crashes=supervisor.crashes,
        elapsed_s=elapsed,
        tally=tally,
        verification=verification,
    )


def _status(
    console: Console | None, config: ChaosConfig
) -> contextlib.AbstractContextManager[Status | None]:
    """A spinner and progress line while the run lasts (nothing without a console)."""
    if console is None:
        return contextlib.nullcontext()
    kills = f"a kill every ~{config.kill_every:g} s" if config.kill_every > 0 else "no killer"
    return console.status(
        f"chaos run: {config.messages} payments, {config.consumers} consumers, {kills} ..."
    )
