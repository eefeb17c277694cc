"""The 10^9-row design model: project measured costs to a message rate and a retention window.

Three designs keep ``window`` seconds of claims (one row per message and consumer):

* ``delete``: one plain table, purged once per ``interval`` (a day) by the batched
  ``DELETE`` of :func:`sa_inbox.retention.purge`, then vacuumed;
* ``daily`` / ``hourly``: a table range-partitioned by the message's own time
  (:mod:`sa_inbox.retention.partitions`), one partition per ``interval`` (a day / an hour),
  each created ahead of time and dropped once its whole range is out of the window.

The inputs (:class:`Measured`) are the figures of ``python -m benchmarks.design``: ``B`` bytes
per row (table + indexes) and ``Bi`` primary-key index bytes per row; ``D`` rows deleted
per second by one purger and ``V`` dead rows removed per second by ``VACUUM``; ``w_0`` WAL
bytes per claim and ``S`` bytes per full-page image (fitted, see below), ``w_d`` WAL bytes
per purged row (``DELETE`` plus ``VACUUM``); ``c_k``/``d_k``
seconds and ``wc_k``/``wd_k`` WAL bytes to create/drop one partition of design ``k``;
``t_b`` seconds of one claim in a batched ``claim_many()`` (per row); and single-claim
latencies ``L(n)`` measured on plain tables of ``n`` rows, fitted as
``L(n) = a + b * log10(n)`` (least squares; a B-tree's depth grows with ``log n``), plus
the measured extra latency ``o_k`` of a claim into a partitioned table (its median minus
the median of claims into a small plain table, taken alternately).

**WAL per claim.** After a checkpoint, the first change of each page writes a full-page
image (PostgreSQL manual 30.1 "Reliability", ``full_page_writes``; 30.5 "WAL
Configuration"). Random (UUIDv4) keys spread ``k`` claims per checkpoint cycle over the
``P`` leaf pages of the hot primary key, touching ``P * (1 - exp(-k / P))`` distinct pages,
so a claim writes ``f(P, k) = P * (1 - exp(-k / P)) / k`` page images on average and
``w(P, k) = w_0 + S * f(P, k)`` WAL bytes. The scenario measures ``w`` right after a
``CHECKPOINT`` at three table sizes (``k`` = the claims measured, ``P`` = the primary key's
pages) and fits ``w_0`` and ``S`` by least squares; the projection uses
``P = hot rows * Bi / 8192`` and ``k = r * CHECKPOINT_SECONDS`` (``checkpoint_timeout``'s
default, 5 min: it assumes ``max_wal_size`` is large enough that WAL volume does not force
checkpoints sooner, which would raise ``f``).

For ``r`` messages/s, a window ``W`` s and an interval ``I`` s (86,400 for ``delete`` and
``daily``, 3,600 for ``hourly``), per design:

=========================  ==================================================================
rows held (peak)           ``N = r * (W + I)``: the oldest interval is dropped/purged only
                           once it is wholly out of the window
table + indexes            ``N * B`` bytes
hot rows                   rows of the B-tree each claim inserts into: ``N`` for ``delete``,
                           ``r * I`` for a partition (its indexes are its own)
hot index                  ``hot rows * Bi`` bytes of primary key: random (UUIDv4) keys
                           touch every leaf, so it must stay in memory for claims to stay
                           fast (the ``received_at`` index grows at its right edge only)
claim latency              ``L(hot rows) + o_k`` (``o`` = 0 for ``delete``)
retention s/day            ``delete``: ``r * 86400 * (1/D + 1/V)``;
                           partitions: ``(86400 / I) * (c_k + d_k)``
retention core share       ``retention s/day / 86400`` (of one core, one connection)
retention WAL/day          ``delete``: ``r * 86400 * w_d``;
                           partitions: ``(86400 / I) * (wc_k + wd_k)``
claim WAL/day              ``r * 86400 * w(hot rows * Bi / 8192, r * CHECKPOINT_SECONDS)``
claims' core share         ``r * t_b`` (the same for every design)
partitions                 ``ceil((W + I) / I) + ahead / I`` (0 for ``delete``)
=========================  ==================================================================

A design is **viable** at a rate while its retention work takes at most
:data:`CORE_BUDGET` of one core and its hot index fits in ``memory_bytes``. The rate where
it stops (:func:`limit_rate`) is the smaller of ``CORE_BUDGET / (1/D + 1/V)`` (``delete``
only: partition maintenance does not grow with the rate) and
``memory_bytes / (Bi * hot seconds)``, hot seconds being ``W + I`` for ``delete`` and ``I``
for a partition. What the model leaves out: latencies measured on an index held in memory
(the extrapolation past the largest measured size follows the B-tree depth only, not I/O),
autovacuum's own scheduling, and the lock a ``DROP TABLE`` of a partition takes on the
parent table (``ACCESS EXCLUSIVE``: a long transaction on the table makes the drop, and every
claim queued behind it, wait; measured here as claim latency during the drop).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "CHECKPOINT_SECONDS",
    "CORE_BUDGET",
    "DAY",
    "DESIGNS",
    "HOUR",
    "PAGE",
    "RATES",
    "WINDOW",
    "Design",
    "Measured",
    "Projection",
    "fit_latency",
    "fit_wal",
    "fpi_per_claim",
    "limit_rate",
    "project",
    "project_all",
]

DAY = 86_400.0
HOUR = 3_600.0
#: The retention window of the published projections: 14 days.
WINDOW = 14 * DAY
#: Message rates (messages/s) of the published projections.
RATES = (2_000.0, 10_000.0, 50_000.0)
#: The share of one core the retention work may take before a design is called not viable:
#: a quarter of a core, this project's assumption (the claims need the rest).
CORE_BUDGET = 0.25
#: PostgreSQL's page size (``BLCKSZ``), bytes.
PAGE = 8192
#: Seconds between checkpoints: ``checkpoint_timeout``'s default (PostgreSQL manual 20.5.2).
CHECKPOINT_SECONDS = 300.0
#: How far ahead partitions are created (:data:`sa_inbox.retention.partitions.DEFAULT_AHEAD`).
AHEAD = 7 * DAY


@dataclass(frozen=True)
class Design:
    """One retention design.

    :param name: ``"delete"``, ``"daily"`` or ``"hourly"``.
    :param interval: seconds between two purges (``delete``) or the width of one partition.
    :param partitioned: True for partition drops, False for the batched ``DELETE``.
    """

    name: str
    interval: float
    partitioned: bool


DESIGNS = (
    Design("delete", DAY, partitioned=False),
    Design("daily", DAY, partitioned=True),
    Design("hourly", HOUR, partitioned=True),
)


@dataclass(frozen=True)
class Measured:
    """The measured inputs of the model (see the module docstring for the symbols).

    :param bytes_per_row: ``B``, table + indexes, bytes.
    :param index_bytes_per_row: ``Bi``, bytes.
    :param delete_rows_per_second: ``D``, rows/s of one batched purge.
    :param vacuum_rows_per_second: ``V``, dead rows/s of ``VACUUM`` after the purge.
    :param wal_bytes_per_claim: ``w_0``, WAL bytes per claim besides page images.
    :param fpi_bytes: ``S``, WAL bytes per full-page image.
    :param wal_bytes_per_purged_row: ``w_d``, bytes per purged row (``DELETE`` + ``VACUUM``).
    :param claim_seconds_per_row_batched: ``t_b``, seconds per claim in ``claim_many()``.
    :param latency_points: ``(rows, seconds)`` single-claim medians on plain tables.
    :param partition_create_seconds: ``c_k`` per partitioned design name, seconds.
    :param partition_drop_seconds: ``d_k`` per partitioned design name, seconds.
    :param partition_create_wal: ``wc_k`` per partitioned design name, bytes.
    :param partition_drop_wal: ``wd_k`` per partitioned design name, bytes.
    :param partition_claim_overhead: ``o_k`` per partitioned design name, seconds.
    """

    bytes_per_row: float
    index_bytes_per_row: float
    delete_rows_per_second: float
    vacuum_rows_per_second: float
    wal_bytes_per_claim: float
    fpi_bytes: float
    wal_bytes_per_purged_row: float
    claim_seconds_per_row_batched: float
    latency_points: Sequence[tuple[float, float]]
    partition_create_seconds: Mapping[str, float]
    partition_drop_seconds: Mapping[str, float]
    partition_create_wal: Mapping[str, float]
    partition_drop_wal: Mapping[str, float]
    partition_claim_overhead: Mapping[str, float]


@dataclass(frozen=True)
class Projection:
    """One design at one rate (units in the names; see the module docstring)."""

    design: str
    rate: float
    window_seconds: float
    rows: float
    total_bytes: float
    hot_rows: float
    hot_index_bytes: float
    claim_latency_seconds: float
    retention_seconds_per_day: float
    retention_core_share: float
    retention_wal_bytes_per_day: float
    claim_wal_bytes_per_day: float
    fpi_per_claim: float
    claims_core_share: float
    partitions: int
    limit_rate: float
    limit: str
    viable: bool
    why_not: str

    def to_json(self) -> dict[str, Any]:
        """The projection as a JSON-able dict."""
        return asdict(self)


def fit_latency(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """``(a, b)`` of the least-squares fit ``latency = a + b * log10(rows)``.

    :param points: ``(rows, seconds)`` pairs, rows > 0; one point gives ``(seconds, 0)``.
    :raises ValueError: for no point or a non-positive row count.
    """
    if not points or any(rows <= 0 for rows, _ in points):
        raise ValueError("need at least one (rows > 0, seconds) point")
    xs = [math.log10(rows) for rows, _ in points]
    ys = [seconds for _, seconds in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return mean_y, 0.0
    b = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return mean_y - b * mean_x, b


def fpi_per_claim(pages: float, claims: float) -> float:
    """``f(P, k) = P * (1 - exp(-k / P)) / k``: full-page images per claim when ``k`` claims
    of random keys land on ``P`` leaf pages in one checkpoint cycle (0 if either is 0)."""
    if pages <= 0 or claims <= 0:
        return 0.0
    return pages * -math.expm1(-claims / pages) / claims


def fit_wal(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """``(w_0, S)`` of the least-squares fit ``wal_per_claim = w_0 + S * f``.

    :param points: ``(f, wal bytes per claim)`` pairs (``f`` from :func:`fpi_per_claim`);
        if every ``f`` is the same, ``S`` is 0 and ``w_0`` their mean.
    :raises ValueError: for no point.
    """
    if not points:
        raise ValueError("need at least one (f, bytes) point")
    xs, ys = [f for f, _ in points], [w for _, w in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return mean_y, 0.0
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return mean_y - slope * mean_x, slope


def _hot_seconds(design: Design, window: float) -> float:
    return design.interval if design.partitioned else window + design.interval


def limit_rate(
    design: Design, measured: Measured, window: float, memory_bytes: float
) -> tuple[float, str]:
    """The rate (messages/s) above which ``design`` is not viable, and the limit's name.

    ``delete``: ``min(CORE_BUDGET / (1/D + 1/V), memory / (Bi * (W + I)))``; a partitioned
    design: ``memory / (Bi * I)`` (its maintenance cost does not grow with the rate).

    :returns: ``(rate, "retention core share" | "hot index > memory")``.
    """
    memory = memory_bytes / (measured.index_bytes_per_row * _hot_seconds(design, window))
    if design.partitioned:
        return memory, "hot index > memory"
    per_row = 1 / measured.delete_rows_per_second + 1 / measured.vacuum_rows_per_second
    core = CORE_BUDGET / per_row
    return (core, "retention core share") if core < memory else (memory, "hot index > memory")


def project(
    design: Design, rate: float, window: float, measured: Measured, memory_bytes: float
) -> Projection:
    """Project ``design`` at ``rate`` messages/s kept ``window`` s (module docstring).

    :param memory_bytes: memory the hot index must fit in (bytes).
    :raises ValueError: for a non-positive rate, window or memory.
    """
    if rate <= 0 or window <= 0 or memory_bytes <= 0:
        raise ValueError("rate, window and memory must be > 0")
    a, b = fit_latency(measured.latency_points)
    rows = rate * (window + design.interval)
    hot_rows = rate * _hot_seconds(design, window)
    per_day = DAY / design.interval
    if design.partitioned:
        name = design.name
        latency = a + b * math.log10(hot_rows) + measured.partition_claim_overhead[name]
        seconds = per_day * (
            measured.partition_create_seconds[name] + measured.partition_drop_seconds[name]
        )
        wal = per_day * (measured.partition_create_wal[name] + measured.partition_drop_wal[name])
        partitions = math.ceil((window + design.interval) / design.interval)
        partitions += round(AHEAD / design.interval)
    else:
        latency = a + b * math.log10(hot_rows)
        per_row = 1 / measured.delete_rows_per_second + 1 / measured.vacuum_rows_per_second
        seconds = rate * DAY * per_row
        wal = rate * DAY * measured.wal_bytes_per_purged_row
        partitions = 0
    hot_index = hot_rows * measured.index_bytes_per_row
    fpi = fpi_per_claim(hot_index / PAGE, rate * CHECKPOINT_SECONDS)
    limit, limit_name = limit_rate(design, measured, window, memory_bytes)
    reasons = []
    if seconds / DAY > CORE_BUDGET:
        reasons.append(f"retention takes {seconds / DAY:.2f} of a core (> {CORE_BUDGET})")
    if hot_index > memory_bytes:
        reasons.append(f"hot index {hot_index / 2**30:.0f} GiB > {memory_bytes / 2**30:.0f} GiB")
    return Projection(
        design=design.name,
        rate=rate,
        window_seconds=window,
        rows=rows,
        total_bytes=rows * measured.bytes_per_row,
        hot_rows=hot_rows,
        hot_index_bytes=hot_index,
        claim_latency_seconds=latency,
        retention_seconds_per_day=seconds,
        retention_core_share=seconds / DAY,
        retention_wal_bytes_per_day=wal,
        claim_wal_bytes_per_day=rate
        * DAY
        * (measured.wal_bytes_per_claim + measured.fpi_bytes * fpi),
        fpi_per_claim=fpi,
        claims_core_share=rate * measured.claim_seconds_per_row_batched,
        partitions=partitions,
        limit_rate=limit,
        limit=limit_name,
        viable=not reasons,
        why_not="; ".join(reasons),
    )


def project_all(
    measured: Measured,
    memory_bytes: float,
    rates: Sequence[float] = RATES,
    window: float = WINDOW,
) -> list[Projection]:
    """:func:`project` for every design of :data:`DESIGNS` at every rate of ``rates``."""
    return [project(d, r, window, measured, memory_bytes) for d in DESIGNS for r in rates]
