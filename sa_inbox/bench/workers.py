"""Concurrent writers for the benchmarks: worker *processes*, started once, held at a barrier.

Processes rather than threads, so that Python's GIL does not serialise the clients: each
writer process has its own interpreter, engine and connection, as separate consumer
processes do in production. Processes are started with ``spawn`` (the same on every
platform) once per scenario, so their start-up never counts in a figure. For each cell a
job is sent to the first ``workers`` processes; each does its set-up (engine, connection,
message ids), waits at a :class:`multiprocessing.Barrier` of ``workers`` parties, then runs
and times its share. A cell's wall time is from the earliest start to the latest finish.

A measured worker function has the signature ``fn(params, worker, workers, go)`` and returns
a JSON-able dict with at least ``started`` and ``finished`` (``time.perf_counter()``
seconds, which is ``CLOCK_MONOTONIC`` on Linux and so comparable across processes) and
``latencies`` (seconds per transaction). ``go()`` waits at the barrier and returns the start
time.
"""

from __future__ import annotations

import importlib
import multiprocessing
import queue
import statistics
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.synchronize import Barrier
from typing import Any

__all__ = [
    "BenchError",
    "WorkerFunction",
    "WorkerPool",
    "levels",
    "percentile",
    "share",
    "summarise",
    "worker_result",
]

WorkerFunction = Callable[[Mapping[str, Any], int, int, Callable[[], float]], dict[str, Any]]

#: Seconds a worker waits at the barrier for the others (their set-up) before giving up.
BARRIER_TIMEOUT = 300.0
#: Seconds the coordinator waits for a cell's results.
RESULT_TIMEOUT = 3600.0


class BenchError(Exception):
    """A benchmark could not run: a worker failed, or the business state came out wrong."""


def levels(workers: int) -> list[int]:
    """Concurrency levels 1 … ``workers``: the powers of two below it, and ``workers``."""
    result = {workers}
    level = 1
    while level < workers:
        result.add(level)
        level *= 2
    return sorted(result)


def share(messages: int, worker: int, workers: int) -> int:
    """Messages worker ``worker`` of ``workers`` processes (the first ones take the rest)."""
    base, rest = divmod(messages, workers)
    return base + (1 if worker < rest else 0)


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` (0..1) percentile of ``values``, nearest rank; 0.0 if empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def worker_result(
    timing: tuple[float, float, list[list[float]]], mode: str, transactions: int, claims: int
) -> dict[str, Any]:
    """A cell worker's summary: its start and finish, its latencies (apart per kind in
    ``paired`` mode), the transactions it ran (warm-ups included) and its claims."""
    started, finished, by_kind = timing
    return {
        "started": started,
        "finished": finished,
        "latencies": [x for kind in by_kind for x in kind],
        "paired_latencies": by_kind if mode == "paired" else None,
        "transactions": transactions,
        "claims": claims,
    }


def summarise(results: Sequence[Mapping[str, Any]], messages: int) -> dict[str, float]:
    """Throughput and latency of one cell from its workers' results.

    :param results: one dict per worker (``started``, ``finished``, ``latencies``).
    :param messages: messages processed by all workers together.
    :returns: ``seconds`` (wall), ``per_second`` (messages/s), ``us_per_message``
        (wall time per message in microseconds: 1e6 / per_second), and the median and 95th
        percentile of per-transaction latency in microseconds.
    """
    wall = max(r["finished"] for r in results) - min(r["started"] for r in results)
    latencies = [x for r in results for x in r["latencies"]]
    wall = max(wall, 1e-9)
    return {
        "seconds": wall,
        "per_second": messages / wall,
        "us_per_message": wall * 1e6 / messages,
        "latency_median_us": statistics.median(latencies) * 1e6 if latencies else 0.0,
        "latency_p95_us": percentile(latencies, 0.95) * 1e6,
    }


def _resolve(target: str) -> WorkerFunction:
    module, _, name = target.partition(":")
    function: WorkerFunction = getattr(importlib.import_module(module), name)
    return function


def _starter(barrier: Barrier) -> Callable[[], float]:
    def go() -> float:
        barrier.wait(BARRIER_TIMEOUT)
        return time.perf_counter()

    return go


def _worker_main(
    index: int,
    tasks: multiprocessing.Queue[Any],
    results: multiprocessing.Queue[Any],
    barriers: dict[int, Barrier],
) -> None:
    while True:
        job = tasks.get()
        if job is None:
            return
        target, params, workers = job
        barrier = barriers[workers]
        try:
            result = _resolve(target)(params, index, workers, _starter(barrier))
            results.put(("ok", index, result))
        except BaseException:
            barrier.abort()
            results.put(("error", index, traceback.format_exc()))


class WorkerPool:
    """``size`` worker processes that run measured functions on request.

    Use as a context manager; the processes stop at exit.

    :param size: the most concurrent workers any cell will ask for.
    """

    def __init__(self, size: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.size = size
        self._barriers = {k: context.Barrier(k) for k in range(1, size + 1)}
        self._tasks: list[multiprocessing.Queue[Any]] = [context.Queue() for _ in range(size)]
        self._results: multiprocessing.Queue[Any] = context.Queue()
        self._processes = [
            context.Process(
                target=_worker_main,
                args=(i, self._tasks[i], self._results, self._barriers),
                name=f"sa-inbox-bench-{i}",
                daemon=True,
            )
            for i in range(size)
        ]
        for process in self._processes:
            process.start()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self, target: str, params: Mapping[str, Any], workers: int) -> list[dict[str, Any]]:
        """Run ``target`` (``"module:function"``) in the first ``workers`` processes at once.

        :param target: a :data:`WorkerFunction` by import path.
        :param params: JSON-able parameters, the same for every worker.
        :param workers: 1 … ``size``.
        :returns: the workers' result dicts, in worker order.
        :raises BenchError: if a worker raised (its traceback is in the message) or died.
        """
        if not 1 <= workers <= self.size:
            raise ValueError(f"workers must be in 1..{self.size}, not {workers}")
        for i in range(workers):
            self._tasks[i].put((target, dict(params), workers))
        results: dict[int, dict[str, Any]] = {}
        errors: list[str] = []
        deadline = time.monotonic() + RESULT_TIMEOUT
        while len(results) + len(errors) < workers:
            try:
                status, index, payload = self._results.get(timeout=1.0)
            except queue.Empty:
                dead = [p.name for p in self._processes[:workers] if not p.is_alive()]
                if dead or time.monotonic() > deadline:
                    raise BenchError(f"benchmark workers died or hung: {dead}") from None
                continue
            if status == "ok":
                results[index] = payload
            else:
                errors.append(f"worker {index}:\n{payload}")
        if errors:
            self._barriers[workers].reset()
            raise BenchError("\n".join(errors))
        return [results[i] for i in range(workers)]

    def close(self) -> None:
        """Stop the processes (each finishes its current job first)."""
        for tasks in self._tasks:
            tasks.put(None)
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
