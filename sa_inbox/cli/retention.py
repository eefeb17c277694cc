"""``sa-inbox purge`` and ``sa-inbox partitions``: retention from the command line.

- ``sa-inbox purge --url URL --max-redelivery 1d --max-replay 7d``: delete processed-message
  rows older than the policy's window (or ``--older-than``, if longer) in batches, with a
  progress bar; ``--store`` purges the inbox store's ``done`` rows instead (and ``dead``
  rows with ``--dead-older-than``).
- ``sa-inbox partitions maintain --url URL --table T --max-redelivery 1d ...``: create the
  PostgreSQL partitions of the window and ahead, drop those wholly outside the window.
- ``sa-inbox partitions list --url URL --table T``: the partitions and their ranges.

Durations are a number and a unit: ``90s``, ``15m``, ``12h``, ``7d``, ``2w``.
Exit codes (:mod:`._common`): 0 done; 2 usage error or a window the policy refuses (nothing
deleted); 3 the command could not run (database error).
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import sqlalchemy as sa

from ._common import (
    POSITIVE,
    bind_store,
    connected,
    json_option,
    options,
    require_table,
    setting,
    url_option,
)

if TYPE_CHECKING:
    from ..retention import Batch, PurgeTarget, RetentionPolicy
    from ..retention.partitions import MaintenanceResult, Partition

__all__ = ["Duration", "partitions_group", "purge_command"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
#: The longest duration taken (a century): windows and margins are added to it, and
#: ``datetime`` ends at the year 9999.
_LONGEST = datetime.timedelta(days=36500)


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A duration such as ``90s``, ``15m``, ``12h``, ``7d`` or ``2w``, as a timedelta, of
    ``minimum`` at least.

    (``click.ParamType`` is generic only in newer click releases, hence the ignore.)
    """

    name = "duration"

    def __init__(self, minimum: datetime.timedelta = datetime.timedelta(0)) -> None:
        self.minimum = minimum

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime.timedelta:
        if isinstance(value, datetime.timedelta):
            return value
        match = _DURATION.match(str(value))
        if match is None:
            self.fail(f"{value!r} is not a duration like 90s, 15m, 12h, 7d or 2w", param, ctx)
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        if seconds > _LONGEST.total_seconds():
            self.fail(f"{value!r} is longer than {_LONGEST.days} days", param, ctx)
        if seconds < self.minimum.total_seconds():
            self.fail(f"{value!r} is shorter than {_shown(self.minimum)}", param, ctx)
        return datetime.timedelta(seconds=seconds)


DURATION = Duration()


def _shown(duration: datetime.timedelta) -> str:
    """``duration`` in the largest unit that writes it whole (``1m``, ``90s``)."""
    seconds = duration.total_seconds()
    for unit, size in sorted(_UNITS.items(), key=lambda item: -item[1]):
        if seconds and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


#: ``--max-redelivery``, ``--max-replay`` and ``--margin``: the retention policy.
_policy_settings = options(
    click.option(
        "--max-redelivery",
        type=DURATION,
        required=True,
        help="Longest time the broker redelivers an unacked message.",
    ),
    click.option(
        "--max-replay",
        type=DURATION,
        required=True,
        help="Longest time the broker keeps old messages for replay (Kafka retention.ms, "
        "SQS retention period, a stream's max-age); 0s only if messages are never replayed.",
    ),
    setting("--margin", "1h", DURATION, "Safety margin on top (clock skew, consumer lag)."),
)


def _policy_options(command: Callable[..., None]) -> Callable[..., None]:
    """The retention policy's options, handed to ``command`` as one ``policy``
    (:class:`~sa_inbox.retention.RetentionPolicy`); a policy it refuses is a usage error."""

    @functools.wraps(command)
    def with_policy(
        *,
        max_redelivery: datetime.timedelta,
        max_replay: datetime.timedelta,
        margin: datetime.timedelta,
        **arguments: Any,
    ) -> None:
        from ..exc import InboxError
        from ..retention import RetentionPolicy

        try:
            policy = RetentionPolicy(max_redelivery, max_replay=max_replay, margin=margin)
        except InboxError as exc:
            raise click.UsageError(str(exc)) from exc
        command(policy=policy, **arguments)

    return _policy_settings(with_policy)


#: ``--url``, ``--table`` and ``--schema``: the table a command works on.
_target_options = options(
    url_option(),
    click.option("--table", default=None, help="Table name (default: the standard name)."),
    click.option("--schema", default=None, help="Schema of the table."),
)


