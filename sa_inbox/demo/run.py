"""The demo's orchestration: database, stream, broker, worker processes, progress, check.

:func:`run_demo` is what ``sa-inbox demo`` runs. Worker processes are started with the
``spawn`` method (the same on Linux, macOS and Windows) and each opens its own engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import queue
import random
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path

import sqlalchemy as sa
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .app import DemoSchema
from .broker import Ack, Broker, ConnectionLost, Event, Nack, Report, WorkerExit, WorkerReady
from .db import sqlite_url
from .report import RunStats, Verification, verify
from .stream import Stream, generate_stream
from .worker import WorkerConfig, worker_main

__all__ = ["DemoConfig", "DemoError", "run_demo"]

#: Seconds without any event after which the main process checks that workers are alive.
POLL_INTERVAL = 0.5
#: Seconds to wait for a worker to stop when the demo is aborted.
STOP_TIMEOUT = 5.0


class DemoError(Exception):
    """The demo could not run to the end (a worker died, the database is unreachable)."""


@dataclass(frozen=True)
class DemoConfig:
    """Options of ``sa-inbox demo``.

    :param messages: unique payments in the stream.
    :param workers: worker processes.
    :param seed: seed of the stream; None picks one at random (printed, to replay it).
    :param duplicate_rate: share of payments resent by a producer retry, in [0, 1].
    :param concurrent_rate: share of payments delivered twice at once, in [0, 1].
    :param crash_rate: share of deliveries whose worker crashes between commit and ack.
    :param accounts: merchant accounts.
    :param url: a database URL; None for a SQLite file.
    :param db_file: the SQLite file when ``url`` is None; None for one in a temp dir.
    :param use_inbox: False runs the naive consumer (``--no-inbox``).
    """

    messages: int = 2000
    workers: int = 4
    seed: int | None = None
    duplicate_rate: float = 0.1
    concurrent_rate: float = 0.05
    crash_rate: float = 0.02
    accounts: int = 50
    url: str | None = None
    db_file: Path | None = None
    use_inbox: bool = True

    def with_seed(self) -> DemoConfig:
        """This config with a concrete seed."""
        if self.seed is not None:
            return self
        return dataclasses.replace(self, seed=random.SystemRandom().randrange(10**6))


@contextlib.contextmanager
def _database_url(config: DemoConfig) -> Iterator[str]:
    """The URL to run on; a SQLite file in a temporary directory unless told otherwise."""
    if config.url is not None:
        yield config.url
    elif config.db_file is not None:
        yield sqlite_url(str(config.db_file))
    else:
        with tempfile.TemporaryDirectory(prefix="sa-inbox-demo-") as directory:
            yield sqlite_url(str(Path(directory) / "demo.db"))


@dataclass
class _Collector:
    """Accumulates the workers' reports in the main process."""

    reports: list[Report] = field(default_factory=list)
    exits: dict[int, WorkerExit] = field(default_factory=dict)

    def stats(self, broker: Broker, elapsed: float) -> RunStats:
        outcomes = [report.outcome for report in self.reports]
        return RunStats(
            deliveries=len(self.reports),
            processed=outcomes.count("processed"),
            duplicates_skipped=outcomes.count("duplicate"),
            failed=outcomes.count("failed"),
            crashes=sum(report.crashed for report in self.reports),
            redeliveries=broker.redeliveries,
            nacks=broker.nacks,
            dead_letters=broker.dead_letters,
            transient_retries=sum(exit.transient_retries for exit in self.exits.values()),
            concurrent_overlaps=_concurrent_overlaps(self.reports),
            elapsed_s=elapsed,
        )


def _concurrent_overlaps(reports: list[Report]) -> int:
    """Messages that were in flight in two worker processes at the same moment."""
    by_message: dict[str, list[Report]] = {}
    for report in reports:
        by_message.setdefault(report.message_id, []).append(report)
    overlapping = 0
    for copies in by_message.values():
        if any(
            a.pid != b.pid and a.started_ns < b.ended_ns and b.started_ns < a.ended_ns
            for i, a in enumerate(copies)
            for b in copies[i + 1 :]
        ):
            overlapping += 1
    return overlapping


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("deliveries"),
        TimeElapsedColumn(),
        console=console,
    )


