"""Database outages: tell one from a failed message, hold the work, probe, resume.

A delivery whose transaction failed because the database could not be reached (a restart,
a shutdown, a failover in progress, an exhausted pool: :func:`is_unavailable`) is not the
message's fault. Counting it toward ``max_deliveries`` would dead-letter live messages
during a restart, and requeueing it at once would spin the queue. So every consumer of
sa-inbox (the broker adapters through :func:`sa_inbox.brokers.process`, the store workers
and the outbox relay) hands such a failure to its :class:`OutageGate`, which:

1. probes the database (:func:`probe_sessions`: a ``SELECT 1`` through the consumer's own
   session factory, so through its pool and URL);
2. if the probe fails, the outage has begun: one WARNING (event
   ``inbox.database.unavailable``), then waits with capped exponential back-off and full
   jitter (:meth:`~sa_inbox.backoff.Backoff.jittered`), probing after each wait, keeping
   the held deliveries' leases alive meanwhile (``keep_alive``);
3. once a probe gets through: one INFO with the outage's duration (event
   ``inbox.database.available``), :meth:`~sa_inbox.hooks.InboxHooks.database_outage` told,
   and the caller runs the same delivery again, uncounted.

A failure that looks like an outage while the first probe gets through (the pool held a
connection the restart had closed; a handler's own socket error) is run again once,
uncounted; if it fails so again with the database answering, it is the message's: settled
as any failure (so an error that only looks like an outage cannot loop a message forever).

The gate holds no thread of its own: its steps are a generator (:meth:`OutageGate.steps`)
that :meth:`OutageGate.wait` (threads) and :meth:`OutageGate.wait_async` (asyncio) drive,
each with its own probe and sleep. One gate may serve several threads of one consumer:
the first to find the database gone logs the outage, the first to find it back ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import errno
import inspect
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from .backoff import Backoff
from .dialects import classifier_for
from .hooks import NOOP, InboxHooks, as_hooks
from .steps import drive, drive_async

__all__ = [
    "DEFAULT_OUTAGE_BACKOFF",
    "OutageGate",
    "Verdict",
    "database_of",
    "guarded",
    "is_guarded",
    "is_unavailable",
    "probe_engine",
    "probe_sessions",
    "probe_sessions_async",
]

logger = logging.getLogger("sa_inbox.outage")

#: The wait between two probes of an unreachable database: 0.5 s doubling to 15 s, each
#: drawn at random below that bound (full jitter).
DEFAULT_OUTAGE_BACKOFF = Backoff(base=0.5, maximum=15.0)

#: OS error numbers of a connection that could not be made or was lost.
_CONNECTION_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ETIMEDOUT,
    }
)

#: Set while an outage gate stands behind the caller (the runner then logs an outage
#: failure at DEBUG: the gate logs the outage once).
_GUARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("sa_inbox_outage", default=False)


def is_unavailable(exc: BaseException | None, dialect_name: str | None = None) -> bool:
    """Whether ``exc`` means the database cannot be reached or cannot take writes now.

    True for: SQLAlchemy's pool timeout (:class:`sqlalchemy.exc.TimeoutError`, every
    connection checked out for ``pool_timeout`` seconds); a driver error the backend's
    classifier recognises (:meth:`~sa_inbox.dialects.ClaimDialect.is_unavailable`: the
    server's shutdown and read-only codes, the client's connection errors, SQLAlchemy's
    ``is_disconnect``); an OS connection error (refused, reset, aborted, unreachable:
    asyncpg raises ``ConnectionRefusedError`` unwrapped when it cannot connect). The
    exception's ``__cause__`` chain is followed (a :class:`~sa_inbox.exc.TransientClaimError`
    or a wrapper of the driver's error).

    :param exc: the exception a transaction failed with (None: False).
    :param dialect_name: the engine's dialect name; None asks every backend's classifier
        (their codes cannot be confused: see :func:`~sa_inbox.dialects.classifier_for`).
    """
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, sa.exc.TimeoutError):
            return True
        if isinstance(exc, DBAPIError) and classifier_for(dialect_name).is_unavailable(exc):
            return True
        if isinstance(exc, ConnectionError) or (
            isinstance(exc, OSError) and exc.errno in _CONNECTION_ERRNOS
        ):
            return True
        exc, seen = exc.__cause__, seen + 1
    return False


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Mark the code inside as standing behind an outage gate (see :func:`is_guarded`)."""
    token = _GUARDED.set(True)
    try:
        yield
    finally:
        _GUARDED.reset(token)


def is_guarded() -> bool:
    """Whether an outage gate stands behind the caller (:func:`guarded`)."""
    return _GUARDED.get()


