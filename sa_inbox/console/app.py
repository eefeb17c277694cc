"""The console's ASGI app: :func:`create_app` and its settings (:class:`Console`).

A Starlette app, server-rendered with Jinja2 (autoescaped templates, no script), one JSON
API route behind each page (``docs/console.md``), ``/metrics`` when ``prometheus_client`` is
installed. Served by ``sa-inbox console`` (uvicorn) or mounted in the user's own FastAPI /
Starlette app::

    from starlette.applications import Starlette
    from starlette.routing import Mount
    from sa_inbox.console import create_app

    console = create_app(engine, allow_replay=True, auth=lambda request: request.user.username)
    app = Starlette(routes=[Mount("/inbox", app=console)])
"""

from __future__ import annotations

import datetime
import logging
import sys
from collections.abc import Sequence
from typing import Any

import jinja2
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..exc import InvalidArgument, InvalidObject, SyncAsyncMismatch
from ..outbox.schema import DEFAULT_OUTBOX_TABLE
from ..schema import DEFAULT_TABLE_NAME
from ..store.schema import DEFAULT_STORE_TABLE
from ..validation import shown
from .queries import Tables
from .routes import routes
from .security import (
    AuthHook,
    Credentials,
    CsrfTokens,
    RateLimiter,
    SecurityHeaders,
    Sessions,
    new_secret_key,
)
from .settings import Console

__all__ = ["Console", "create_app"]

logger = logging.getLogger("sa_inbox.console")

#: Seconds a login session and a CSRF token stay valid.
SESSION_SECONDS = 8 * 3600
#: Login form posts per client address per minute (a password guessed slowly, if at all).
LOGIN_ATTEMPTS = 10


def create_app(
    engine_or_url: sa.Engine | str,
    *,
    inbox_table: str | None = DEFAULT_TABLE_NAME,
    store_table: str | None = DEFAULT_STORE_TABLE,
    outbox_table: str | None = DEFAULT_OUTBOX_TABLE,
    schema: str | None = None,
    allow_replay: bool = False,
    auth: Credentials | AuthHook | None = None,
    secret_key: str | bytes | None = None,
    dead_letter_queues: Sequence[str] = (),
    broker_timeout: float = 5.0,
    retention: datetime.timedelta | None = None,
    pending_threshold: datetime.timedelta = datetime.timedelta(minutes=5),
    replay_rate: tuple[int, float] = (20, 60.0),
    metrics: bool = True,
) -> Starlette:
    """The console app on ``engine_or_url``'s database.

    :param engine_or_url: a sync :class:`~sqlalchemy.Engine`, or a URL to make one of.
    :param inbox_table: the processed-messages table (None: not read).
    :param store_table: the inbox store's table (None: not read).
    :param outbox_table: the outbox's table (None: not read).
    :param schema: the tables' schema.
    :param allow_replay: serve the replay forms and API; without it the console only reads.
    :param auth: who may use it: :class:`Credentials` (the console's own: a token, basic
        auth, a login form), or the host's hook (:data:`~.security.AuthHook`: the request
        in, the user's name or None out). None: anyone who can reach it may read, nobody
        may write (serve it on loopback only: :func:`~.security.check_bind`).
    :param secret_key: signs the session cookies and CSRF tokens (default: random per
        process, so sessions end with it; give one to several processes behind a balancer).
    :param dead_letter_queues: broker dead-letter queues / streams to count, list and replay,
        each ``URL/QUEUE`` as ``sa-inbox stats --dead-letters`` takes them.
    :param broker_timeout: seconds to connect to a broker and for each reply.
    :param retention: the purge's retention window (the ``purge-not-running`` verdict).
    :param pending_threshold: how old a pending store or outbox row may get.
    :param replay_rate: at most this many replay requests per user in this many seconds.
    :param metrics: serve ``/metrics`` (Prometheus) when ``prometheus_client`` is installed.
    :raises SyncAsyncMismatch: for an AsyncEngine (give the sync engine of the same database).
    :raises InvalidObject: for anything else that is neither an Engine nor a URL (a
        Connection, a sessionmaker...).
    :raises InvalidArgument: for a bad setting, or ``allow_replay`` without ``auth`` (a
        replay needs an authenticated user); before any SQL.
    """
    engine = _engine(engine_or_url)
    tables = Tables(inbox_table, store_table, outbox_table, schema)
    credentials, hook = _auth(auth)
    if allow_replay and credentials is None and hook is None:
        raise InvalidArgument(
            "allow_replay needs auth: replays are made by an authenticated user (Credentials, "
            "or the host app's auth hook)"
        )
    if secret_key is not None and (not isinstance(secret_key, str | bytes) or len(secret_key) < 16):
        raise InvalidArgument("secret_key must be a str or bytes of at least 16 characters")
    key = secret_key if secret_key is not None else new_secret_key()
    targets = _targets(dead_letter_queues, broker_timeout)
    for name, value in (("retention", retention), ("pending_threshold", pending_threshold)):
        if not (value is None and name == "retention") and not (
            isinstance(value, datetime.timedelta) and value > datetime.timedelta(0)
        ):
            raise InvalidArgument(f"{name} must be a positive datetime.timedelta: {value!r}")
    if not isinstance(replay_rate, tuple) or len(replay_rate) != 2:
        raise InvalidArgument(f"replay_rate is (requests, seconds): {replay_rate!r}")
    limit, window = replay_rate
    console = Console(
        engine=engine,
        tables=tables,
        allow_replay=bool(allow_replay),
        credentials=credentials,
        auth_hook=hook,
        sessions=Sessions(key, SESSION_SECONDS),
        csrf=CsrfTokens(key, SESSION_SECONDS),
        limiter=RateLimiter(limit, window),
        login_limiter=RateLimiter(LOGIN_ATTEMPTS, 60.0),
        templates=_templates(),
        dead_letter_queues=targets,
        broker_timeout=float(broker_timeout),
        retention=retention,
        pending_threshold=pending_threshold,
        metrics=_metrics(engine, tables) if metrics else None,
    )
    app = Starlette(
        routes=[
            *routes(),
            # Mounted from the package's directory (not StaticFiles(packages=...)): found
            # whatever the working directory, and in the wheel.
            _static(),
        ],
        middleware=[Middleware(SecurityHeaders)],
    )
    app.state.sa_inbox_console = console
    return app


