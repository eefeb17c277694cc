"""Design: the 10^9-row inbox on PostgreSQL, measured at --rows and projected.

``python -m benchmarks.design --url postgresql+psycopg://… --rows 10000000 --repeat 3``
from the repository root (the published run: 10^5, 10^6 and 10^7 rows; a scenario of
:mod:`sa_inbox.bench.runner`, so it writes ``<out>/design-postgresql.json`` as
``sa-inbox bench`` does) measures on PostgreSQL (the only backend with the library's time
partitions), then projects the figures with :mod:`benchmarks.design_model` to 2,000 /
10,000 / 50,000 messages/s over a 14-day window and draws ``<out>/design.png``.

1. **Growth and claims** (table ``bench_design``, the standard inbox table): the table is
   grown to ``rows // 100``, ``rows // 10`` and ``rows`` rows. The bulk of the rows are made
   by the server (:data:`FILL`: ``INSERT … SELECT`` over ``generate_series``, ids
   ``md5(n)::uuid`` in random key order, ``received_at`` spread over 15 days in insertion
   order, 1/15 of them older than the 14-day window); at each size, the library's claim path
   is measured: ``Inbox.claim()`` in its own transaction ``claims`` times (latency per
   transaction, commit included: median, p90, p99), each alternating with a claim into the
   reference table ``bench_design_ref`` (``rows // 100`` rows, at least 100): the ratio of
   the two medians is the effect of the table's size at the same moment, whatever else
   loads the machine. Then, right after a ``CHECKPOINT``, ``Inbox.claim_many()`` in
   :data:`BATCHES` batches of :data:`BATCH` ids (seconds and WAL bytes per claimed row; the
   page images expected, :func:`~benchmarks.design_model.fpi_per_claim`), and the
   sizes (``pg_total_relation_size``, ``pg_indexes_size``, the primary key's
   ``pg_relation_size`` after ``ANALYZE``; PostgreSQL manual 9.27.7 "Database Object
   Management Functions").
2. **Batched DELETE** at the largest size: :func:`sa_inbox.retention.purge` (batches of
   5,000) deletes the expired 1/15 while a thread claims (latency during the purge), then
   ``VACUUM`` removes the dead rows (autovacuum is off on the table so that it is timed
   here). Time and WAL bytes of each, per deleted row. Checked: every row older than the
   purge's cut-off gone, every younger row kept.
3. **Partitions** (table ``bench_design_part``, :func:`partitioned_processed_messages_table`),
   daily and hourly, ``repeat`` times each: :func:`ensure_partitions` creates the partitions
   of a 17-day span plus 7 days ahead (seconds and WAL per partition), the server fills
   ``partition_rows`` rows (default ``rows // 10``, at least :data:`MIN_PARTITION_ROWS`)
   evenly from the oldest partition's lower bound to now (:func:`fill_partitions`: every
   partition up to now gets rows, whatever the minute of the hour),
   ``PartitionedInbox.claim()`` is timed ``claims`` times (alternating with the reference
   table), then :func:`drop_expired_partitions` with the 14-day policy drops the partitions
   wholly older than the window while a thread claims (seconds and WAL per partition
   dropped, claim latency during the drop). Checked: the partitions gone are exactly the
   expired ones (each held rows), the others kept their rows, and the current one gained
   exactly the claims made during the drop.

It needs a role allowed to run ``CHECKPOINT`` (a superuser, or ``pg_checkpoint`` on
PostgreSQL 15). WAL bytes are ``pg_wal_lsn_diff`` of ``pg_current_wal_lsn()`` around each
step (PostgreSQL manual 9.27.4 "Backup Control Functions"): the WAL of the whole server, so
on a shared server other databases' writes are counted too (the published run used a
private server).
"""

from __future__ import annotations

import datetime
import itertools
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import sqlalchemy as sa
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from benchmarks.design_model import (
    DESIGNS,
    PAGE,
    Measured,
    fit_latency,
    fit_wal,
    fpi_per_claim,
    project_all,
)
from sa_inbox.bench.db import make_engine
from sa_inbox.bench.runner import BenchConfig, make_progress, run_scenario
from sa_inbox.bench.workers import BenchError
from sa_inbox.claim import Inbox
from sa_inbox.cli._common import CannotRun
from sa_inbox.retention import (
    Batch,
    RetentionPolicy,
    count_expired,
    database_now,
    purge,
    purge_target_of,
)
from sa_inbox.retention.partitions import (
    PartitionedInbox,
    drop_expired_partitions,
    ensure_partitions,
    list_partitions,
    partitioned_processed_messages_table,
)

