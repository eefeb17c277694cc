"""A peer contender of the ``store_drain`` scenario (:class:`benchmarks.drain_peers.Peer`)
for the tests: sa-inbox's own worker, one message per transaction, on a store table of its
own, so the scenario's peer path runs without another library installed."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from sa_inbox.bench.db import make_engine
from sa_inbox.bench.workers import BenchError
from sa_inbox.store import DONE, InboxStore, Incoming, StoredMessage, Worker

NAME = "peer"
METADATA = sa.MetaData()
STORE = InboxStore(METADATA, table_name="bench_peer_store")


def available(url: str) -> bool:
    return True


def receive(url: str, messages: int) -> float:
    engine = make_engine(url)
    try:
        METADATA.drop_all(engine, checkfirst=True)
        METADATA.create_all(engine)
        started = time.perf_counter()
        with engine.begin() as conn:
            STORE.receive_many(conn, [Incoming(f"peer-{i}", {"i": i}) for i in range(messages)])
        return time.perf_counter() - started
    finally:
        engine.dispose()


def _noop(session: Any, message: StoredMessage) -> None:
    """Nothing: the drain's own cost."""


def drain_worker(
    params: Mapping[str, Any], worker: int, workers: int, go: Callable[[], float]
) -> dict[str, Any]:
    engine = make_engine(params["url"])
    try:
        consumer = Worker(STORE.bind(engine), _noop, batch_size=10, poll_interval=0.05)
        started = go()
        summary = consumer.run(until_empty=True, handle_signals=False)
        finished = time.perf_counter()
    finally:
        engine.dispose()
    return {"started": started, "finished": finished, "latencies": [],
            "done": summary.processed, "errors": summary.errors}  # fmt: skip


def check(url: str, messages: int) -> None:
    engine = make_engine(url)
    try:
        counts = STORE.counts(engine)
        METADATA.drop_all(engine)
    finally:
        engine.dispose()
    if counts[DONE] != messages:
        raise BenchError(f"peer drain left {counts} for {messages} messages")