def _stop(processes: Sequence[BaseProcess]) -> None:
    """Terminate the workers still running (after an error or Ctrl-C) and reap them."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(STOP_TIMEOUT)


class _Run:
    """One run of the workers: start them, feed them the stream, collect their events."""

    def __init__(self, config: DemoConfig, url: str, stream: Stream) -> None:
        context = multiprocessing.get_context("spawn")
        self.stream = stream
        self.broker = Broker(context)
        self.collector = _Collector()
        self.ready: set[int] = set()
        self.processes = [
            context.Process(
                target=worker_main,
                args=(WorkerConfig(index, url, config.use_inbox), self.broker.channel),
                name=f"sa-inbox-demo-worker-{index}",
                daemon=True,
            )
            for index in range(config.workers)
        ]

    def run(self, console: Console) -> RunStats:
        """Run to the end; the workers are stopped whatever happens."""
        finished = False
        try:
            for process in self.processes:
                process.start()
            # Publish only once every worker is connected, so all of them compete for the
            # queue from the first message on.
            while len(self.ready) < len(self.processes):
                self._next_event()
            started = time.monotonic()
            self.broker.publish(self.stream.deliveries)
            with _progress(console) as progress:
                self._consume(progress)
            elapsed = time.monotonic() - started
            for process in self.processes:
                process.join(STOP_TIMEOUT)
            finished = True
        finally:
            if not finished:
                _stop(self.processes)
            self.broker.shutdown(wait=finished)
        return self.collector.stats(self.broker, elapsed)

    def _consume(self, progress: Progress) -> None:
        """Settle acks, nacks and crashes until every copy is acked and the workers exit."""
        # Each planned crash adds one redelivery; each nack adds one more (counted as seen).
        total = len(self.stream.deliveries) + self.stream.crashes_planned
        task = progress.add_task("delivering", total=total)
        closed = False
        while len(self.collector.exits) < len(self.processes):
            event = self._next_event()
            if isinstance(event, Report):
                self.collector.reports.append(event)
                progress.advance(task)
            elif isinstance(event, Nack):
                if self.broker.settle(event) is not None:  # requeued: one more to come
                    total += 1
                    progress.update(task, total=total)
            elif isinstance(event, Ack | ConnectionLost):
                self.broker.settle(event)
            if not closed and self.broker.unacked == 0:
                self.broker.close(len(self.processes))
                closed = True

    def _next_event(self) -> Event:
        """The next event from the workers; records readiness and exits, raises on failure."""
        while True:
            try:
                event = self.broker.channel.events.get(timeout=POLL_INTERVAL)
            except queue.Empty:
                self._check_alive()
                continue
            if isinstance(event, WorkerReady):
                self.ready.add(event.worker)
            elif isinstance(event, WorkerExit):
                if event.error is not None:
                    raise DemoError(f"worker {event.worker} failed:\n{event.error}")
                self.collector.exits[event.worker] = event
            return event

    def _check_alive(self) -> None:
        for index, process in enumerate(self.processes):
            if index not in self.collector.exits and not process.is_alive():
                raise DemoError(f"worker {index} died (exit code {process.exitcode})")


def _prepared_engine(url: str, schema: DemoSchema, stream: Stream) -> sa.Engine:
    """An engine on ``url`` with the demo's tables freshly created."""
    try:
        return schema.prepared(url, stream.accounts)
    except sa.exc.ArgumentError as exc:
        raise DemoError(f"bad database URL: {exc}") from exc
    except sa.exc.SQLAlchemyError as exc:
        raise DemoError(f"cannot prepare the database: {exc}") from exc


def run_demo(config: DemoConfig, *, console: Console) -> Verification:
    """Run the whole demo and return its verification (not printed).

    :param config: the options; ``config.seed`` must be set (see
        :meth:`DemoConfig.with_seed`).
    :param console: where the progress bar goes (stderr, typically).
    :raises DemoError: if a worker died or the database could not be prepared.
    """
    if config.seed is None:
        raise ValueError("run_demo needs a seed: use config.with_seed()")
    stream = generate_stream(
        config.messages,
        seed=config.seed,
        accounts=config.accounts,
        duplicate_rate=config.duplicate_rate,
        concurrent_rate=config.concurrent_rate,
        crash_rate=config.crash_rate,
    )
    schema = DemoSchema()
    with _database_url(config) as url:
        engine = _prepared_engine(url, schema, stream)
        try:
            stats = _Run(config, url, stream).run(console)
            state = schema.read_state(engine)
        finally:
            engine.dispose()
    backend = sa.make_url(url).get_backend_name()
    return verify(
        stream, stats, state, backend=backend, workers=config.workers, use_inbox=config.use_inbox
    )