__all__ = [
    "BATCH",
    "BATCHES",
    "CLAIMS",
    "FILL",
    "MIN_PARTITION_ROWS",
    "POLICY",
    "fill_partitions",
    "label_for",
    "latency_points",
    "measured_inputs",
    "memory_bytes",
    "reference_latency",
    "run",
    "table",
    "wal_points",
]

TABLE = "bench_design"
#: The reference table: claims into it alternate with the measured ones (same moment, same
#: load), so that a ratio of medians shows the size effect on a noisy machine.
REF_TABLE = "bench_design_ref"
PART_TABLE = "bench_design_part"
CONSUMER = "billing"
#: Ids per ``claim_many()`` transaction, and such transactions per size.
BATCH = 1000
BATCHES = 5
#: Single claims timed per size (``config.options["claims"]``).
CLAIMS = 300
#: Rows per fill transaction.
FILL_CHUNK = 1_000_000
#: The 14-day window: 2 days of redelivery, 11 days 23 hours of replay, 1 hour of margin.
POLICY = RetentionPolicy(
    max_redelivery=datetime.timedelta(days=2),
    max_replay=datetime.timedelta(days=11, hours=23),
    margin=datetime.timedelta(hours=1),
)
#: The partitions' creation span: 17 days back (3 days older than the window).
FILL_POLICY = RetentionPolicy(
    max_redelivery=datetime.timedelta(days=2),
    max_replay=datetime.timedelta(days=15),
    margin=datetime.timedelta(0),
)
SPAN_DAYS = 15
PART_SPAN_DAYS = 17
#: The fewest ``partition_rows``: one row per hour of the 17-day span plus a day, so that
#: :func:`fill_partitions`' spacing is under an hour and every hourly partition from the
#: oldest to now (at most 17 days + 1 hour) gets a row.
MIN_PARTITION_ROWS = (PART_SPAN_DAYS + 1) * 24
#: Rows :lo..:hi of :total into ``{table}``, ``received_at`` from 15 days ago (row 1) to
#: now (row :total), ids ``md5('{prefix}' || n)`` as a UUID.
FILL = f"""
    INSERT INTO {{table}} (message_id, consumer_name, received_at)
    SELECT md5('{{prefix}}' || g)::uuid::text, '{CONSUMER}',
           now() - interval '{SPAN_DAYS} days' * (1 - g::float8 / CAST(:total AS float8))
    FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g"""
#: Rows 1..:total into ``{table}``, ``event_time`` evenly from :start (excluded) to :now
#: (row :total), ids ``md5('p' || n)`` as a UUID.
PART_FILL = f"""
    INSERT INTO {{table}} (message_id, consumer_name, event_time)
    SELECT md5('p' || g)::uuid::text, '{CONSUMER}',
           CAST(:start AS timestamptz) + (CAST(:now AS timestamptz) - CAST(:start AS timestamptz))
           * (g::float8 / CAST(:total AS float8))
    FROM generate_series(1, CAST(:total AS bigint)) AS g"""


def _wal(conn: sa.Connection) -> str:
    return str(conn.exec_driver_sql("SELECT pg_current_wal_lsn()").scalar_one())


@contextmanager
def _wal_bytes(engine: sa.Engine, into: dict[str, float]) -> Iterator[None]:
    """Put the server's WAL bytes written during the block into ``into["wal_bytes"]``."""
    with engine.connect() as conn:
        start = _wal(conn)
    yield
    with engine.connect() as conn:
        into["wal_bytes"] = float(
            conn.execute(
                sa.text("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), :s)"), {"s": start}
            ).scalar_one()
        )


def _latencies(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "n": len(samples),
        "median_s": statistics.median(samples),
        "p90_s": pick(0.9),
        "p99_s": pick(0.99),
        "max_s": ordered[-1],
    }


