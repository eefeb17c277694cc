"""``sa-inbox demo``: replay a payment stream through the inbox and verify the ledger.

The command parses its options and calls :func:`sa_inbox.demo.run_demo` (or, with
``--broker``, the chaos run of :func:`sa_inbox.demo.live.live_config` on the live broker),
imported only when it runs. Exit codes (:mod:`._common`): 0 every payment applied exactly
once, 1 not (the verification failed, as expected with ``--no-inbox``), 2 usage error, 3 the
demo could not run, 130 interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._common import (
    POSITIVE,
    SHARE,
    CannotRun,
    check_url,
    finish,
    json_option,
    setting,
    stop_on_interrupt,
    url_option,
)
from .chaos import check_broker

if TYPE_CHECKING:
    from ..demo import DemoConfig

__all__ = ["demo"]


@click.command("demo")
@setting("--messages", 2000, POSITIVE, "Unique payment messages in the stream.")
@setting("--workers", 4, POSITIVE, "Worker processes consuming the stream.")
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed of the stream (deterministic); random if omitted, and printed.",
)
@setting("--duplicate-rate", 0.1, SHARE, "Share of messages resent by a producer retry.")
@setting(
    "--concurrent-rate", 0.05, SHARE, "Share of messages delivered twice at once, to two workers."
)
@setting(
    "--crash-rate",
    0.02,
    SHARE,
    "Share of deliveries whose worker crashes after the commit, before the ack.",
)
@url_option(
    "Database URL (PostgreSQL, MariaDB/MySQL, a SQLite file), a synchronous driver; the demo "
    "drops and creates its own demo_* tables there. Default: a SQLite file of its own.",
    default=None,
)
@click.option(
    "--db-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="SQLite file to use (default: one in a temporary directory).",
)
@click.option(
    "--no-inbox",
    is_flag=True,
    help="Apply every delivery naively, without the inbox, to show the duplicates "
    "it prevents (the verification then fails: exit code 1).",
)
@click.option(
    "--broker",
    default=None,
    callback=check_broker,
    help="Run the stream through this live broker (amqp://..., redis://..., nats://...) "
    "instead of the in-process one; crashes are real SIGKILLs after the commit.",
)
@json_option("Also write the verification numbers to this JSON file.")
def demo(
    messages: int,
    workers: int,
    seed: int | None,
    duplicate_rate: float,
    concurrent_rate: float,
    crash_rate: float,
    url: str | None,
    db_file: Path | None,
    no_inbox: bool,
    broker: str | None,
    json_path: Path | None,
) -> None:
    """Replay a payment stream at-least-once through the inbox and verify the ledger.

    Duplicates come from producer retries, crashes between commit and ack (the broker
    redelivers), and copies of one message in flight in two worker processes at once.
    Exit code 0 if every payment was applied exactly once, 1 if not. With --broker, the
    stream goes through a live RabbitMQ, Redis Streams or NATS JetStream instead.
    """
    from rich.console import Console

    from ..demo import DemoConfig, DemoError, render, run_demo

    if url is not None and db_file is not None:
        raise click.UsageError("--url and --db-file are exclusive")
    if url is not None:
        check_url(url, sync_only="the demo's workers run on the synchronous core")
    config = DemoConfig(
        messages=messages,
        workers=workers,
        seed=seed,
        duplicate_rate=duplicate_rate,
        concurrent_rate=concurrent_rate,
        crash_rate=crash_rate,
        url=url,
        db_file=db_file,
        use_inbox=not no_inbox,
    ).with_seed()
    if broker is not None:
        _on_broker(config, broker, json_path)
        return
    console = Console()
    mode = (
        "WITHOUT the inbox (naive consumer: the verification is expected to fail)"
        if no_inbox
        else "through the inbox"
    )
    console.print(
        f"sa-inbox demo: {messages} payments, {workers} workers, seed {config.seed}, {mode}"
    )
    try:
        with stop_on_interrupt(console, "workers"):
            verification = run_demo(config, console=Console(stderr=True))
    except DemoError as exc:
        raise CannotRun(str(exc)) from exc
    finish(console, render(verification), verification, json_path)


def _on_broker(config: DemoConfig, broker: str, json_path: Path | None) -> None:
    """The demo on a live broker: the chaos run of :func:`sa_inbox.demo.live.live_config`.

    :raises click.UsageError: with ``--no-inbox`` (the naive consumer runs only in process).
    """
    from ..demo.live import live_config
    from ..demo.run import _database_url
    from .chaos import database_url, run_and_report

    if not config.use_inbox:
        raise click.UsageError("--no-inbox runs only on the in-process broker, not --broker")
    with _database_url(config) as url:
        live = live_config(config, broker, database_url(url))
        run_and_report(live, json_path, title=f"sa-inbox demo on {broker.split('://')[0]}")