class Verdict(enum.Enum):
    """How :meth:`OutageGate.wait` ended."""

    #: The first probe got through: no outage (a stale pooled connection, or not the
    #: database's error at all).
    REACHABLE = "reachable"
    #: The database could not be reached, and now answers again.
    RECOVERED = "recovered"
    #: The consumer was stopped during the outage; the work in hand is left unsettled.
    STOPPED = "stopped"


@dataclass(frozen=True)
class _Probe:
    """Step: probe the database; send back None (it answered) or the exception."""


@dataclass(frozen=True)
class _Wait:
    """Step: wait ``seconds``; send back True if stopped."""

    seconds: float


@dataclass(frozen=True)
class _KeepAlive:
    """Step: keep the held deliveries' leases (``keep_alive``); send back None."""


Step = _Probe | _Wait | _KeepAlive


class OutageGate:
    """Rides out database outages for one consumer (see the module's docstring).

    :param consumer_name: named in the log lines and the hooks' metrics.
    :param backoff: the waits between probes (:data:`DEFAULT_OUTAGE_BACKOFF`).
    :param hooks: told of each outage that ended
        (:meth:`~sa_inbox.hooks.InboxHooks.database_outage`).
    :param sleep: ``sleep(seconds) -> stopped``: waits, returning True early if the
        consumer is stopped (default: :func:`time.sleep`, never stopped); for
        :meth:`wait_async`, an ``async def`` (default :func:`asyncio.sleep`).
    :param keep_alive: called (awaited if it returns an awaitable) when an outage begins and
        every ``keep_alive_every`` seconds of waiting, to keep the held deliveries' leases
        (Redis: reset their idle time; JetStream: ``+WPI``); an exception from it is logged
        at DEBUG and ignored.
    :param keep_alive_every: seconds, > 0; None: never.
    :param clock: monotonic seconds (tests pass a fake).
    :param database: where the database is, as the outage's WARNING names it
        (``host:port/name``: a wrong URL shows there); None until a consumer sets it
        (:func:`database_of` its session factory).
    """

    def __init__(
        self,
        consumer_name: str,
        *,
        backoff: Backoff = DEFAULT_OUTAGE_BACKOFF,
        hooks: InboxHooks = NOOP,
        sleep: Callable[[float], Any] | None = None,
        keep_alive: Callable[[], Any] | None = None,
        keep_alive_every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        database: str | None = None,
    ) -> None:
        self.consumer_name = consumer_name
        self.database = database
        self.backoff = backoff
        self.hooks = as_hooks(hooks)
        self.sleep = sleep
        self.keep_alive = keep_alive
        self.keep_alive_every = keep_alive_every
        self.clock = clock
        self._lock = threading.Lock()
        self._started: float | None = None
        self._ended = -math.inf
        #: Outages seen end, and their seconds in all.
        self.outages = 0
        self.outage_seconds = 0.0

    @property
    def ended_at(self) -> float:
        """:attr:`clock` time the last outage ended (``-inf``: none yet)."""
        return self._ended

    @property
    def in_outage(self) -> bool:
        """Whether an outage is in progress (a probe failed and none got through since)."""
        return self._started is not None

    # -- the steps, for either driver --------------------------------------------------

    def steps(self, error: BaseException, observed_at: float) -> Generator[Step, Any, Verdict]:
        """The gate's decisions for one failure, as steps a driver runs.

        :param error: the failure that looked like an outage.
        :param observed_at: :attr:`clock` time it was caught (a failure caught before the
            last outage ended belongs to that outage: it is not logged again).
        """
        probed = yield _Probe()
        if probed is None:
            self._end()
            return Verdict.REACHABLE
        self._begin(error, probed, observed_at)
        every = self.keep_alive_every
        yield _KeepAlive()  # the leases run from the deliveries' start: refresh them now
        since = 0.0  # seconds waited since the last keep-alive
        attempt = 0
        while True:
            attempt += 1
            left = self.backoff.jittered(attempt)
            while left > 0:
                chunk = left if every is None else min(left, every - since)
                stopped = yield _Wait(chunk)
                if stopped:
                    return Verdict.STOPPED
                left, since = left - chunk, since + chunk
                if every is not None and since >= every:
                    yield _KeepAlive()
                    since = 0.0
            probed = yield _Probe()
            if probed is None:
                self._end()
                return Verdict.RECOVERED

    def _begin(self, error: BaseException, probed: BaseException, observed_at: float) -> None:
        with self._lock:
            if self._started is not None or observed_at < self._ended:
                return
            self._started = observed_at
        logger.warning(
            "consumer %s: the database%s cannot be reached (%s); deliveries are held, "
            "uncounted, and the database probed with back-off",
            self.consumer_name,
            "" if self.database is None else f" at {self.database}",
            _describe(probed),
            extra={
                "event": "inbox.database.unavailable",
                "action": "outage",
                "consumer_name": self.consumer_name,
                "database": self.database,
                "error": _describe(error),
            },
        )

    def _end(self) -> None:
        now = self.clock()
        with self._lock:
            started, self._started = self._started, None
            if started is None:
                return
            self._ended = now
            seconds = max(0.0, now - started)
            self.outages += 1
            self.outage_seconds += seconds
        logger.info(
            "consumer %s: the database answers again after %.1f s; resuming",
            self.consumer_name,
            seconds,
            extra={
                "event": "inbox.database.available",
                "action": "resume",
                "consumer_name": self.consumer_name,
                "seconds": seconds,
            },
        )
        self.hooks.database_outage(self.consumer_name, seconds=seconds)

    # -- the drivers -------------------------------------------------------------------

    def wait(self, error: BaseException, probe: Callable[[], object]) -> Verdict:
        """Ride out the outage ``error`` may mean, on this thread: probe, wait, probe.

        :param probe: raises while the database cannot be reached (:func:`probe_sessions`).
        :returns: the :class:`Verdict`.
        """

        def run(step: Step) -> object:
            if isinstance(step, _Probe):
                return _probe(probe)
            if isinstance(step, _Wait):
                return (self.sleep or _sleep)(step.seconds)
            _keep_alive(self.keep_alive)
            return None

        return drive(self.steps(error, self.clock()), run, ())

    async def wait_async(
        self, error: BaseException, probe: Callable[[], Awaitable[object]]
    ) -> Verdict:
        """:meth:`wait` on the event loop, with an ``async`` probe and sleep."""

        async def run(step: Step) -> object:
            if isinstance(step, _Probe):
                return await _probe_async(probe)
            if isinstance(step, _Wait):
                return await (self.sleep or _sleep_async)(step.seconds)
            await _keep_alive_async(self.keep_alive)
            return None

        return await drive_async(self.steps(error, self.clock()), run, ())


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