def _time_claim(engine: sa.Engine, claim: Callable[[sa.Connection], bool]) -> float:
    started = time.perf_counter()
    with engine.begin() as conn:
        if not claim(conn):
            raise BenchError("a fresh id was reported as a duplicate")
    return time.perf_counter() - started


def _paired(
    engine: sa.Engine,
    claim: Callable[[sa.Connection], bool],
    reference: Callable[[sa.Connection], bool],
    n: int,
) -> dict[str, Any]:
    """``n`` claims by ``claim`` alternating with ``n`` by ``reference``: both latencies
    and the ratio of their medians (measured at the same moment, so the machine's load
    cancels out)."""
    mine: list[float] = []
    ref: list[float] = []
    for _ in range(n):
        mine.append(_time_claim(engine, claim))
        ref.append(_time_claim(engine, reference))
    return {
        **_latencies(mine),
        "reference": _latencies(ref),
        "ratio": statistics.median(mine) / statistics.median(ref),
    }


class _Background:
    """Claims in a thread, one transaction each, until stopped: latency during a step."""

    def __init__(self, engine: sa.Engine, claim: Callable[[sa.Connection], bool]) -> None:
        self.samples: list[float] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(engine, claim), daemon=True)

    def _loop(self, engine: sa.Engine, claim: Callable[[sa.Connection], bool]) -> None:
        try:
            while not self._stop.is_set():
                self.samples.append(_time_claim(engine, claim))
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)

    def __enter__(self) -> _Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def result(self) -> dict[str, float]:
        if self.errors:
            raise BenchError(f"a claim failed during the step: {self.errors[0]!r}")
        if not self.samples:  # the step was shorter than one claim
            return {"n": 0}
        return _latencies(self.samples)


def _plain_claim(inbox: Inbox) -> Callable[[sa.Connection], bool]:
    return lambda conn: inbox.claim(conn, str(uuid.uuid4()), CONSUMER)


def _sizes(engine: sa.Engine, table: str) -> dict[str, float]:
    """Rows, table + indexes, indexes, and the primary key (PostgreSQL manual 9.27.7)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"ANALYZE {table}")
        rows, total, index, pk = conn.execute(
            sa.text(
                f"SELECT (SELECT count(*) FROM {table}), pg_total_relation_size(:t), "
                "pg_indexes_size(:t), (SELECT pg_relation_size(indexrelid) FROM pg_index "
                "WHERE indrelid = CAST(:t AS regclass) AND indisprimary)"
            ),
            {"t": table},
        ).one()
    return {
        "rows": int(rows),
        "total_bytes": int(total),
        "index_bytes": int(index),
        "pk_bytes": int(pk),
        "pk_pages": int(pk) / PAGE,
        "bytes_per_row": int(total) / int(rows),
        "index_bytes_per_row": int(index) / int(rows),
        "pk_bytes_per_row": int(pk) / int(rows),
    }


def _claim_batch(engine: sa.Engine, inbox: Inbox) -> float:
    ids = [str(uuid.uuid4()) for _ in range(BATCH)]
    started = time.perf_counter()
    with engine.begin() as conn:
        claimed = inbox.claim_many(conn, ids, CONSUMER)
    if claimed != set(ids):
        raise BenchError(f"claim_many() claimed {len(claimed)} of {BATCH} fresh ids")
    return time.perf_counter() - started


def _batched_claims(engine: sa.Engine, inbox: Inbox, reference: Inbox) -> dict[str, Any]:
    """``BATCHES`` batches right after a ``CHECKPOINT`` (WAL counted around them only),
    alternating with batches into the reference table."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("CHECKPOINT")
    seconds, ref, wal = [], [], 0.0
    for _ in range(BATCHES):
        counted: dict[str, float] = {}
        with _wal_bytes(engine, counted):
            seconds.append(_claim_batch(engine, inbox))
        wal += counted["wal_bytes"]
        ref.append(_claim_batch(engine, reference))
    return {
        "batch_size": BATCH,
        "batches": BATCHES,
        "seconds_per_row": statistics.median(seconds) / BATCH,
        "reference_seconds_per_row": statistics.median(ref) / BATCH,
        "ratio": statistics.median(seconds) / statistics.median(ref),
        "wal_bytes_per_row": wal / (BATCH * BATCHES),
    }


