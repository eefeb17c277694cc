"""What every broker adapter checks when it is made and when it starts.

**When it is made** (:func:`check_consumer`, before connecting, before any SQL): the
broker client is of the adapter's half (:func:`check_client`), the
session factory is of the adapter's half (:func:`sa_inbox.checks.check_session_factory`),
the inbox is an :class:`~sa_inbox.Inbox` (the asyncio adapters also take its
:class:`~sa_inbox.asyncio.AsyncInbox` face), the handler can be called as
``handler(session, delivery)``, the consumer name and ``max_deliveries`` are valid. A
refusal is raised to the caller: no message is nacked or dead-lettered for it.

**When it starts** (:class:`Readiness`, from ``run()`` / ``consume()`` before the first
message, and the adapters' ``check()``): :func:`sa_inbox.readiness.check_ready` on the
inbox's tables through the session factory, then the owner of the consumer name
(:meth:`sa_inbox.consumers.Consumers.ensure`): a handler under another handler's name is
refused before a delivery is taken, so no give-back adds to a delivery count for it.
``run()`` / ``consume()`` start through :meth:`Readiness.start`: a database that cannot be
reached at start-up (:func:`sa_inbox.outage.is_unavailable`: a restart, a failover in
progress) is waited out by the consumer's :class:`~sa_inbox.outage.OutageGate` as an
outage under way is, and the check runs again; only a configuration error is raised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..checks import check_session_factory, require, unwrap
from ..claim import Inbox
from ..exc import InvalidArgument, InvalidObject, SyncAsyncMismatch
from ..handlers import check_handler
from ..outage import (
    OutageGate,
    Verdict,
    database_of,
    is_unavailable,
    probe_sessions,
    probe_sessions_async,
)
from ..readiness import check_owner, check_ready, check_ready_async, inbox_tables
from ..validation import positive_int, shown

__all__ = [
    "HANDLER_ARGUMENTS",
    "NO_CONSUMER_NAME",
    "NO_HANDLER",
    "ClientKind",
    "Readiness",
    "check_client",
    "check_consumer",
    "default_name",
]

#: How every adapter calls the handler.
HANDLER_ARGUMENTS = ("session", "delivery")

#: ``handler`` of the adapters that call no handler of the user's with
#: ``(session, delivery)`` (FastStream's middleware, Celery's task body).
NO_HANDLER: object = object()

#: ``consumer_name`` of a check made without a consumer (:func:`sa_inbox.brokers.nats.check`)
#: or for one delivery (:func:`sa_inbox.brokers.process`, whose claim checks the name): no
#: name is checked here, and no owner.
NO_CONSUMER_NAME: Any = object()


def default_name(consumer_name: str | None, default: str) -> str:
    """``consumer_name``, or ``default`` (the group, durable or queue) when it is None; an
    empty name stays, for :func:`check_consumer` to refuse."""
    return default if consumer_name is None else consumer_name


@dataclass(frozen=True)
class ClientKind:
    """A broker's client library, as :func:`check_client` tells its halves apart.

    :param broker: the broker, for the messages (``"SQS"``).
    :param method: a method every client of the library has (``"get_queue_url"``).
    :param asyncio_module: the module prefix of the asyncio client's classes
        (``"aiobotocore"``).
    :param blocking: the blocking client, as the messages name it (``"boto3.client('sqs')"``).
    :param asyncio: the asyncio client, as the messages name it.
    """

    broker: str
    method: str
    asyncio_module: str
    blocking: str
    asyncio: str


def check_client(client: object, kind: ClientKind, *, asynchronous: bool, entry: str) -> None:
    """Refuse a client the adapter cannot drive, before any request or SQL.

    A blocking client's calls return the reply; an asyncio client's return a coroutine,
    which synchronous code never awaits (a command never sent, yet taken as done), and
    awaiting a blocking reply fails after the call was made.

    :param asynchronous: the adapter awaits the client's calls.
    :raises SyncAsyncMismatch: for a client of the other half (told by its class: nothing
        of the client itself is read).
    :raises InvalidObject: for anything that is not a client of ``kind``.
    """
    mro = type(client).__mro__
    aio = any(cls.__module__.startswith(kind.asyncio_module) for cls in mro)
    client_like = callable(getattr(type(client), kind.method, None))
    if asynchronous and client_like and not aio:
        raise SyncAsyncMismatch(
            f"{entry} was given a blocking {kind.broker} client ({type(client).__name__}); "
            f"it takes {kind.asyncio}, or use the synchronous class on this client"
        )
    if not asynchronous and aio:
        raise SyncAsyncMismatch(
            f"{entry} was given an asyncio {kind.broker} client ({type(client).__name__}), "
            f"whose calls return coroutines this synchronous class never awaits; it takes "
            f"{kind.blocking}, or use the asyncio class on this client"
        )
    if not client_like:
        wanted = kind.asyncio if asynchronous else kind.blocking
        raise InvalidObject(
            f"{entry} takes {wanted}, not {type(client).__name__} ({shown(client)})"
        )


def check_consumer(
    entry: str,
    *,
    session_factory: object,
    inbox: object,
    handler: object,
    consumer_name: str,
    max_deliveries: int,
    asynchronous: bool,
) -> Readiness:
    """Refuse what the consumer ``entry`` cannot use; its :class:`Readiness` otherwise.

    :param entry: the consumer as messages name it (``"Consumer()"``).
    :param handler: the handler, or :data:`NO_HANDLER`.
    :param consumer_name: the inbox's consumer name (an adapter that defaults it passes the
        name it chose), or :data:`NO_CONSUMER_NAME`.
    :param asynchronous: True for the asyncio adapters.
    :raises InvalidSessionFactory: see :func:`~sa_inbox.checks.check_session_factory`.
    :raises SyncAsyncMismatch: for an asyncio inbox given to a synchronous adapter.
    :raises InvalidObject: for an inbox that is no Inbox.
    :raises InvalidHandler: for a handler that cannot take ``(session, delivery)``.
    :raises AsyncHandlerError: for an ``async def`` handler given to a synchronous adapter.
    :raises InvalidMessageId: for an invalid ``consumer_name`` (None included).
    :raises InvalidArgument: if ``max_deliveries`` is not an int >= 1.
    """
    check_session_factory(session_factory, entry=entry, asynchronous=asynchronous)
    checked = (
        unwrap(inbox, Inbox, "inbox", entry=entry)
        if asynchronous
        else require(
            inbox,
            Inbox,
            "inbox",
            entry=entry,
            instead="pass the Inbox itself (the asyncio adapters take either)",
        )
    )
    if handler is not NO_HANDLER:
        check_handler(handler, HANDLER_ARGUMENTS, asynchronous=asynchronous)
    named = consumer_name is not NO_CONSUMER_NAME
    if named:
        checked.validate("x", consumer_name)
    positive_int(max_deliveries, "max_deliveries", InvalidArgument)
    shown = None if handler is NO_HANDLER else handler
    return Readiness(
        entry,
        session_factory,  # type: ignore[arg-type]
        checked,
        shown,
        asynchronous,
        consumer_name if named else None,
    )


@dataclass(frozen=True)
class Readiness:
    """A consumer's start-up check (see the module's docstring)."""

    entry: str
    session_factory: Callable[[], Any]
    inbox: Inbox
    handler: object
    asynchronous: bool
    consumer_name: str | None = None

    def check(self) -> None:
        """The synchronous adapters' check: returns None or raises (the handler is checked
        again, at no cost: a consumer made otherwise than through :func:`check_consumer`).

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready`.
        """
        check_ready(
            self.session_factory,
            inbox_tables(self.inbox),
            entry=self.entry,
            handler=self.handler,
            handler_arguments=HANDLER_ARGUMENTS,
        )
        check_owner(self.session_factory, self.inbox, self.consumer_name, self.handler)

    async def check_async(self) -> None:
        """The asyncio adapters' check: returns None or raises.

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready_async`.
        """
        await check_ready_async(
            self.session_factory,
            inbox_tables(self.inbox),
            entry=self.entry,
            handler=self.handler,
            handler_arguments=HANDLER_ARGUMENTS,
            owner=(self.inbox, self.consumer_name),
        )

    def start(self, gate: OutageGate) -> bool:
        """:meth:`check` before the first delivery, waiting out a database that cannot be
        reached (see the module's docstring).

        :param gate: the consumer's gate (its sleep returns early once the consumer stops).
        :returns: True when the check passed; False if the consumer was stopped meanwhile.
        :raises ConfigurationError: see :meth:`check`; a failure that looks like an outage
            while the database answers, twice in a row, is raised too.

        The gate's WARNING names where the database is (:func:`~sa_inbox.outage.database_of`
        the session factory): a consumer waiting on a wrong URL shows it.
        """
        _name_database(gate, self.session_factory)
        reachable = 0
        while True:
            try:
                self.check()
                return True
            except Exception as exc:
                if not is_unavailable(exc) or reachable:
                    raise
                verdict = gate.wait(exc, probe_sessions(self.session_factory))
            reachable = _after_wait(verdict, reachable)
            if verdict is Verdict.STOPPED:
                return False

    async def start_async(self, gate: OutageGate) -> bool:
        """:meth:`start` for the asyncio adapters (:meth:`check_async`, the gate's async
        probe and sleep)."""
        _name_database(gate, self.session_factory)
        reachable = 0
        while True:
            try:
                await self.check_async()
                return True
            except Exception as exc:
                if not is_unavailable(exc) or reachable:
                    raise
                verdict = await gate.wait_async(exc, probe_sessions_async(self.session_factory))
            reachable = _after_wait(verdict, reachable)
            if verdict is Verdict.STOPPED:
                return False


def _name_database(gate: OutageGate, session_factory: object) -> None:
    """Tell ``gate`` where the database is, for its WARNING (once)."""
    if gate.database is None:
        gate.database = database_of(session_factory)


def _after_wait(verdict: Verdict, reachable: int) -> int:
    """How many checks in a row failed as outages while the database answered."""
    return reachable + 1 if verdict is Verdict.REACHABLE else 0
