"""Turn the benchmarks' JSON into Markdown tables and PNG plots (``sa-inbox bench report``).

Reads every ``<scenario>-<backend>.json`` in a directory and writes, next to them,
``report.md`` (one table per scenario, all backends) and one PNG per scenario.
Plots are drawn with matplotlib's non-interactive Agg backend (no display needed).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._optional import optional_dependencies
from .store_drain import peers_of

__all__ = ["load_results", "markdown", "write_report"]

BACKEND_ORDER = ("sqlite", "postgresql", "mariadb", "mysql", "oracle")

Document = Mapping[str, Any]


def load_results(directory: Path) -> dict[str, list[Document]]:
    """scenario -> its JSON documents (one per backend), in :data:`BACKEND_ORDER`.

    :raises FileNotFoundError: if ``directory`` holds no benchmark JSON.
    :raises sa_inbox.exc.MissingExtra: without matplotlib (the ``bench`` extra).
    """
    found: dict[str, list[Document]] = defaultdict(list)
    for path in sorted(directory.glob("*.json")):
        document = json.loads(path.read_text())
        if isinstance(document, dict) and {"scenario", "backend", "results"} <= document.keys():
            found[document["scenario"]].append(document)
    if not found:
        raise FileNotFoundError(f"no benchmark JSON in {directory}")
    for documents in found.values():
        documents.sort(key=_backend_rank)
    return dict(found)


def _backend_rank(document: Document) -> int:
    name = document["backend"]
    return BACKEND_ORDER.index(name) if name in BACKEND_ORDER else len(BACKEND_ORDER)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _f(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


# -- Markdown ----------------------------------------------------------------------------


def _claim_overhead_rows(document: Document) -> list[dict[str, Any]]:
    """The summary recomputed from the cells, so older JSON gets the newer columns too."""
    from .claim_overhead import summary

    return summary(document["results"]["cells"])


def _claim_overhead_md(documents: Sequence[Document]) -> str:
    from .claim_overhead import vs_hand

    rows = []
    for d in documents:
        for r in _claim_overhead_rows(d):
            paired = "-"
            if "paired_ratio" in r:
                spread = f"{r['paired_ratio_min']:.2f}-{r['paired_ratio_max']:.2f}"
                paired = f"**{r['paired_ratio']:.2f}** ({spread})"
            rows.append(
                [
                    d["backend"],
                    str(r["workers"]),
                    r["layer"],
                    _f(r.get("paired_plain_median_us"), ".0f"),
                    _f(r.get("paired_claim_median_us"), ".0f"),
                    paired,
                    _f(r["plain_us_per_message"], ".0f"),
                    _f(r["claim_us_per_message"], ".0f"),
                    f"{r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})",
                    _f(r["claim_per_second"], ".0f"),
                    vs_hand(r),
                    str(r["repeats"]),
                ]
            )
    header = [
        "backend", "workers", "layer", "paired µs without", "paired µs with",
        "paired ratio (min-max)", "wall µs/msg without", "wall µs/msg with",
        "wall ratio (min-max)", "msg/s with", "async claim / hand-written (paired)", "runs",
    ]  # fmt: skip
    return _md_table(header, rows)


def _batch_claim_md(documents: Sequence[Document]) -> str:
    rows = [
        [
            d["backend"],
            str(r["batch_size"]),
            _f(r["per_second"], ",.0f"),
            _f(r["us_per_message"], ".1f"),
            _f(r["speedup"], ".1f"),
            str(r["repeats"]),
        ]
        for d in documents
        for r in d["results"]["summary"]
    ]
    return _md_table(["backend", "batch size", "msg/s", "µs/msg", "x batch 1", "runs"], rows)


def _index_hotspots_md(documents: Sequence[Document]) -> str:
    rows = []
    for d in documents:
        for r in d["results"]["summary"]:
            splits = r.get("index_page_splits")
            waits = ", ".join(f"{k} {v}" for k, v in r["top_waits"].items()) or "-"
            rows.append(
                [
                    d["backend"],
                    str(r["workers"]),
                    r["pk_order"],
                    r["key_format"],
                    _f(r["per_second"], ".0f"),
                    _f(r["latency_p95_us"], ".0f"),
                    _f(None if r["index_bytes"] is None else r["index_bytes"] / 1024, ".0f"),
                    _f(r["leaf_density_pct"], ".1f"),
                    _f(splits, ".0f"),
                    waits,
                ]
            )
    header = [
        "backend", "writers", "PK order", "key", "claims/s", "p95 µs", "PK KiB",
        "leaf fill %", "page splits", "waits sampled (sessions x samples)",
    ]  # fmt: skip
    return _md_table(header, rows)


def _growth_md(documents: Sequence[Document]) -> str:
    mib = 1024 * 1024
    rows = [
        [
            d["backend"],
            f"{d['results']['rows']:,}",
            f"**{d['results']['bytes_per_row']:.0f}**",
            f"{d['results']['table_bytes_per_row']:.0f}",
            f"{d['results']['index_bytes_per_row']:.0f}",
            f"{d['results']['total_bytes'] / mib:.0f}",
        ]
        for d in documents
    ]
    header = ["backend", "rows", "bytes/row", "table bytes/row", "index bytes/row", "total MiB"]
    return _md_table(header, rows)


def _purge_md(documents: Sequence[Document]) -> str:
    rows = [
        [
            d["backend"],
            f"{d['results']['rows']:,}",
            f"{d['results']['expired_rows']:,}",
            f"{d['results']['batch_size']:,}",
            _f(d["results"]["summary"]["rows_per_second"], ",.0f"),
            _f(d["results"]["summary"]["longest_batch_seconds"] * 1000, ".0f"),
            _f(d["results"]["summary"]["median_batch_seconds"] * 1000, ".0f"),
            str(len(d["results"]["runs"])),
        ]
        for d in documents
    ]
    header = [
        "backend",
        "rows",
        "deleted",
        "batch",
        "rows deleted/s",
        "longest batch ms",
        "median batch ms",
        "runs",
    ]
    return _md_table(header, rows)


def _store_drain_md(documents: Sequence[Document]) -> str:
    peers = peers_of([r for d in documents for r in d["results"]["summary"]])
    rows = [
        [
            d["backend"],
            r.get("handler", "effect"),
            str(r["workers"]),
            r.get("contender", "message"),
            f"{d['results']['messages']:,}",
            _f(r["drain_per_second"], ",.0f"),
            " / ".join(f"{x:,.0f}" for x in r["drain_runs_per_second"]),
            _f(r.get("x_message"), ".1f"),
            *(_f(r.get(f"x_{peer}"), ".1f") for peer in peers),
            _f(r["receive_per_second"], ",.0f"),
        ]
        for d in documents
        for r in d["results"]["summary"]
    ]
    header = [
        "backend", "handler", "workers", "contender", "messages", "drain msg/s", "drain runs",
        "batch / message", *(f"batch / {peer}" for peer in peers), "receive msg/s",
    ]  # fmt: skip
    single = [
        [
            d["backend"],
            f"{d['results']['receive_vs_claim_summary']['messages']:,.0f}",
            _f(d["results"]["receive_vs_claim_summary"]["receive_median_us"], ".0f"),
            _f(d["results"]["receive_vs_claim_summary"]["claim_median_us"], ".0f"),
            _f(d["results"]["receive_vs_claim_summary"]["ratio"], ".2f"),
        ]
        for d in documents
    ]
    single_header = ["backend", "messages", "receive µs", "claim µs", "receive / claim"]
    return _md_table(header, rows) + "\n\n" + _md_table(single_header, single)


_MARKDOWN: dict[str, Callable[[Sequence[Document]], str]] = {
    "claim_overhead": _claim_overhead_md,
    "batch_claim": _batch_claim_md,
    "index_hotspots": _index_hotspots_md,
    "growth": _growth_md,
    "purge": _purge_md,
    "store_drain": _store_drain_md,
}


def _run_line(scenario: str, document: Document) -> str:
    """Server, CPUs, the options that matter for ``scenario``, and when it finished."""
    config = document["config"]
    server = str(document["server"]).split(" on ")[0]  # PostgreSQL's version() is long
    if scenario in ("growth", "purge"):
        options = f"rows={config['rows']:,}"
    else:
        options = f"messages={config['messages']}, workers={config['workers']}"
    if scenario != "growth":  # growth fills and measures once
        options += f", repeat={config['repeat']}"
    return f"{server}; {document['machine']['cpus']} CPUs; {options}; {document['finished_at']}"


def markdown(results: Mapping[str, Sequence[Document]]) -> str:
    """``report.md``: per scenario, its label, where it ran, and its table."""
    parts = ["# sa-inbox benchmark report", ""]
    for scenario in _MARKDOWN:
        documents = results.get(scenario)
        if not documents:
            continue
        parts += [f"## {documents[0]['label']}", ""]
        for d in documents:
            parts.append(f"- {d['backend']}: {_run_line(scenario, d)}")
        parts += ["", _MARKDOWN[scenario](documents), "", f"![{scenario}]({scenario}.png)", ""]
    return "\n".join(parts)


# -- plots -------------------------------------------------------------------------------


def _claim_overhead_plot(documents: Sequence[Document], axes_row: Any) -> None:
    for ax, d in zip(axes_row, documents, strict=True):
        rows = _claim_overhead_rows(d)
        for color, layer in enumerate(dict.fromkeys(r["layer"] for r in rows)):
            picked = [r for r in rows if r["layer"] == layer]
            workers = [r["workers"] for r in picked]
            style = {"color": f"C{color}", "marker": "o"}
            solid = [r.get("paired_ratio", r["latency_ratio"]) for r in picked]
            ax.plot(workers, solid, label=f"{layer}", **style)
            ax.plot(workers, [r["ratio"] for r in picked], linestyle="--", alpha=0.5, **style)
        ax.axhline(1.0, color="grey", linewidth=0.5)
        ax.set_title(d["backend"])
        ax.set_xlabel("concurrent worker processes")
        ax.set_ylabel("with claim / without (solid: paired latency, dashed: wall)")
        ax.legend()


def _batch_claim_plot(documents: Sequence[Document], ax: Any) -> None:
    for d in documents:
        rows = d["results"]["summary"]
        ax.plot(
            [r["batch_size"] for r in rows],
            [r["per_second"] for r in rows],
            marker="o",
            label=d["backend"],
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ids per claim_many() transaction")
    ax.set_ylabel("messages claimed per second")
    ax.legend()


def _index_hotspots_plot(documents: Sequence[Document], axes: Any) -> None:
    for column, d in enumerate(documents):
        rows = d["results"]["summary"]
        top = max(r["workers"] for r in rows)
        formats = list(d["results"]["key_formats"])
        orders = sorted({r["pk_order"] for r in rows})
        width = 0.8 / len(orders)
        for i, order in enumerate(orders):
            picked = {
                r["key_format"]: r for r in rows if r["workers"] == top and r["pk_order"] == order
            }
            xs = [k + i * width for k in range(len(formats))]
            axes[0][column].bar(xs, [picked[f]["per_second"] for f in formats], width, label=order)
            density = [picked[f]["leaf_density_pct"] or 0 for f in formats]
            axes[1][column].bar(xs, density, width, label=order)
        for row, ylabel in ((0, f"claims/s, {top} writers"), (1, "PK leaf fill %")):
            ax = axes[row][column]
            ax.set_xticks([k + width * (len(orders) - 1) / 2 for k in range(len(formats))], formats)
            ax.set_ylabel(ylabel)
            ax.set_title(d["backend"])
            ax.legend(fontsize="small")


def _growth_plot(documents: Sequence[Document], ax: Any) -> None:
    names = [d["backend"] for d in documents]
    table = [d["results"]["table_bytes_per_row"] for d in documents]
    index = [d["results"]["index_bytes_per_row"] for d in documents]
    ax.bar(names, table, label="table (MariaDB: clustered PK)")
    ax.bar(names, index, bottom=table, label="indexes")
    ax.set_ylabel("bytes per row")
    ax.legend()


def _purge_plot(documents: Sequence[Document], ax: Any) -> None:
    names = [d["backend"] for d in documents]
    ax.bar(names, [d["results"]["summary"]["rows_per_second"] for d in documents])
    ax.set_ylabel("rows deleted per second")
    longest = ax.twinx()
    longest.plot(
        names,
        [d["results"]["summary"]["longest_batch_seconds"] * 1000 for d in documents],
        color="black",
        marker="o",
        linestyle="none",
    )
    longest.set_ylabel("longest batch (ms, dots)")


def _store_drain_plot(documents: Sequence[Document], ax: Any) -> None:
    for color, d in enumerate(documents):
        rows = [r for r in d["results"]["summary"] if r.get("handler", "noop") == "noop"]
        styles = {"message": "-", "batch": "--"} | {peer: ":" for peer in peers_of(rows)}
        for contender, linestyle in styles.items():
            mine = [r for r in rows if r.get("contender", "message") == contender]
            if mine:
                ax.plot(
                    [r["workers"] for r in mine],
                    [r["drain_per_second"] for r in mine],
                    label=f"{d['backend']} {contender}",
                    color=f"C{color}",
                    marker="o",
                    linestyle=linestyle,
                )
    ax.set_yscale("log")
    ax.set_xlabel("worker processes")
    ax.set_ylabel("messages/s drained, no-op handler")
    ax.legend()


def _plot(scenario: str, documents: Sequence[Document], path: Path) -> None:
    with optional_dependencies(__name__, "bench", "matplotlib"):
        import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    n = len(documents)
    if scenario == "claim_overhead":
        figure, axes = pyplot.subplots(1, n, figsize=(4.5 * n, 4), squeeze=False)
        _claim_overhead_plot(documents, axes[0])
    elif scenario == "index_hotspots":
        figure, axes = pyplot.subplots(2, n, figsize=(5.5 * n, 7), squeeze=False)
        _index_hotspots_plot(documents, axes)
    else:
        figure, ax = pyplot.subplots(figsize=(6, 4))
        plots = {
            "batch_claim": _batch_claim_plot,
            "purge": _purge_plot,
            "store_drain": _store_drain_plot,
        }
        plots.get(scenario, _growth_plot)(documents, ax)
    figure.suptitle(documents[0]["label"], fontsize="medium")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def write_report(directory: Path) -> list[Path]:
    """Write ``report.md`` and one PNG per scenario into ``directory``.

    :param directory: where the benchmark JSON is (and the report goes).
    :returns: the files written.
    :raises FileNotFoundError: if ``directory`` holds no benchmark JSON.
    """
    results = load_results(directory)
    written = []
    for scenario, documents in results.items():
        if scenario in _MARKDOWN:
            path = directory / f"{scenario}.png"
            _plot(scenario, documents, path)
            written.append(path)
    report = directory / "report.md"
    report.write_text(markdown(results))
    written.append(report)
    return written
