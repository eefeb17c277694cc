"""The plot of ``python -m benchmarks.design``: measured claim latency and the projected designs.

Six panels: the single-claim latency measured against table size (with the fit the model
uses), then, per design, against the message rate (1,000 to 100,000 messages/s, a 14-day
window): table size, the hot index against the machine's memory, the retention work's share
of a core against :data:`~benchmarks.design_model.CORE_BUDGET`, the WAL per day of the
claims and of the retention, and the projected claim latency. Drawn with matplotlib's Agg
backend (no display).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.design_model import (
    CORE_BUDGET,
    DESIGNS,
    RATES,
    WINDOW,
    Measured,
    fit_latency,
    project,
)

__all__ = ["plot"]

#: The rates drawn: 1,000 to 100,000 messages/s, 25 points per decade.
CURVE = [10 ** (3 + k / 25) for k in range(51)]


def plot(results: Mapping[str, Any], measured: Measured, path: Path) -> Path:
    """Draw ``results`` (of :func:`benchmarks.design.run`) and the model's inputs taken
    from them (``measured``, :func:`benchmarks.design.measured_inputs`) into ``path``
    (PNG).

    :raises ImportError: without matplotlib (``pip install 'sa-inbox[bench]'``).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    memory = float(results["memory_bytes"])
    figure, axes = pyplot.subplots(2, 3, figsize=(15, 8.5))
    _latency(axes[0][0], results, measured.latency_points)
    panels = [
        (axes[0][1], "total_bytes", 2**40, "table + indexes (TiB)", None),
        (axes[0][2], "hot_index_bytes", 2**30, "hot index (GiB); line: memory", memory / 2**30),
        (axes[1][0], "retention_core_share", 1, "retention: share of one core", CORE_BUDGET),
        (
            axes[1][1],
            "claim_wal_bytes_per_day",
            2**30,
            "WAL/day (GiB): claims; dotted: retention",
            None,
        ),
        (axes[1][2], "claim_latency_seconds", 1e-3, "projected claim latency (ms)", None),
    ]
    for ax, key, unit, label, limit in panels:
        for color, design in enumerate(DESIGNS):

            def at(rate: float, key: str = key, unit: float = unit, design: Any = design) -> float:
                return float(getattr(project(design, rate, WINDOW, measured, memory), key)) / unit

            ax.plot(CURVE, [at(r) for r in CURVE], color=f"C{color}", label=design.name)
            ax.plot(RATES, [at(r) for r in RATES], color=f"C{color}", marker="o", linestyle="none")
            if key == "claim_wal_bytes_per_day":
                retention = [at(r, "retention_wal_bytes_per_day") for r in CURVE]
                ax.plot(CURVE, retention, color=f"C{color}", linestyle=":")
        if limit is not None:
            ax.axhline(limit, color="black", linewidth=0.8, linestyle="--")
        ax.set_xscale("log")
        if key != "claim_latency_seconds":
            ax.set_yscale("log")
        ax.set_xlabel("messages/s (14-day window)")
        ax.set_ylabel(label)
        ax.legend(fontsize="small")
    rows = f"{results['rows']:,}"
    figure.suptitle(f"The 10^9-row design: PostgreSQL measured up to {rows} rows, projected")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    pyplot.close(figure)
    return path


def _latency(ax: Any, results: Mapping[str, Any], points: Any) -> None:
    a, b = fit_latency(points)
    growth = results["growth"]
    xs = [g["rows"] for g in growth]
    ax.plot(xs, [g["single_claim"]["median_s"] * 1e3 for g in growth], "o", label="median")
    ax.plot(xs, [y * 1e3 for _, y in points], "^", label="ratio to reference x its median")
    ax.plot(xs, [g["single_claim"]["p99_s"] * 1e3 for g in growth], "x", label="p99")
    line = [min(xs) / 100, 1e10]
    ax.plot(line, [(a + b * math.log10(x)) * 1e3 for x in line], "--", label="fit (model)")
    for name, part in results["partitions"].items():
        summary = part["summary"]
        ax.plot(
            [max(summary["hot_partition_rows"], 1)],
            [summary["claim_median_s"] * 1e3],
            "s",
            label=f"{name} partitions",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows in the table the claim inserts into")
    ax.set_ylabel("claim transaction latency (ms)")
    ax.set_title("measured")
    ax.legend(fontsize="small")
