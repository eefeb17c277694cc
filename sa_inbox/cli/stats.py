"""``sa-inbox stats``: what the inbox is doing, from the database, and a health check.

Prints :func:`sa_inbox.stats.collect`'s sample as a rich report, or JSON with ``--json``;
``--watch`` refreshes it every ``--interval`` seconds. Warnings
(:func:`sa_inbox.stats.stats_warnings`, which lists them) are printed with the report; with
``--check`` every failing check is printed on one stderr line and the exit status is the
lowest warning's code (:data:`sa_inbox.stats.WARNING_CODES`, 9-21; 0 for none), for a probe
or a cron job, and 3 when the database cannot be read (as every command). Without
``--check``, a report that found none of its tables (a wrong database or table names)
exits 3 too.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import signal
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from ._common import SECONDS, CannotRun, connected, setting, url_option
from .retention import DURATION

if TYPE_CHECKING:
    from collections.abc import Iterator

    import sqlalchemy as sa
    from rich.console import RenderableType

    from ..brokers.dead_letters import DeadLetterTarget
    from ..replication import ReplicationState
    from ..stats import DeadLetterQueueStats, InboxStats, OutboxStats, StatsWarning

__all__ = ["render", "stats_command"]


@click.command("stats")
@url_option()
@setting(
    "--table", "inbox_processed_messages", None, "The processed-messages table ('' to skip it)."
)
@setting("--store-table", "inbox_store", None, "The inbox store's table ('' to skip it).")
@setting(
    "--outbox-table",
    "outbox_messages",
    None,
    "The outbox's table, read when it exists ('' to skip it).",
)
@click.option("--schema", default=None, help="The tables' schema.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the sample and warnings).")
@click.option(
    "--exact",
    is_flag=True,
    help="Count every row, however large the table (a full scan); without it, a large "
    "processed-messages table is estimated and sampled (printed with ~).",
)
@click.option("--watch", is_flag=True, help="Refresh in place every --interval seconds.")
@setting("--interval", 2.0, SECONDS, "Seconds between refreshes, for --watch.")
@click.option("--check", is_flag=True, help="Exit non-zero for a warning (see the help).")
@click.option(
    "--retention",
    type=DURATION,
    default=None,
    help="The purge's retention window (e.g. 7d): warn when the oldest row is older "
    "than it plus --margin.",
)
@setting("--margin", "1h", DURATION, "Slack on top of --retention before the oldest row warns.")
@setting(
    "--pending-threshold",
    "5m",
    DURATION,
    "Warn when the oldest pending store (or outbox) row is older.",
)
@click.option(
    "--dead-letters",
    "dead_letter_targets",
    multiple=True,
    callback=lambda ctx, param, values: _targets(values),
    metavar="URL/QUEUE",
    help="A broker dead-letter queue / stream to count, the name as the URL's last path "
    "segment (amqp://host/%2F/payments.dead-letter, redis://host/0/payments:dead, "
    "nats://host/PAYMENTS_DEAD); repeatable.",
)
@click.option(
    "--broker-timeout",
    type=SECONDS,
    default=5.0,
    show_default=True,
    help="Seconds to connect to each --dead-letters broker and for each reply.",
)
def stats_command(
    url: str,
    table: str,
    store_table: str,
    outbox_table: str,
    schema: str | None,
    as_json: bool,
    exact: bool,
    watch: bool,
    interval: float,
    check: bool,
    retention: datetime.timedelta | None,
    margin: datetime.timedelta,
    pending_threshold: datetime.timedelta,
    dead_letter_targets: tuple[DeadLetterTarget, ...],
    broker_timeout: float,
) -> None:
    """Report the inbox's tables: consumers, store backlog, dead letters, collisions, sizes;
    and the broker dead-letter queues of --dead-letters.

    Exit codes with --check: 0 healthy, 9 no table found, 10 purge not running, 11 dead
    letters, 12 worker stuck, 13 collisions, 14 a synchronous standby is missing (commits
    hang), 15 standbys but none synchronous, 16 whether a standby is synchronous cannot be
    told (the role lacks pg_read_all_stats) (14-16 PostgreSQL), 17 dead outbox rows, 18
    relay stuck (the oldest pending outbox row is older than --pending-threshold), 19 a
    renamed consumer (a new name claiming ids an old one had claimed), 20 a --dead-letters
    queue / stream holds dead letters, 21 one cannot be read (broker unreachable, queue
    missing); 3 the database cannot be read, or (without --check) none of the tables
    exists. When several checks fail, every one is
    printed (in the report, and on stderr as one line naming each code) and the exit
    status is the lowest of their codes.
    """
    from ..stats import collect, stats_warnings

    def sample(engine: sa.Engine) -> tuple[InboxStats, list[StatsWarning]]:
        stats = db.call(
            collect,
            engine,
            inbox_table=table or None,
            store_table=store_table or None,
            schema=schema,
            outbox_table=outbox_table or None,
            exact=exact,
        )
        if dead_letter_targets:  # outside db.call: not on an async driver's event loop
            stats = replace(stats, dead_letter_queues=_count(dead_letter_targets, broker_timeout))
        found = stats_warnings(
            stats, retention=retention, margin=margin, pending_threshold=pending_threshold
        )
        return stats, found

    with connected(url, "cannot read the inbox's tables") as db:
        if watch and not as_json:
            stats, found = _watch(lambda: sample(db.engine), interval)
        else:
            stats, found = sample(db.engine)
            _print(stats, found, as_json)
    if check and found:
        click.get_current_context().exit(_failed(found))
    nothing = [w.text for w in found if w.kind == "no-tables"]
    if nothing and not watch:
        raise CannotRun(nothing[0])


def _failed(found: list[StatsWarning]) -> int:
    """Say every failing check on stderr (the exit status can only carry one); return the
    lowest code, the exit status."""
    ordered = sorted(found, key=lambda w: w.code)
    listed = ", ".join(f"{w.code} {w.kind}" for w in ordered)
    click.echo(
        f"stats --check: {len(ordered)} check(s) failed: {listed}; exit {ordered[0].code} "
        "(the lowest)",
        err=True,
    )
    return ordered[0].code


def _targets(values: tuple[str, ...]) -> tuple[DeadLetterTarget, ...]:
    """The ``--dead-letters`` values parsed (exit 2 for one that names no queue / stream or
    no supported broker)."""
    if not values:
        return ()
    from ..brokers.dead_letters import DeadLetterTarget
    from ..exc import InvalidArgument, UnsupportedBroker

    try:
        return tuple(DeadLetterTarget.parse(value) for value in values)
    except (InvalidArgument, UnsupportedBroker) as exc:
        raise click.BadParameter(str(exc), param_hint="--dead-letters") from exc


def _count(targets: tuple[DeadLetterTarget, ...], timeout: float) -> list[DeadLetterQueueStats]:
    from ..brokers.dead_letters import sample
    from ..exc import InvalidArgument

    try:
        return sample(targets, timeout=timeout)
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc), param_hint="--broker-timeout") from exc


def _print(stats: InboxStats, found: list[StatsWarning], as_json: bool) -> None:
    if as_json:
        document = stats.as_dict()
        document["warnings"] = [{"code": w.code, "kind": w.kind, "text": w.text} for w in found]
        click.echo(json.dumps(document, default=str))
        return
    from rich.console import Console

    Console().print(render(stats, found))


def _watch(sample: Any, interval: float) -> Any:
    """Refresh the report in place until Ctrl-C; return the last sample."""
    from rich.live import Live

    last = sample()
    click.echo(f"sa-inbox stats: refreshing every {interval} s, Ctrl-C to stop", err=True)
    with _interruptible() as interrupted, Live(render(*last), refresh_per_second=4) as live:
        while not _sleep(interval, interrupted):
            last = sample()
            live.update(render(*last))
    return last


@contextlib.contextmanager
def _interruptible() -> Iterator[list[bool]]:
    """SIGINT sets the flag yielded (a second one raises KeyboardInterrupt) instead of raising
    wherever the main thread is: a KeyboardInterrupt between a lock's acquire and its ``with``
    block leaves the lock held, and rich's refresh thread then never ends (Python docs,
    "signal": handlers run between bytecode instructions)."""
    interrupted = [False]

    def handler(signum: int, frame: Any) -> None:
        if interrupted[0]:
            raise KeyboardInterrupt
        interrupted[0] = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def _sleep(seconds: float, interrupted: list[bool]) -> bool:
    """Sleep ``seconds`` (less once ``interrupted[0]`` is set); whether it was."""
    deadline = time.monotonic() + seconds
    while not interrupted[0] and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.1))
    return interrupted[0]


def render(stats: InboxStats, found: list[StatsWarning]) -> RenderableType:
    """The rich report of a sample and its warnings."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = [
        Text(f"sa-inbox on {stats.backend}, at {stats.taken_at}", style="bold")
    ]
    consumers = Table("consumer", "rows", "oldest", "newest", "collisions", title="Consumers")
    for c in stats.consumers:
        consumers.add_row(
            c.consumer_name,
            *(
                _marked(getattr(c, name), name in c.estimated)
                for name in ("rows", "oldest", "newest")
            ),
            str(c.collisions),
        )
    parts.append(consumers)
    if stats.store is not None:
        store = stats.store
        statuses = Table(
            "consumer",
            "pending",
            "processing",
            "done",
            "dead",
            "oldest pending (s)",
            title=f"Store {store.table}",
        )
        for s in store.consumers:
            age = "-" if s.oldest_pending_seconds is None else f"{s.oldest_pending_seconds:.1f}"
            statuses.add_row(
                s.consumer_name,
                *(str(s.counts.get(k, 0)) for k in ("pending", "processing", "done", "dead")),
                age,
            )
        parts.append(statuses)
        attempts = Table("attempts", "unfinished rows", title="Attempts (not done)")
        for made, count in sorted(store.attempts.items()):
            attempts.add_row(str(made), str(count))
        parts.append(attempts)
        if store.dead_letters:
            dead = Table(
                "id",
                "message id",
                "consumer",
                "attempts",
                "last error",
                title="Dead letters (newest)",
            )
            for d in store.dead_letters:
                dead.add_row(
                    str(d.id),
                    d.message_id,
                    d.consumer_name,
                    str(d.attempts),
                    (d.last_error or "")[:120],
                )
            parts.append(dead)
    if stats.outbox is not None:
        parts.append(_outbox(stats.outbox))
    if stats.replication is not None:
        parts.append(_replication(stats.replication))
    if stats.dead_letter_queues:
        parts.append(_dead_letter_queues(stats.dead_letter_queues))
    sizes = Table("table", "rows", "data bytes", "index bytes", title="Tables")
    for t in stats.tables:
        sizes.add_row(
            t.name, _marked(t.rows, t.estimated), _or_dash(t.data_bytes), _or_dash(t.index_bytes)
        )
    parts.append(sizes)
    if stats.estimated:
        parts.append(
            Text(
                f"~ estimated: the planner's statistics and {stats.sampled_rows} index entries "
                "read; sa-inbox stats --exact counts every row",
                style="dim",
            )
        )
    for name in stats.missing:
        parts.append(Text(f"table {name} does not exist", style="yellow"))
    for w in found:
        parts.append(Text(f"WARNING [{w.code} {w.kind}] {w.text}", style="bold red"))
    if not found:
        parts.append(Text("no warnings", style="green"))
    return Group(*parts)