def _engine(engine_or_url: Any) -> sa.Engine:
    # an AsyncEngine exists only once its module is imported: not imported here (without
    # greenlet the import itself fails)
    asyncio_module = sys.modules.get("sqlalchemy.ext.asyncio")
    if asyncio_module is not None and isinstance(engine_or_url, asyncio_module.AsyncEngine):
        raise SyncAsyncMismatch(
            "the console reads with a sync Engine: pass create_engine() of the same database "
            "on a sync driver (postgresql+psycopg, mysql+pymysql, sqlite), not an AsyncEngine"
        )
    if isinstance(engine_or_url, sa.Engine):
        return engine_or_url
    if isinstance(engine_or_url, str | sa.URL):
        try:
            url = sa.make_url(engine_or_url)
        except sa.exc.ArgumentError as exc:
            raise InvalidArgument(f"not a database URL: {exc}") from exc
        if url.get_dialect().is_async:  # the dialect class only: its driver not imported
            raise SyncAsyncMismatch(
                f"the console reads with a sync driver, not {url.drivername}: use "
                "postgresql+psycopg, mysql+pymysql or sqlite for the same database"
            )
        return sa.create_engine(url, pool_pre_ping=True)
    raise InvalidObject(
        f"the console needs an Engine or a database URL, not {type(engine_or_url).__name__} "
        f"({shown(engine_or_url)})"
    )


def _auth(auth: Any) -> tuple[Credentials | None, AuthHook | None]:
    if auth is None:
        return None, None
    if isinstance(auth, Credentials):
        return auth, None
    if callable(auth):
        return None, auth
    raise InvalidArgument(
        f"auth must be Credentials, a callable (request -> user or None) or None: {auth!r}"
    )


def _targets(queues: Sequence[str], timeout: float) -> list[Any]:
    if isinstance(queues, str):
        raise InvalidArgument("dead_letter_queues is a list of URL/QUEUE strings, not one string")
    if not queues:
        return []
    from ..brokers.dead_letters import DeadLetterTarget
    from ..brokers.dead_letters.model import check_timeout

    check_timeout(timeout)
    return [DeadLetterTarget.parse(queue) for queue in queues]


def _templates() -> Jinja2Templates:
    """The package's templates, autoescaped (every value, payloads and errors included, is
    HTML-escaped), undefined names an error."""
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("sa_inbox.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return Jinja2Templates(env=environment)


def _static() -> Any:
    from pathlib import Path

    from starlette.routing import Mount

    directory = Path(__file__).with_name("static")
    return Mount("/static", app=StaticFiles(directory=directory), name="static")


def _metrics(engine: sa.Engine, tables: Tables) -> Any | None:
    """A registry holding :class:`~sa_inbox.hooks.prometheus.InboxCollector` on the
    console's tables, or None without ``prometheus_client``."""
    try:
        from prometheus_client import CollectorRegistry
    except ImportError:
        return None
    from ..hooks.prometheus import InboxCollector

    registry = CollectorRegistry()
    InboxCollector(
        engine,
        inbox_table=tables.inbox,
        store_table=tables.store,
        registry=registry,
    )
    return registry
