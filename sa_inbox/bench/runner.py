"""The benchmark runner: configuration, the JSON every scenario writes, progress bars.

A scenario is a module of :mod:`sa_inbox.bench` with

* a module docstring, whose first line is the scenario's label;
* ``run(config, progress) -> dict``: measures, checks the business state, and returns
  JSON-able results (raising :class:`~sa_inbox.bench.workers.BenchError` if the state is
  wrong);
* ``table(results) -> rich.table.Table``: the figures to print;
* optionally ``label_for(results) -> str``: the label of this run (e.g. with the sizes it
  measured at), in place of the docstring's for the JSON and the table's title.

:func:`run_scenario` writes ``<out>/<scenario>-<backend>.json``: the results plus the
machine, versions and configuration they were measured with.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import sqlalchemy as sa
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from .db import backend_name, make_engine

__all__ = [
    "DEFAULT_OUT",
    "BenchConfig",
    "Scenario",
    "label_of",
    "make_progress",
    "result_path",
    "run_label",
    "run_scenario",
]

#: Where ``sa-inbox bench`` writes its JSON unless told otherwise (relative to the cwd).
DEFAULT_OUT = Path("bench-results")


class Scenario(Protocol):
    """What a scenario module provides (see the module docstring)."""

    __name__: str
    __doc__: str | None

    def run(self, config: BenchConfig, progress: Progress) -> dict[str, Any]: ...

    def table(self, results: Mapping[str, Any]) -> Table: ...


@dataclass(frozen=True)
class BenchConfig:
    """Options of one ``sa-inbox bench`` run.

    :param url: the database URL (a SQLite file by default).
    :param messages: messages per measured cell (all workers together); ``None`` for each
        scenario's own default (its ``DEFAULT_MESSAGES``).
    :param workers: the most concurrent worker processes; cells run at 1, 2, 4 … ``workers``.
    :param repeat: runs of every cell; the figures quoted are medians over them.
    :param rows: rows the growth scenario inserts before measuring bytes per row.
    :param out: the directory the JSON is written to.
    """

    url: str
    messages: int | None = None
    workers: int = 4
    repeat: int = 3
    rows: int = 1_000_000
    out: Path = DEFAULT_OUT
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The configuration as JSON, the URL's password masked."""
        data = asdict(self)
        data["url"] = sa.make_url(self.url).render_as_string(hide_password=True)
        data["out"] = str(self.out)
        return data


def label_of(item: ModuleType | Callable[..., Any]) -> str:
    """The label of a scenario module or measured function: its docstring's first line."""
    doc = (item.__doc__ or "").strip()
    return doc.splitlines()[0].rstrip(".") if doc else getattr(item, "__name__", "?")


def run_label(module: ModuleType | Scenario, results: Mapping[str, Any]) -> str:
    """The label of one run of ``module``: its ``label_for(results)`` if it has one, else
    :func:`label_of` the module."""
    label_for = getattr(module, "label_for", None)
    if callable(label_for):
        return str(label_for(results))
    return label_of(module)  # type: ignore[arg-type]


def short_name(module: ModuleType | Scenario) -> str:
    """``claim_overhead`` for ``sa_inbox.bench.claim_overhead``."""
    return module.__name__.rsplit(".", 1)[-1]


def make_progress(console: Console) -> Progress:
    """The progress bars every scenario shares."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def _server_version(url: str) -> str:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                return f"SQLite {conn.exec_driver_sql('SELECT sqlite_version()').scalar_one()}"
            if engine.dialect.name == "oracle":
                return str(conn.exec_driver_sql("SELECT banner FROM v$version").scalar())
            return str(conn.exec_driver_sql("SELECT version()").scalar_one())
    finally:
        engine.dispose()


def machine() -> dict[str, Any]:
    """The machine and software the figures were measured on."""
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlalchemy": sa.__version__,
    }


def result_path(config: BenchConfig, scenario: str, backend: str) -> Path:
    """Where a scenario's JSON goes: ``<out>/<scenario>-<backend>.json``."""
    return config.out / f"{scenario}-{backend}.json"


def run_scenario(
    module: Scenario, config: BenchConfig, *, console: Console, progress: Progress
) -> Path:
    """Run one scenario, print its table and write its JSON.

    :returns: the path of the JSON written.
    :raises BenchError: if the scenario failed or its business state was wrong.
    """
    name = short_name(module)
    backend = backend_name(config.url)
    started = datetime.datetime.now(datetime.UTC)
    results = module.run(config, progress)
    label = run_label(module, results)
    document = {
        "scenario": name,
        "label": label,
        "backend": backend,
        "server": _server_version(config.url),
        "machine": machine(),
        "config": config.to_json(),
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "results": results,
    }
    config.out.mkdir(parents=True, exist_ok=True)
    path = result_path(config, name, backend)
    path.write_text(json.dumps(document, indent=2) + "\n")
    table = module.table(results)
    table.title = f"{label} — {backend}"
    console.print(table)
    console.print(f"wrote {path}")
    return path