async def _sleep_async(seconds: float) -> bool:
    await asyncio.sleep(seconds)
    return False


def _probe(probe: Callable[[], object]) -> BaseException | None:
    try:
        probe()
    except Exception as exc:
        return exc
    return None


async def _probe_async(probe: Callable[[], Awaitable[object]]) -> BaseException | None:
    try:
        await probe()
    except Exception as exc:
        return exc
    return None


def _keep_alive(keep_alive: Callable[[], Any] | None) -> None:
    if keep_alive is None:
        return
    try:
        keep_alive()
    except Exception as exc:
        logger.debug("keep-alive of held deliveries failed: %s", _describe(exc))


async def _keep_alive_async(keep_alive: Callable[[], Any] | None) -> None:
    if keep_alive is None:
        return
    try:
        result = keep_alive()
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        logger.debug("keep-alive of held deliveries failed: %s", _describe(exc))


# -- probes --------------------------------------------------------------------------------

#: ``SELECT 1`` (``FROM DUAL`` where the dialect needs it): one round trip, no table.
_SELECT_ONE: sa.Select[Any] = sa.select(sa.literal_column("1"))


def probe_sessions(session_factory: Callable[[], Any]) -> Callable[[], None]:
    """A probe: ``SELECT 1`` in a new session of ``session_factory`` (a sessionmaker)."""

    def probe() -> None:
        with session_factory() as session:
            session.execute(_SELECT_ONE)

    return probe


def probe_sessions_async(session_factory: Callable[[], Any]) -> Callable[[], Awaitable[None]]:
    """An ``async`` probe: ``SELECT 1`` in a new session of an ``async_sessionmaker``."""

    async def probe() -> None:
        async with session_factory() as session:
            await session.execute(_SELECT_ONE)

    return probe


def probe_engine(engine: sa.Engine) -> Callable[[], None]:
    """A probe: ``SELECT 1`` on a new connection of ``engine``'s pool."""

    def probe() -> None:
        with engine.connect() as conn:
            conn.execute(_SELECT_ONE)

    return probe


def database_of(session_factory: object) -> str | None:
    """Where the engine of ``session_factory`` (a ``sessionmaker`` or
    ``async_sessionmaker`` bound to an Engine or AsyncEngine) connects: ``host:port/name``
    of its URL (no user, no password; the driver's defaults where the URL has none), or
    None for another factory."""
    bind = getattr(session_factory, "kw", {}).get("bind")
    url = getattr(getattr(bind, "sync_engine", bind), "url", None)
    if not isinstance(url, sa.URL):
        return None
    if url.get_backend_name() == "sqlite":
        return url.database or ":memory:"
    port = url.port if url.port is not None else _DEFAULT_PORTS.get(url.get_backend_name())
    host = url.host or "localhost"
    where = host if port is None else f"{host}:{port}"
    return f"{where}/{url.database}" if url.database else where


#: The port a driver connects to when the URL names none.
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "oracle": 1521}


def _describe(error: BaseException) -> str:
    text = " ".join(str(error).split())[:300]
    return f"{type(error).__name__}: {text}" if text else repr(error)
