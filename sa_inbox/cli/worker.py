"""``sa-inbox worker``: run the inbox store's worker with a handler named on the command line.

Exit codes (:mod:`._common`): 0 success, 2 usage error (a bad ``--handler``, neither
``--consumer`` nor ``--all-consumers``), 3 the command could not run (database unreachable,
store table missing, a :class:`~sa_inbox.exc.ConfigurationError` that stopped the worker).
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from .._signals import on_signals
from ..consumers import owner_name
from ..exc import InvalidHandler
from ..handlers import check_handler, is_async_callable
from ._common import POSITIVE, SECONDS, WAIT, CannotRun, Database, bind_store, connected, setting
from .metrics import metrics_options, serve_metrics
from .store import store_options

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from ..asyncio import AsyncWorker
    from ..store import InboxStore, StoredMessage, Worker

__all__ = ["resolve_handler", "worker_command"]


def resolve_handler(spec: str) -> Callable[..., Any]:
    """The callable named by ``"package.module:function"`` (``"module:obj.method"`` works):
    a plain function, or an ``async def`` one (run by the asyncio worker).

    :raises click.BadParameter: if ``spec`` has no ``:``, the module cannot be imported (or
        raises while it is), the name is missing, the object is not callable, or it cannot
        be called with the two arguments the worker passes (``handler(session, message)``).
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"expected module:function, not {spec!r}", param_hint="--handler")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="--handler"
        ) from exc
    except Exception as exc:  # the module's own code failed while it was imported
        raise click.BadParameter(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}",
            param_hint="--handler",
        ) from exc
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise click.BadParameter(
                f"{module_name!r} has no {attribute!r}", param_hint="--handler"
            )
        target = getattr(target, part)
    if not callable(target):
        raise click.BadParameter(f"{spec!r} is not callable", param_hint="--handler")
    try:
        check_handler(target, ("session", "message"), name=repr(spec), asynchronous=True)
    except InvalidHandler as exc:
        raise click.BadParameter(str(exc), param_hint="--handler") from exc
    return target  # type: ignore[no-any-return]