def _writable_json_path(
    ctx: click.Context, param: click.Parameter, value: Path | None
) -> Path | None:
    """Check ``--json`` can be written before anything is deleted (a click callback).

    :raises click.BadParameter: if the path is a directory, its directory does not exist,
        or the file or its directory is not writable.
    """
    if value is None:
        return None
    parent = value.parent if str(value.parent) else Path(".")
    if value.is_dir():
        problem = "is a directory"
    elif not parent.is_dir():
        problem = f"its directory {str(parent)!r} does not exist"
    elif not os.access(value if value.exists() else parent, os.W_OK):
        problem = "is not writable"
    else:
        return value
    raise click.BadParameter(f"cannot write {str(value)!r}: {problem}", ctx, param)


@click.command("purge")
@_target_options
@_policy_options
@click.option(
    "--older-than",
    type=DURATION,
    default=None,
    help="Delete rows older than this (at least the policy's window; default: the window).",
)
@click.option("--store", is_flag=True, help="Purge the inbox store's done rows instead.")
@click.option(
    "--dead-older-than",
    type=DURATION,
    default=None,
    help="With --store: also delete dead rows received longer ago than this (their received_at; "
    "default: keep them).",
)
@setting("--batch-size", 5000, POSITIVE, "Rows per transaction, at most.")
@json_option(
    "Also write the figures (rows, batches, longest batch) to this JSON file "
    "(checked before anything is deleted).",
    callback=_writable_json_path,
)
def purge_command(
    url: str,
    table: str | None,
    schema: str | None,
    policy: RetentionPolicy,
    older_than: datetime.timedelta | None,
    store: bool,
    dead_older_than: datetime.timedelta | None,
    batch_size: int,
    json_path: Path | None,
) -> None:
    """Delete rows older than the retention window, in short batches, with a progress bar.

    The window is at least --max-redelivery + --max-replay + --margin: a shorter
    --older-than is refused and nothing is deleted.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from .. import retention
    from ..exc import InboxError

    if dead_older_than is not None and not store:
        raise click.UsageError("--dead-older-than needs --store")
    try:
        window = retention.resolve_window(older_than or policy, policy)
        dead_window = None
        if dead_older_than is not None:
            dead_window = retention.resolve_window(dead_older_than, policy)
    except InboxError as exc:
        raise click.UsageError(str(exc)) from exc

    console = Console(stderr=True)
    batches: list[retention.Batch] = []
    started = time.perf_counter()

    def purge_with_progress(engine: sa.Engine) -> int:
        plan = _purge_plan(engine, table, schema, store, policy, window, dead_window, batch_size)
        expected = sum(
            retention.count_expired(engine, target, older) for target, older in plan.counted
        )
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            task = progress.add_task(f"purging {plan.table.fullname}", total=expected or None)

            def on_batch(batch: retention.Batch) -> None:
                batches.append(batch)
                progress.update(task, advance=batch.rows)

            return plan.run(on_batch)

    with connected(url, "purge failed") as db:
        deleted = db.call(purge_with_progress, db.engine)
    elapsed = time.perf_counter() - started
    figures = _figures(deleted, batches, elapsed, window)
    click.echo(
        f"deleted {figures['rows']} rows in {figures['batches']} batches "
        f"(longest {figures['longest_batch_seconds'] * 1000:.0f} ms) in {elapsed:.1f} s"
    )
    if json_path is not None:
        json_path.write_text(json.dumps(figures, indent=2) + "\n")


@dataclass(frozen=True)
class _PurgePlan:
    """What ``sa-inbox purge`` deletes, and how.

    :param table: the table purged (named by the progress bar).
    :param counted: each target the purge deletes from, with its window: counted with
        :func:`~sa_inbox.retention.count_expired` for the progress bar's total.
    :param run: runs the purge with an ``on_batch`` callback; returns the rows deleted.
    """

    table: sa.Table
    counted: list[tuple[PurgeTarget, datetime.timedelta]]
    run: Callable[[Callable[[Batch], None]], int]


def _purge_plan(
    engine: sa.Engine,
    table: str | None,
    schema: str | None,
    store: bool,
    policy: RetentionPolicy,
    window: datetime.timedelta,
    dead_window: datetime.timedelta | None,
    batch_size: int,
) -> _PurgePlan:
    """The purge of the inbox store (``--store``) or of a table, with the targets it deletes
    from as :mod:`sa_inbox.retention` defines them (a store's table named by ``--table``
    without ``--store`` is purged, and counted, by its ``done`` rows).

    :raises CannotRun: (exit 3) if the table does not exist.
    """
    from .. import retention

    if store:
        from ..store import DEFAULT_STORE_TABLE

        inbox_store = bind_store(engine, table or DEFAULT_STORE_TABLE, schema)
        done, dead = retention.store_purge_targets(inbox_store)
        counted = [(done, window)] + ([] if dead_window is None else [(dead, dead_window)])

        def run_store(on_batch: Callable[[Batch], None]) -> int:
            result = retention.purge_store(
                engine,
                inbox_store,
                older_than=window,
                policy=policy,
                dead_older_than=dead_window,
                batch_size=batch_size,
                on_batch=on_batch,
            )
            return result.total

        return _PurgePlan(inbox_store.table, counted, run_store)

    from ..schema import DEFAULT_TABLE_NAME

    require_table(engine, table or DEFAULT_TABLE_NAME, schema, "table")
    reflected = sa.Table(
        table or DEFAULT_TABLE_NAME, sa.MetaData(), schema=schema, autoload_with=engine
    )

    def run(on_batch: Callable[[Batch], None]) -> int:
        return retention.purge(
            engine,
            older_than=window,
            policy=policy,
            table=reflected,
            batch_size=batch_size,
            on_batch=on_batch,
        )

    return _PurgePlan(reflected, [(retention.purge_target_of(reflected), window)], run)


def _figures(
    deleted: int, batches: list[Any], elapsed: float, window: datetime.timedelta
) -> dict[str, Any]:
    longest = max((batch.seconds for batch in batches), default=0.0)
    return {
        "rows": deleted,
        "batches": len(batches),
        "longest_batch_seconds": round(longest, 6),
        "seconds": round(elapsed, 3),
        "rows_per_second": round(deleted / elapsed, 1) if elapsed > 0 else None,
        "window_seconds": window.total_seconds(),
    }


@click.group("partitions")
def partitions_group() -> None:
    """PostgreSQL time partitions of the processed-messages table."""


def _partitioned_table(engine: Any, table: str | None, schema: str | None) -> Any:
    """The partitioned table named by ``--table``, reflected.

    :raises click.UsageError: (exit 2) if the database is not PostgreSQL.
    :raises CannotRun: (exit 3) if the table does not exist.
    :raises click.BadParameter: (exit 2) if the table is not partitioned.
    """

    from ..retention.partitions import partition_key_definition
    from ..schema import DEFAULT_TABLE_NAME

    if engine.dialect.name != "postgresql":
        raise click.UsageError("time partitions are a PostgreSQL feature")
    name = table or DEFAULT_TABLE_NAME
    require_table(engine, name, schema, "table")
    reflected = sa.Table(name, sa.MetaData(), schema=schema, autoload_with=engine)
    with engine.connect() as conn:
        if partition_key_definition(conn, reflected) is None:
            raise click.BadParameter(
                f"table {reflected.fullname!r} is not partitioned: create it with "
                "sa_inbox.retention.partitions.partitioned_processed_messages_table()",
                param_hint="--table",
            )
    return reflected


@partitions_group.command("maintain")
@_target_options
@_policy_options
@setting("--interval", "1d", Duration(datetime.timedelta(minutes=1)), "Width (1m at least).")
@setting("--ahead", "7d", DURATION, "Create partitions ahead.")
def maintain_command(
    url: str,
    table: str | None,
    schema: str | None,
    policy: RetentionPolicy,
    interval: datetime.timedelta,
    ahead: datetime.timedelta,
) -> None:
    """Create the partitions of the window and ahead; drop those wholly outside the window.

    Refuses (exit 2, nothing changed) a table partitioned by arrival time.
    """

    from ..exc import UnsafePartitionKey
    from ..retention.partitions import maintain_partitions

    def maintain(engine: sa.Engine) -> MaintenanceResult:
        parent = _partitioned_table(engine, table, schema)
        return maintain_partitions(engine, parent, policy=policy, interval=interval, ahead=ahead)

    with connected(url, "partition maintenance failed") as db:
        try:
            result = db.call(maintain, db.engine)
        except UnsafePartitionKey as exc:
            raise click.UsageError(str(exc)) from exc
    click.echo(f"created {len(result.created)}: {', '.join(result.created) or '-'}")
    click.echo(f"dropped {len(result.dropped)}: {', '.join(result.dropped) or '-'}")


@partitions_group.command("list")
@_target_options
def list_command(url: str, table: str | None, schema: str | None) -> None:
    """The partitions of the table and their ranges, oldest first (one per line)."""

    from ..retention.partitions import list_partitions

    def listed(engine: sa.Engine) -> list[Partition]:
        parent = _partitioned_table(engine, table, schema)
        with engine.connect() as conn:
            return list_partitions(conn, parent)

    with connected(url, "could not list partitions") as db:
        partitions = db.call(listed, db.engine)
    for partition in partitions:
        click.echo(
            f"{partition.name}\t{partition.lower.isoformat()}\t{partition.upper.isoformat()}"
        )
