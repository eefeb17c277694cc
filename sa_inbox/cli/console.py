"""``sa-inbox console``: the operator's console (:mod:`sa_inbox.console`) served by uvicorn.

Read-only unless ``--allow-replay``. Credentials come from the environment
(``SA_INBOX_CONSOLE_TOKEN`` / ``..._TOKEN_FILE``, ``SA_INBOX_CONSOLE_USER`` with
``SA_INBOX_CONSOLE_PASSWORD`` / ``..._PASSWORD_FILE``) and the signing key from
``SA_INBOX_CONSOLE_SECRET_KEY`` (else a random one per run). A non-loopback ``--host``
without credentials, or ``--allow-replay`` without them, is refused (exit 2).
Exit codes (:mod:`._common`): 0 stopped (SIGINT/SIGTERM), 2 usage error or the extra
missing, 3 the database cannot be opened.
"""

from __future__ import annotations

import logging
import os

import click
import sqlalchemy as sa

from .._optional import optional_dependencies
from ._common import CannotRun, missing_driver
from .retention import DURATION

__all__ = ["console_command"]


@click.command("console")
@click.option("--url", required=True, help="Database URL (SQLAlchemy form, a sync driver).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--allow-replay",
    is_flag=True,
    help="Serve the replay forms and API (needs credentials in the environment).",
)
@click.option("--table", default="inbox_processed_messages", show_default=True, help="'' skips it.")
@click.option("--store-table", default="inbox_store", show_default=True, help="'' skips it.")
@click.option("--outbox-table", default="outbox_messages", show_default=True, help="'' skips it.")
@click.option("--schema", default=None, help="The tables' schema.")
@click.option(
    "--dead-letters",
    "dead_letter_queues",
    multiple=True,
    metavar="URL/QUEUE",
    help="A broker dead-letter queue / stream to show and replay (as stats --dead-letters); "
    "repeatable.",
)
@click.option("--retention", type=DURATION, default=None, help="The purge's retention window.")
@click.option("--pending-threshold", type=DURATION, default="5m", show_default=True)
@click.option(
    "--root-path",
    default="",
    help="The path prefix a reverse proxy serves the console under (uvicorn's --root-path).",
)
def console_command(
    url: str,
    host: str,
    port: int,
    allow_replay: bool,
    table: str,
    store_table: str,
    outbox_table: str,
    schema: str | None,
    dead_letter_queues: tuple[str, ...],
    retention: object,
    pending_threshold: object,
    root_path: str,
) -> None:
    """Serve the console: overview, message lookup, dead letters and their replay.

    Credentials (SA_INBOX_CONSOLE_TOKEN or SA_INBOX_CONSOLE_USER and
    SA_INBOX_CONSOLE_PASSWORD, or their _FILE variants naming secret files) are required for
    --allow-replay and for any --host that is not loopback.
    """
    with optional_dependencies(__name__, "console", "uvicorn"):
        import uvicorn

    from ..console import Credentials, check_bind, create_app
    from ..console.security import ENVIRONMENT
    from ..exc import InvalidArgument, InvalidObject

    try:
        credentials = Credentials.from_environment()
        check_bind(host, authenticated=credentials is not None)
        app = create_app(
            url,
            inbox_table=table or None,
            store_table=store_table or None,
            outbox_table=outbox_table or None,
            schema=schema,
            allow_replay=allow_replay,
            auth=credentials,
            secret_key=os.environ.get(ENVIRONMENT["secret_key"]) or None,
            dead_letter_queues=list(dead_letter_queues),
            retention=retention,  # type: ignore[arg-type]
            pending_threshold=pending_threshold,  # type: ignore[arg-type]
        )
    except (InvalidArgument, InvalidObject) as exc:
        raise click.UsageError(str(exc)) from exc
    except ImportError as exc:  # the URL's driver is not installed
        raise CannotRun(missing_driver(sa.make_url(url), exc)) from exc
    # the replays and logins logged with their user (logger sa_inbox.console) go to stderr
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    click.echo(
        f"sa-inbox console on http://{host}:{port}{root_path}/ "
        f"({'replay allowed' if allow_replay else 'read-only'})",
        err=True,
    )
    uvicorn.run(app, host=host, port=port, root_path=root_path, log_level="info")