@click.command("worker")
@store_options
@click.option("--handler", "handler_spec", required=True, help="module:function to call.")
@setting("--batch-size", 10, POSITIVE, "Messages leased at once, per thread (or task).")
@setting("--concurrency", 1, POSITIVE, "Threads (asyncio tasks), each leasing its own batches.")
@setting(
    "--transaction",
    "message",
    click.Choice(["message", "batch"]),
    "One transaction per message, or per leased batch (a failing message still fails "
    "alone; a re-run batch runs its handlers again: for database-only handlers).",
)
@setting(
    "--visibility-timeout",
    300.0,
    SECONDS,
    "Seconds after which an unfinished lease is taken again.",
)
@setting("--max-attempts", 5, POSITIVE, "Attempts before a message is dead.")
@click.option("--ordered", is_flag=True, help="Keep each aggregate's messages in order.")
@setting(
    "--backoff",
    1.0,
    WAIT,
    "Seconds before a failed message's second attempt; doubled for each further one.",
)
@setting("--max-backoff", 300.0, WAIT, "The longest wait in seconds between attempts.")
@setting("--poll-interval", 1.0, SECONDS, "Seconds to wait when nothing is leasable.")
@click.option(
    "--all-consumers",
    is_flag=True,
    help="Process the messages of every consumer (instead of --consumer NAME).",
)
@click.option(
    "--hand-over",
    is_flag=True,
    help="Give --consumer NAME to HANDLER first: a handler renamed or moved since the name's "
    "last run takes over the name and its claims (stop the old handler's workers first).",
)
@click.option(
    "--until-empty",
    is_flag=True,
    help="Exit once nothing of the consumer is pending or processing (failed messages are "
    "retried after their back-off first).",
)
@click.option(
    "--max-messages",
    type=POSITIVE,
    default=None,
    help="Exit after processing this many messages.",
)
@click.option(
    "--max-seconds",
    type=SECONDS,
    default=None,
    help="Stop leasing after this many seconds, finish the message in hand, exit.",
)
@setting(
    "--app-dir",
    ".",
    click.Path(file_okay=False),
    "Directory put first on sys.path to import --handler from (as uvicorn's).",
)
@setting(
    "--log-level",
    "INFO",
    click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    "The lowest level of log lines written to stderr.",
)
@metrics_options
def worker_command(
    url: str,
    table: str,
    schema: str | None,
    consumer: str | None,
    handler_spec: str,
    batch_size: int,
    concurrency: int,
    transaction: str,
    visibility_timeout: float,
    max_attempts: int,
    ordered: bool,
    backoff: float,
    max_backoff: float,
    poll_interval: float,
    all_consumers: bool,
    hand_over: bool,
    until_empty: bool,
    max_messages: int | None,
    max_seconds: float | None,
    app_dir: str,
    log_level: str,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Process the inbox store's messages with HANDLER until SIGTERM/SIGINT.

    The worker runs on the URL's own driver. On an async driver's URL
    (postgresql+asyncpg, postgresql+psycopg_async, mysql+aiomysql, sqlite+aiosqlite) it
    is the asyncio worker: an ``async def`` HANDLER gets an AsyncSession, a plain one the
    sync Session on that driver, run in the worker task's greenlet (a handler that blocks
    on anything but the database holds every --concurrency task). An ``async def``
    HANDLER needs such a URL (or postgresql+psycopg, psycopg 3 being async too): a sync
    driver's URL is refused (exit 2).

    HANDLER is called as handler(session, message) in the transaction that marks the
    message done. On SIGTERM or SIGINT the worker finishes the message in hand, releases
    the rest of its batch and exits 0. Prints the run's summary as JSON at exit
    (processed, retried, dead, lost, released, errors, transient_retries, batch_reruns,
    reaped_dead, reason). A configuration error (a missing table, a handler that cannot
    run) stops it with exit code 3. With --transaction batch, the messages of one leased
    batch are handled in one transaction (see sa_inbox.store.batch).

    Either --consumer NAME or --all-consumers is required: a handler belongs to a
    consumer, and guessing is worse either way. Defaulting to the consumer "default"
    silently processes nothing for a store used with other names; defaulting to every
    consumer would run this handler on other consumers' messages and mark them done,
    which cannot be undone. (store counts and store replay, which only read or reset
    rows, cover every consumer without --consumer, as the library's counts() does.)

    With --metrics-port the worker's metrics (sa_inbox.hooks.prometheus: claims, handler
    failures and seconds, retries, database outages) are served for Prometheus on
    http://--metrics-host:PORT/metrics (the [prometheus] extra).
    """
    from ..exc import ConfigurationError, ConsumerNameTaken
    from ..store import Backoff, Worker

    if (consumer is None) == (not all_consumers):
        raise click.UsageError(
            "name the consumer whose messages HANDLER processes with --consumer NAME, or "
            "pass --all-consumers (exactly one of the two)"
        )
    if hand_over and consumer is None:
        raise click.UsageError("--hand-over gives one consumer name: pass --consumer NAME")
    _put_first_on_path(app_dir)
    handler = resolve_handler(handler_spec)
    asynchronous = is_async_callable(handler)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    options: dict[str, Any] = {
        "consumer_name": consumer,
        "batch_size": batch_size,
        "concurrency": concurrency,
        "transaction": transaction,
        "visibility_timeout": visibility_timeout,
        "max_attempts": max_attempts,
        "ordered": ordered,
        "backoff": Backoff(base=backoff, maximum=max_backoff),
        "poll_interval": poll_interval,
        "hooks": serve_metrics(metrics_port, metrics_host, "worker"),
    }
    limits: dict[str, Any] = {
        "until_empty": until_empty,
        "max_messages": max_messages,
        "max_seconds": max_seconds,
    }
    needs_async = "an async def --handler runs on an AsyncSession" if asynchronous else None
    # SIGTERM/SIGINT before the run (while connecting) stops it before it leases anything,
    # and one after it (the worker's own handlers are gone) no longer kills the process.
    stop_requested = threading.Event()
    with (
        on_signals(lambda _: stop_requested.set()),
        connected(url, "the worker failed", needs_async=needs_async) as db,
    ):
        store = db.call(bind_store, db.engine, table, schema)
        if hand_over:
            _hand_over(db, store, consumer, handler)
        worker = _worker(db, store, handler, options)
        if stop_requested.is_set():
            worker.stop()
        try:
            if isinstance(worker, Worker):
                worker.run(**limits)
            else:
                db.run(worker.run(**limits))
        except ConfigurationError as exc:
            click.echo(json.dumps(worker.summary.as_dict()))
            first_line = (str(exc).strip().splitlines() or [""])[0]
            if isinstance(exc, ConsumerNameTaken):
                first_line += " (here: run the worker once with --hand-over)"
            raise CannotRun(f"{type(exc).__name__}: {first_line}") from exc
        except KeyboardInterrupt:  # a second Ctrl-C: the summary so far, then exit 130
            click.echo(json.dumps(worker.summary.as_dict()))
            raise
        click.echo(json.dumps(worker.summary.as_dict()))


def _hand_over(db: Database, store: InboxStore, consumer: str | None, handler: object) -> None:
    """``--hand-over``: ``store.consumers.hand_over()`` for ``consumer``, logged.

    :raises CannotRun: if the store keeps no owners of consumer names.
    """
    if store.consumers is None:
        raise CannotRun("--hand-over: this store keeps no owners of consumer names")
    previous = db.call(store.consumers.hand_over, db.engine, consumer, handler)
    owner = owner_name(handler)
    if previous == owner:
        said = f"consumer name {consumer!r}: {owner} owns it already"
    elif previous is None:
        said = f"consumer name {consumer!r} given to {owner} (it had no owner)"
    else:
        said = f"consumer name {consumer!r} handed over from {previous} to {owner}"
    logging.getLogger("sa_inbox.cli").info(said)


def _worker(
    db: Database, store: InboxStore, handler: Callable[..., Any], options: dict[str, Any]
) -> Worker | AsyncWorker:
    """The worker for the URL's driver: the sync :class:`~sa_inbox.Worker` on a sync
    driver, the :class:`~sa_inbox.asyncio.AsyncWorker` on an async one (imported only
    then: it needs greenlet). A plain ``def`` handler on an async driver is given the
    AsyncSession's sync Session, on which it runs in the task's greenlet, as
    ``AsyncSession.run_sync`` runs a function."""
    from ..store import Worker

    if db.async_engine is None:
        return Worker(store.bind(db.engine), handler, **options)
    from ..asyncio import AsyncInboxStore, AsyncWorker

    bound = AsyncInboxStore(store).bind(db.async_engine)
    return AsyncWorker(
        bound, handler if is_async_callable(handler) else _on_sync_session(handler), **options
    )


def _on_sync_session(handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler(session, message)`` called with the sync Session behind the AsyncSession."""

    @functools.wraps(handler)
    def on_sync_session(session: AsyncSession, message: StoredMessage) -> Any:
        return handler(session.sync_session, message)

    return on_sync_session


def _put_first_on_path(app_dir: str) -> None:
    """Put ``app_dir`` (default the working directory) first on :data:`sys.path`, as
    uvicorn's ``--app-dir`` and celery do, so ``--handler`` imports the user's modules
    when run as the ``sa-inbox`` script (``python -m`` adds the directory by itself)."""
    path = os.path.abspath(app_dir)
    if path in sys.path:
        sys.path.remove(path)
    sys.path.insert(0, path)