def _outbox(outbox: OutboxStats) -> RenderableType:
    """The outbox table: one row per destination."""
    from rich.table import Table

    statuses = ("pending", "processing", "dispatched", "dead")
    table = Table("destination", *statuses, "oldest pending (s)", title=f"Outbox {outbox.table}")
    for d in outbox.destinations:
        age = "-" if d.oldest_pending_seconds is None else f"{d.oldest_pending_seconds:.1f}"
        table.add_row(d.destination, *(str(d.counts.get(k, 0)) for k in statuses), age)
    return table


def _dead_letter_queues(queues: list[DeadLetterQueueStats]) -> RenderableType:
    """The broker dead letters table: one row per ``--dead-letters`` queue / stream."""
    from rich.table import Table

    table = Table("queue", "dead letters", title="Broker dead letters")
    for q in queues:
        table.add_row(
            q.queue, f"cannot read: {q.error}" if q.dead_letters is None else str(q.dead_letters)
        )
    return table


def _replication(state: ReplicationState) -> RenderableType:
    """The replication table: one row per connected standby."""
    from rich.table import Table

    role = "standby" if state.in_recovery else "primary"
    title = (
        f"Replication ({role}; synchronous_standby_names = "
        f"'{state.synchronous_standby_names}', synchronous_commit = {state.synchronous_commit})"
    )
    table = Table("standby", "state", "sync_state", title=title)
    for s in state.standbys:
        table.add_row(*(value or "?" for value in (s.application_name, s.state, s.sync_state)))
    return table


def _marked(value: object, estimated: bool) -> str:
    """``value`` as text, with ``~`` in front if it is an estimate."""
    return f"~{value}" if estimated else str(value)


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