def _fill(engine: sa.Engine, table: str, prefix: str, lo: int, hi: int, total: int) -> None:
    sql = FILL.format(table=table, prefix=prefix)
    with engine.begin() as conn:
        conn.execute(sa.text(sql), {"lo": lo, "hi": hi, "total": total})


def _grow(
    engine: sa.Engine,
    inbox: Inbox,
    reference: Inbox,
    rows: int,
    claims: int,
    progress: Progress,
) -> list[dict[str, Any]]:
    """Fill ``bench_design`` in stages; measure claims and size at each checkpoint."""
    checkpoints = sorted({rows // 100, rows // 10, rows} - {0})
    task = progress.add_task(f"design: fill {rows:,} rows", total=rows)
    done, results, extra = 0, [], 0
    for checkpoint in checkpoints:
        fill_started = time.perf_counter()
        stage = checkpoint - done
        while done < checkpoint:
            hi = min(checkpoint, done + FILL_CHUNK)
            _fill(engine, TABLE, "d", done + 1, hi, rows)
            progress.advance(task, hi - done)
            done = hi
        fill_seconds = time.perf_counter() - fill_started
        sizes = _sizes(engine, TABLE)
        if sizes["rows"] != done + extra:
            raise BenchError(f"{TABLE} holds {sizes['rows']} rows, not {done + extra}")
        single = _paired(engine, _plain_claim(inbox), _plain_claim(reference), claims)
        batched = _batched_claims(engine, inbox, reference)
        batched["fpi_per_claim_expected"] = fpi_per_claim(sizes["pk_pages"], BATCH * BATCHES)
        extra += claims + BATCH * BATCHES
        results.append(
            {
                **sizes,
                "fill_rows": stage,
                "fill_seconds": fill_seconds,
                "fill_rows_per_second": stage / fill_seconds,
                "single_claim": single,
                "batched_claim": batched,
            }
        )
    return results


def _purge(engine: sa.Engine, inbox: Inbox, progress: Progress) -> dict[str, Any]:
    """Purge the expired rows (claims running meanwhile), check the state, vacuum."""
    target = purge_target_of(inbox.table)
    expired = count_expired(engine, target, POLICY.window)
    with engine.connect() as conn:
        rows_before = int(
            conn.execute(sa.select(sa.func.count()).select_from(inbox.table)).scalar_one()
        )
    task = progress.add_task(f"design: purge {expired:,} rows", total=expired)
    batches: list[Batch] = []

    def on_batch(batch: Batch) -> None:
        batches.append(batch)
        progress.advance(task, batch.rows)

    wal: dict[str, float] = {}
    with _Background(engine, _plain_claim(inbox)) as during, _wal_bytes(engine, wal):
        started = time.perf_counter()
        deleted = purge(engine, older_than=POLICY, table=inbox, on_batch=on_batch)
        seconds = time.perf_counter() - started
    if not batches or deleted < expired:
        raise BenchError(f"the purge deleted {deleted} rows, {expired} were expired")
    cutoff = batches[0].cutoff
    column = inbox.table.c.received_at
    with engine.connect() as conn:
        old, young = (
            int(conn.execute(sa.select(sa.func.count()).where(cond)).scalar_one())
            for cond in (column < cutoff, column >= cutoff)
        )
    claimed = during.result()
    if old or young != rows_before - deleted + int(claimed["n"]):
        raise BenchError(
            f"after the purge: {old} rows older than the cut-off left, {young} kept of "
            f"{rows_before - deleted} + {claimed['n']} claimed meanwhile"
        )
    vacuum: dict[str, float] = {}
    autocommit = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    with _wal_bytes(engine, vacuum), autocommit as conn:
        vacuum_started = time.perf_counter()
        conn.exec_driver_sql(f"VACUUM {TABLE}")
        vacuum_seconds = time.perf_counter() - vacuum_started
    return {
        "expired": expired,
        "deleted": deleted,
        "rows_left_older_than_cutoff": old,
        "rows_kept": young,
        "batches": len(batches),
        "seconds": seconds,
        "rows_per_second": deleted / seconds,
        "longest_batch_seconds": max(b.seconds for b in batches),
        "wal_bytes": wal["wal_bytes"],
        "wal_bytes_per_row": wal["wal_bytes"] / deleted,
        "vacuum_seconds": vacuum_seconds,
        "vacuum_rows_per_second": deleted / vacuum_seconds,
        "vacuum_wal_bytes_per_row": vacuum["wal_bytes"] / deleted,
        "claims_during": claimed,
    }


def _partition_counts(engine: sa.Engine, table: sa.Table) -> dict[str, int]:
    """Rows per partition of ``table`` (empty partitions included)."""
    with engine.connect() as conn:
        counts = {p.name: 0 for p in list_partitions(conn, table)}
        rows = conn.execute(
            sa.text(f"SELECT tableoid::regclass::text, count(*) FROM {PART_TABLE} GROUP BY 1")
        ).all()
    counts.update({str(name): int(count) for name, count in rows})
    return counts


def _current_partition(engine: sa.Engine, table: sa.Table) -> str:
    """The partition holding the database's now: where claims of new messages go."""
    with engine.connect() as conn:
        now = database_now(conn)
        return next(p.name for p in list_partitions(conn, table) if p.lower <= now < p.upper)


def fill_partitions(
    engine: sa.Engine, table: sa.Table, rows: int, now: datetime.datetime | None = None
) -> None:
    """Insert ``rows`` rows into the partitioned ``table``, ``event_time`` spaced evenly
    from its oldest partition's lower bound (excluded) to ``now`` (the last row).

    With a spacing under the partitions' interval, every partition from the oldest to the
    one holding ``now`` gets at least one row, whatever the minute of the hour (or hour of
    the day) ``now`` is: the partitions a drop must take are never empty.

    :param rows: rows to insert (at least :data:`MIN_PARTITION_ROWS` for hourly partitions
        over the scenario's 17-day span).
    :param now: the clock to fill up to, timezone-aware; None: the database's
        ``CURRENT_TIMESTAMP`` (a test passes another one to cover any minute of the hour).
    :raises BenchError: if ``table`` has no partitions, or none starts at or before ``now``.
    """
    with engine.begin() as conn:
        until = database_now(conn) if now is None else now
        lowers = [p.lower for p in list_partitions(conn, table) if p.lower <= until]
        if not lowers:
            raise BenchError(f"{table.name} has no partition starting at or before {until}")
        sql = PART_FILL.format(table=conn.dialect.identifier_preparer.format_table(table))
        conn.execute(sa.text(sql), {"start": lowers[0], "now": until, "total": rows})


def _partition_run(
    engine: sa.Engine, interval: datetime.timedelta, rows: int, claims: int, reference: Inbox
) -> dict[str, Any]:
    """One daily/hourly run: create, fill, claim, drop (with claims); checked."""
    table = partitioned_processed_messages_table(sa.MetaData(), table_name=PART_TABLE)
    table.metadata.drop_all(engine, checkfirst=True)
    table.metadata.create_all(engine)
    try:
        created_wal: dict[str, float] = {}
        with _wal_bytes(engine, created_wal):
            started = time.perf_counter()
            created = ensure_partitions(engine, table, policy=FILL_POLICY, interval=interval)
            create_seconds = time.perf_counter() - started
        fill_partitions(engine, table, rows)
        inbox = PartitionedInbox(table)

        def claim(conn: sa.Connection) -> bool:
            now = datetime.datetime.now(datetime.UTC)
            return inbox.claim(conn, str(uuid.uuid4()), CONSUMER, event_time=now)

        single = _paired(engine, claim, _plain_claim(reference), claims)
        current = _current_partition(engine, table)
        before = _partition_counts(engine, table)
        dropped_wal: dict[str, float] = {}
        with _Background(engine, claim) as during, _wal_bytes(engine, dropped_wal):
            started = time.perf_counter()
            dropped = drop_expired_partitions(engine, table, policy=POLICY)
            drop_seconds = time.perf_counter() - started
        after = _partition_counts(engine, table)
        during_claims = during.result()
        # the claims went to the partition of now: the same one unless a boundary passed
        currents = {current, _current_partition(engine, table)}
        _check_drop(before, after, dropped, currents, int(during_claims["n"]))
    finally:
        table.metadata.drop_all(engine, checkfirst=True)
    return {
        "partitions_created": len(created),
        "create_seconds_per_partition": create_seconds / len(created),
        "create_wal_bytes_per_partition": created_wal["wal_bytes"] / len(created),
        "partitions_dropped": len(dropped),
        "rows_dropped": sum(before[name] for name in dropped),
        "drop_seconds": drop_seconds,
        "drop_seconds_per_partition": drop_seconds / len(dropped),
        "drop_wal_bytes_per_partition": dropped_wal["wal_bytes"] / len(dropped),
        "hot_partition_rows": before[current],
        "single_claim": single,
        "claim_overhead_s": single["median_s"] - single["reference"]["median_s"],
        "claims_during_drop": during_claims,
    }


def _check_drop(
    before: Mapping[str, int],
    after: Mapping[str, int],
    dropped: list[str],
    currents: set[str],
    claimed_meanwhile: int,
) -> None:
    """Exactly the expired partitions went; the others kept their rows, the current one(s)
    gained the claims made during the drop."""
    if not dropped or any(before[name] == 0 for name in dropped):
        raise BenchError(f"dropped {dropped}: expected full expired partitions")
    if set(after) != set(before) - set(dropped):
        raise BenchError(f"partitions after the drop: {sorted(after)}; dropped {dropped}")
    changed = {name: (before[name], after[name]) for name in after if after[name] != before[name]}
    gained = sum(after[name] - before[name] for name in currents)
    if set(changed) - currents or gained != claimed_meanwhile:
        raise BenchError(f"partitions changed by the drop: {changed}, {claimed_meanwhile} claims")


def _partitions(
    engine: sa.Engine,
    rows: int,
    claims: int,
    repeat: int,
    reference: Inbox,
    progress: Progress,
) -> dict[str, Any]:
    results = {}
    task = progress.add_task("design: partitions", total=2 * repeat)
    for design in DESIGNS:
        if not design.partitioned:
            continue
        interval = datetime.timedelta(seconds=design.interval)
        runs = []
        for _ in range(repeat):
            runs.append(_partition_run(engine, interval, rows, claims, reference))
            progress.advance(task)
        keys = (
            "create_seconds_per_partition",
            "create_wal_bytes_per_partition",
            "drop_seconds_per_partition",
            "drop_wal_bytes_per_partition",
            "claim_overhead_s",
        )
        summary: dict[str, float] = {k: statistics.median(r[k] for r in runs) for k in keys}
        summary["claim_median_s"] = statistics.median(r["single_claim"]["median_s"] for r in runs)
        summary["hot_partition_rows"] = statistics.median(r["hot_partition_rows"] for r in runs)
        results[design.name] = {
            "interval_seconds": design.interval,
            "rows": rows,
            "summary": summary,
            "runs": runs,
        }
    return results


def reference_latency(results: Mapping[str, Any]) -> float:
    """``L_ref``: the median over the sizes of the reference table's claim medians (s)."""
    medians = [float(g["single_claim"]["reference"]["median_s"]) for g in results["growth"]]
    return statistics.median(medians)


def latency_points(results: Mapping[str, Any]) -> list[tuple[float, float]]:
    """``(rows, ratio * L_ref)`` per size: the claim latency at that size, load removed."""
    ref = reference_latency(results)
    return [(g["rows"], g["single_claim"]["ratio"] * ref) for g in results["growth"]]


def wal_points(results: Mapping[str, Any]) -> list[tuple[float, float]]:
    """``(f, WAL bytes per claim)`` per size, ``f`` the page images expected per claim."""
    return [
        (g["batched_claim"]["fpi_per_claim_expected"], g["batched_claim"]["wal_bytes_per_row"])
        for g in results["growth"]
    ]


def measured_inputs(results: Mapping[str, Any]) -> Measured:
    """The model's inputs from this scenario's ``results``.

    Sizes and purge figures of the largest table; the latency points from
    :func:`latency_points`; ``w_0`` and ``S`` from :func:`fit_wal` over :func:`wal_points`;
    the batched claim cost at the largest size as its ratio to the reference times the
    reference's median over all sizes; the partitions' medians over their runs.
    """
    growth = results["growth"]
    last = growth[-1]
    purged = results["purge"]
    parts = results["partitions"]
    w_0, fpi_bytes = fit_wal(wal_points(results))
    batched_ref = statistics.median(g["batched_claim"]["reference_seconds_per_row"] for g in growth)

    def per(key: str) -> dict[str, float]:
        return {name: float(p["summary"][key]) for name, p in parts.items()}

    return Measured(
        bytes_per_row=last["bytes_per_row"],
        index_bytes_per_row=last["pk_bytes_per_row"],
        delete_rows_per_second=purged["rows_per_second"],
        vacuum_rows_per_second=purged["vacuum_rows_per_second"],
        wal_bytes_per_claim=w_0,
        fpi_bytes=fpi_bytes,
        wal_bytes_per_purged_row=purged["wal_bytes_per_row"] + purged["vacuum_wal_bytes_per_row"],
        claim_seconds_per_row_batched=last["batched_claim"]["ratio"] * batched_ref,
        latency_points=latency_points(results),
        partition_create_seconds=per("create_seconds_per_partition"),
        partition_drop_seconds=per("drop_seconds_per_partition"),
        partition_create_wal=per("create_wal_bytes_per_partition"),
        partition_drop_wal=per("drop_wal_bytes_per_partition"),
        partition_claim_overhead=per("claim_overhead_s"),
    )


def memory_bytes() -> int:
    """The physical memory of the machine running the benchmark (``os.sysconf``), the
    memory the model's hot index must fit in: the server's own when both run on one
    machine, as here; otherwise a lower or higher bound."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def run(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Measure (growth, claims, purge, partitions), project, plot ``<out>/design.png``.

    :raises BenchError: if the database is not PostgreSQL, matplotlib is missing or
        ``partition_rows`` is under :data:`MIN_PARTITION_ROWS` (before anything is
        measured), or a step left the wrong rows.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise BenchError(
            f"the design scenario plots with matplotlib: pip install 'sa-inbox[bench]' ({exc})"
        ) from exc
    claims = int(config.options.get("claims", CLAIMS))
    part_rows = int(config.options.get("partition_rows", max(config.rows // 10, 1000)))
    if part_rows < MIN_PARTITION_ROWS:
        raise BenchError(
            f"partition_rows = {part_rows:,}: the partition runs need at least "
            f"{MIN_PARTITION_ROWS:,} rows (one per hour of the {PART_SPAN_DAYS}-day span plus "
            "a day), or an hourly partition the drop must take could be empty"
        )
    engine = make_engine(config.url)
    if engine.dialect.name != "postgresql":
        engine.dispose()
        raise BenchError(
            f"the design scenario measures PostgreSQL partitions; {engine.dialect.name} has none"
        )
    load_before = os.getloadavg()
    metadata = sa.MetaData()
    inbox = Inbox(metadata, table_name=TABLE)
    reference = Inbox(metadata, table_name=REF_TABLE)
    ref_rows = max(config.rows // 100, 100)
    try:
        metadata.drop_all(engine, checkfirst=True)
        metadata.create_all(engine)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {TABLE} SET (autovacuum_enabled = false)")
        _fill(engine, REF_TABLE, "r", 1, ref_rows, ref_rows)
        growth = _grow(engine, inbox, reference, config.rows, claims, progress)
        purged = _purge(engine, inbox, progress)
        inbox.table.drop(engine)
        partitions = _partitions(engine, part_rows, claims, config.repeat, reference, progress)
    finally:
        metadata.drop_all(engine, checkfirst=True)
        engine.dispose()
    results: dict[str, Any] = {
        "rows": config.rows,
        "fill": "INSERT ... SELECT over generate_series (ids md5(n)::uuid)",
        "claims_per_size": claims,
        "reference_rows": ref_rows,
        "window_seconds": POLICY.window.total_seconds(),
        "growth": growth,
        "purge": purged,
        "partitions": partitions,
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "memory_bytes": memory_bytes(),
    }
    measured = measured_inputs(results)
    results["model_inputs"] = {
        **{k: v for k, v in vars(measured).items() if k != "latency_points"},
        "latency_points": [list(p) for p in measured.latency_points],
        "latency_fit": list(fit_latency(measured.latency_points)),
        "reference_latency_s": reference_latency(results),
        "wal_points": [list(p) for p in wal_points(results)],
    }
    results["projections"] = [
        p.to_json() for p in project_all(measured, memory_bytes=results["memory_bytes"])
    ]
    results["plot"] = _plot(config.out, results, measured).name
    return results


def _plot(out: Path, results: Mapping[str, Any], measured: Measured) -> Path:
    from benchmarks.design_plot import plot

    out.mkdir(parents=True, exist_ok=True)
    return plot(results, measured, out / "design.png")


def label_for(results: Mapping[str, Any]) -> str:
    """The label of this run: the sizes it measured at (the fill of each growth step, the
    partition runs' rows), not the published run's."""
    filled = itertools.accumulate(int(g["fill_rows"]) for g in results["growth"])
    sizes = " / ".join(f"{n:,}" for n in filled)
    parts = {int(p["rows"]) for p in results["partitions"].values()}
    partitions = " / ".join(f"{n:,}" for n in sorted(parts))
    return (
        f"Design: the 10^9-row inbox on PostgreSQL, measured at {sizes} rows (partitions: "
        f"{partitions} rows) and projected"
    )


def _verdict(p: Mapping[str, Any]) -> str:
    return "yes" if p["viable"] else f"no: {p['why_not']}"


#: The three tables :func:`table` prints: (title, columns, cells of a projection). Each fits
#: 80 columns (a pipe or a CI log), with the design and rate repeated as the row keys.
_TABLES: tuple[tuple[str, tuple[str, ...], Callable[[Mapping[str, Any]], tuple[str, ...]]], ...] = (
    (
        "size and claim",
        ("rows", "size", "hot index", "claim"),
        lambda p: (
            f"{p['rows']:.2e}",
            f"{p['total_bytes'] / 2**40:.2f} TiB",
            f"{p['hot_index_bytes'] / 2**30:,.1f} GiB",
            f"{p['claim_latency_seconds'] * 1e3:.2f} ms",
        ),
    ),
    (
        "retention and WAL",
        ("retention core", "retention WAL/day", "claim WAL/day"),
        lambda p: (
            f"{p['retention_core_share']:.4f}",
            f"{p['retention_wal_bytes_per_day'] / 2**30:,.1f} GiB",
            f"{p['claim_wal_bytes_per_day'] / 2**30:,.0f} GiB",
        ),
    ),
    (
        "limit and verdict",
        ("stops at msg/s", "viable"),
        lambda p: (f"{p['limit_rate']:,.0f} ({p['limit']})", _verdict(p)),
    ),
)


def table(results: Mapping[str, Any]) -> Table:
    """Per design and rate, in three tables stacked (each readable at 80 columns): rows,
    size, hot index, claim latency; retention core share, WAL per day of the retention and
    of the claims; where the design stops, and the verdict."""
    out = Table.grid(padding=(1, 0))
    for title, columns, cells in _TABLES:
        part = Table("design", "msg/s", *columns, title=title)
        for p in results["projections"]:
            part.add_row(p["design"], f"{p['rate']:,.0f}", *cells(p))
        out.add_row(part)
    return out


@click.command(help=__doc__.split("\n\n")[0] if __doc__ else None)
@click.option("--url", required=True, help="A PostgreSQL URL (postgresql+psycopg://…).")
@click.option("--rows", type=click.IntRange(min=1), default=10_000_000, show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--claims", type=click.IntRange(min=1), default=CLAIMS, show_default=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-results"),
    show_default=True,
)
def main(url: str, rows: int, repeat: int, claims: int, out: Path) -> None:
    """Run the scenario, print its tables, write its JSON and ``design.png``.

    :raises CannotRun: (exit 3) if the scenario refused the database or its rows.
    """
    from benchmarks import design

    console = Console()
    config = BenchConfig(url=url, rows=rows, repeat=repeat, out=out, options={"claims": claims})
    try:
        with make_progress(console) as progress:
            run_scenario(design, config, console=console, progress=progress)
    except (BenchError, sa.exc.SQLAlchemyError) as exc:
        raise CannotRun(str(exc)) from exc


if __name__ == "__main__":
    main()
