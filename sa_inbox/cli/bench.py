"""``sa-inbox bench``: run benchmark scenarios, build the report, or project table growth.

::

    sa-inbox bench                                  # every scenario (SCENARIOS), on SQLite
    sa-inbox bench claim_overhead --url postgresql+psycopg://… --messages 2000 --workers 4
    sa-inbox bench report                           # bench-results/*.json -> report.md + PNGs
    sa-inbox bench growth --rate 2000 --window 7d   # the calculator, from measured bytes/row

Exit codes (:mod:`._common`): 0 success, 2 usage error, 3 the benchmark could not run
(database unreachable, a worker failed, wrong business state). The scenarios are the modules
of :mod:`sa_inbox.bench`, imported only when they run.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import click

from ..bench import OPTIONAL_SCENARIOS, SCENARIOS
from ._common import POSITIVE, SECONDS, CannotRun, check_url, setting, url_option

__all__ = ["bench"]

REPORT = "report"

#: The command's help, naming every scenario of :data:`sa_inbox.bench.SCENARIOS`.
HELP = f"""Run benchmark SCENARIOs (default: all), print tables and write JSON to --out.

SCENARIO is one of: {", ".join(SCENARIOS)}; {", ".join(OPTIONAL_SCENARIOS)} (only when
named: outbox's relay part needs --broker); or `report` (alone), which turns the JSON
in --out into report.md and PNG plots. `growth --rate R` is the calculator: the rows
and bytes the inbox holds at R messages/s over --window.
"""


@click.command("bench", help=HELP)
@click.argument(
    "names",
    nargs=-1,
    type=click.Choice([*SCENARIOS, *OPTIONAL_SCENARIOS, REPORT]),
    metavar="[SCENARIO]...",
)
@url_option("Database URL. Default: a SQLite file in a temp dir.", default=None)
@click.option(
    "--messages",
    type=POSITIVE,
    default=None,
    help="Messages per measured cell (default: 1000; index_hotspots 2000).",
)
@setting(
    "--workers", 4, POSITIVE, "Most concurrent worker processes; cells run at 1, 2, 4 … WORKERS."
)
@setting("--repeat", 3, POSITIVE, "Runs per cell (medians are reported).")
@setting("--rows", 1_000_000, POSITIVE, "growth, purge: rows in the measured table.")
@setting(
    "--out",
    Path("bench-results"),
    click.Path(file_okay=False, path_type=Path),
    "Directory for the JSON (and for report.md and the PNGs).",
)
@click.option(
    "--rate",
    type=SECONDS,
    default=None,
    help="growth calculator: messages per second.",
)
@setting("--window", "7d", None, "growth calculator: retention window (s, m, h, d, w).")
@setting("--consumers", 1, POSITIVE, "growth calculator: consumers claiming each message.")
@click.option(
    "--figures",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="growth calculator: growth-*.json of your own run (or its directory). "
    "Default: the figures published with sa-inbox.",
)
@click.option("--broker", default=None, help="outbox: the RabbitMQ URL the relays publish to.")
def bench(
    names: tuple[str, ...],
    url: str | None,
    messages: int | None,
    workers: int,
    repeat: int,
    rows: int,
    out: Path,
    rate: float | None,
    window: str,
    consumers: int,
    figures: Path | None,
    broker: str | None,
) -> None:
    """Run benchmark scenarios, build the report, or run the growth calculator (see HELP)."""
    if REPORT in names:
        if len(names) > 1:
            raise click.UsageError("'report' runs alone: sa-inbox bench report [--out DIR]")
        _report(out)
    elif rate is not None:
        if names != ("growth",):
            raise click.UsageError("--rate is for the calculator: sa-inbox bench growth --rate R")
        _calculate(rate, window, consumers, figures)
    else:
        if url is not None:
            check_url(url, sync_only=BENCH_SYNC_ONLY)
        settings: dict[str, Any] = {
            "messages": messages,
            "workers": workers,
            "repeat": repeat,
            "rows": rows,
            "out": out,
            "options": {"broker": broker} if broker else {},
        }
        _run(names or SCENARIOS, url, settings)


#: Why ``sa-inbox bench`` takes a sync driver's URL.
BENCH_SYNC_ONLY = (
    "the scenarios run on the synchronous core (claim_overhead adds the async layer on each "
    "installed async driver of the backend by itself)"
)


def _report(out: Path) -> None:
    from ..bench.report import write_report

    try:
        written = write_report(out)
    except FileNotFoundError as exc:
        raise CannotRun(str(exc)) from exc
    for path in written:
        click.echo(f"wrote {path}")


def _calculate(rate: float, window: str, consumers: int, source: Path | None) -> None:
    from rich.console import Console

    from ..bench.growth import load_figures, parse_window, project, projection_table

    try:
        seconds = parse_window(window)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--window") from exc
    try:
        figures = load_figures(source)
    except (FileNotFoundError, KeyError) as exc:
        raise CannotRun(f"cannot read growth figures: {exc}") from exc
    projections = project(rate, seconds, figures, consumers)
    console = Console()
    console.print(
        f"{rate:g} messages/s x {window} ({seconds:,.0f} s) x {consumers} consumer(s) "
        f"= {projections[0].rows:,} rows in the inbox (before the purge)"
    )
    console.print(projection_table(projections, figures))


def _run(names: tuple[str, ...], url: str | None, settings: dict[str, Any]) -> None:
    """Run the scenarios ``names`` on ``url`` (a temporary SQLite file for None).

    :param settings: the other fields of :class:`~sa_inbox.bench.runner.BenchConfig`.
    :raises CannotRun: (exit 3) if a scenario could not run or left the wrong state.
    """
    from rich.console import Console
    from sqlalchemy.exc import SQLAlchemyError

    from ..bench import scenario
    from ..bench.db import default_sqlite_url
    from ..bench.runner import BenchConfig, make_progress, run_scenario
    from ..bench.workers import BenchError

    console = Console()
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if url is None:
            url = stack.enter_context(default_sqlite_url())
        config = BenchConfig(url=url, **settings)
        console.print(f"sa-inbox bench on {config.to_json()['url']}: {', '.join(names)}")
        try:
            with make_progress(console) as progress:
                for name in names:
                    run_scenario(scenario(name), config, console=console, progress=progress)
        except (BenchError, SQLAlchemyError) as exc:
            raise CannotRun(str(exc)) from exc
    console.print(f"done in {time.perf_counter() - started:.0f} s; JSON in {config.out}")
