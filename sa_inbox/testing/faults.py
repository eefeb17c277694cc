"""Faults to inject in integration tests against real brokers and databases: the inbox
pattern's failure cases made on purpose, around consumers running as in production.

* :func:`publish_twice`: the producer's retry, the same message published again (through
  the outbox publisher of the broker's URL, or any publisher), so the broker delivers it
  twice;
* :func:`claims_held_together`: consumers in this process (threads, or tasks of one event
  loop) each held just before their claim until ``parties`` of them are there, then
  released together: a duplicate delivered concurrently;
* :func:`crash_after_commit`: the consumer process SIGKILLs itself right after a commit
  that changed rows, before its ack: the broker redelivers a committed message;
* :func:`stall_before_commit`: the consumer holds its transaction open for ``seconds``
  before the commit, past the broker's visibility timeout (Redis ``visibility_timeout``,
  JetStream ``ack_wait``, SQS ``VisibilityTimeout``): the broker hands the message to
  another consumer meanwhile;
* :class:`~sa_inbox.testing.proxy.DatabaseProxy`: a database outage of N seconds;
* ``python -m sa_inbox.testing.inject --crash-after-commit -m myapp.consumer ...`` starts
  a consumer process of yours with a fault installed (:mod:`.inject`);
* :func:`broker_fault`: faults that only one broker has (a consumer-group rebalance in the
  middle of a poll on Kafka, a visibility change on SQS), registered by the broker's adapter
  package with :func:`register_broker_fault`.

The crash and the stall watch commits through SQLAlchemy's own events
(``SessionEvents.after_begin`` / ``before_commit`` / ``after_commit`` on the
:class:`~sqlalchemy.orm.Session` class, ``ConnectionEvents`` on the
:class:`~sqlalchemy.engine.Engine` class, so the sync session inside an ``AsyncSession``
too): a commit counts when its transaction's writes changed rows (a claim that found its id
changes none). They fire in the process that installs them, for Session-based consumers
(every sa-inbox runner and adapter).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session

from .._compat import await_only
from ..claim import statement_rowcount
from ..exc import InvalidArgument, InvalidObject, SyncAsyncMismatch, UnsupportedBroker
from ..handlers import is_async_callable
from ..outbox.message import OutboxMessage
from ..outbox.publisher import Publisher, publisher_for
from ..validation import positive_int, positive_seconds
from .messages import Message
from .observe import statement_kind

__all__ = [
    "HeldClaims",
    "broker_fault",
    "claims_held_together",
    "clear_faults",
    "crash_after_commit",
    "publish_twice",
    "register_broker_fault",
    "stall_before_commit",
]

# -- the producer's retry ------------------------------------------------------------------


def publish_twice(
    broker: str | Publisher, destination: str, message: Message, *, copies: int = 2
) -> None:
    """Publish ``message`` ``copies`` times with its one ``message_id``, as a producer
    whose confirm was lost publishes again.

    :param broker: a broker URL (``amqp://``, ``redis://``, ``nats://``: the outbox's
        publisher for it, :func:`sa_inbox.outbox.publisher.publisher_for`, closed after), or
        a synchronous publisher of your own (``publish(OutboxMessage)``).
    :param destination: the queue (routing key on the default exchange), stream or subject.
    :param message: what the producer sends; its ``message_id`` is the broker message's id
        and its headers must be strings. JetStream drops a repeated ``Nats-Msg-Id`` inside
        its duplicate window, so the consumers see one copy there.
    :raises InvalidArgument: for a message without an id, or ``copies`` < 1.
    :raises SyncAsyncMismatch: for a publisher whose ``publish`` is ``async def`` (it would
        return coroutines never awaited: nothing published).
    :raises InvalidObject: for a broker that is neither a URL nor has ``publish``.
    """
    if message.message_id is None:
        raise InvalidArgument("publish_twice() needs a message with a message_id")
    positive_int(copies, "copies", InvalidArgument)
    if not isinstance(broker, str):
        _check_publisher(broker)
    publisher = publisher_for(broker) if isinstance(broker, str) else broker
    outgoing = OutboxMessage(
        id=0,
        message_id=message.message_id,
        destination=destination,
        payload=message.body,
        headers={str(k): str(v) for k, v in message.headers.items()},
    )
    try:
        for attempt in range(1, copies + 1):
            publisher.publish(dataclasses.replace(outgoing, attempts=attempt))
    finally:
        if isinstance(broker, str):
            publisher.close()


def _check_publisher(publisher: object) -> None:
    publish = getattr(publisher, "publish", None)
    if not callable(publish):
        raise InvalidObject(
            "publish_twice() takes a broker URL or a publisher with publish(message), not "
            f"{type(publisher).__name__}"
        )
    if is_async_callable(publish):
        raise SyncAsyncMismatch(
            f"publish_twice() was given {type(publisher).__name__}, whose publish is async "
            "def: it publishes synchronously; pass the broker's URL or a synchronous publisher"
        )


# -- claims held together ------------------------------------------------------------------

_GATED = "sa_inbox_testing_gated"


class HeldClaims:
    """The gate of :func:`claims_held_together`.

    :param parties: how many claims meet.
    :param timeout: seconds a held claim waits for the others before going on.
    """

    def __init__(self, parties: int, timeout: float) -> None:
        self.parties = parties
        self.timeout = timeout
        #: Claims that arrived; claims that were waiting together when the gate opened.
        self.arrived = 0
        self.together = 0
        self._condition = threading.Condition()

    @property
    def open(self) -> bool:
        return self.arrived >= self.parties

    def arrive(self) -> None:
        """Wait for the others (threads block; a task polls the gate on its event loop)."""
        with self._condition:
            if self.open:
                return
            self.arrived += 1
            if self.open:
                self.together = self.arrived
                self._condition.notify_all()
                return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            with self._condition:
                self._condition.wait_for(lambda: self.open, self.timeout)
            return
        deadline = time.monotonic() + self.timeout
        while not self.open and time.monotonic() < deadline:
            await_only(asyncio.sleep(0.005))


@contextmanager
def claims_held_together(parties: int = 2, *, timeout: float = 30.0) -> Iterator[HeldClaims]:
    """Hold the next ``parties`` claims made in this process (each transaction's first
    write: sa-inbox's claim, an ``INSERT ... ON CONFLICT DO NOTHING``) until all of them
    are there, then release them together; later transactions pass freely.

    Start the consumers (threads, or tasks of one event loop) inside the block, and publish
    the message twice (:func:`publish_twice`): each copy's claim waits at the gate, and the
    database alone decides which one applies it.

    :param parties: claims that meet, >= 2.
    :param timeout: seconds a held claim waits for the others before going on alone.
    :returns: (as the ``with`` target) the gate: ``together`` is how many claims it released
        at once.
    """
    if not isinstance(parties, int) or isinstance(parties, bool) or parties < 2:
        raise InvalidArgument(
            f"claims_held_together(): parties must be an int >= 2, not {parties!r}"
        )
    gate = HeldClaims(parties, positive_seconds(timeout, "timeout", InvalidArgument))

    def begin(conn: Connection) -> None:
        conn.info[_GATED] = False

    def before(conn: Connection, cursor: Any, statement: str, *args: Any) -> None:
        if gate.open or conn.info.get(_GATED, True) or statement_kind(statement) != "write":
            return
        conn.info[_GATED] = True
        gate.arrive()

    event.listen(Engine, "begin", begin)
    event.listen(Engine, "before_cursor_execute", before)
    try:
        yield gate
    finally:
        event.remove(Engine, "before_cursor_execute", before)
        event.remove(Engine, "begin", begin)


# -- crash and stall -----------------------------------------------------------------------

_CHANGED = "sa_inbox_testing_changed"
_COMMITTED = "sa_inbox_testing_committed"
_INFO = "sa_inbox_testing_connection_info"


class _Commits:
    """The process's watch on commits (installed once, on first use)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.installed = False
        self.crashes = 0
        self.stalls = 0
        self.stall_seconds = 0.0

    def install(self) -> None:
        with self.lock:
            if self.installed:
                return
            for target, name, listener in _LISTENERS:
                event.listen(target, name, listener)
            self.installed = True

    def remove(self) -> None:
        with self.lock:
            if self.installed:
                for target, name, listener in _LISTENERS:
                    event.remove(target, name, listener)
            self.installed = False
            self.crashes = self.stalls = 0

    def take(self, what: str) -> bool:
        """Whether one more crash (stall) is due; counts it."""
        with self.lock:
            left = getattr(self, what)
            if left <= 0:
                return False
            setattr(self, what, left - 1)
            return True


_COMMITS = _Commits()


def _after_execute(
    conn: Connection, cursor: Any, statement: str, parameters: Any, context: Any, *args: Any
) -> None:
    rows = statement_rowcount(cursor, context)
    if rows != 0 and statement_kind(statement) == "write":
        conn.info[_CHANGED] = True


def _connection_commit(conn: Connection) -> None:
    if conn.info.pop(_CHANGED, False):
        conn.info[_COMMITTED] = True


def _connection_rollback(conn: Connection) -> None:
    conn.info.pop(_CHANGED, None)


def _session_begin(session: Session, transaction: Any, connection: Connection) -> None:
    session.info[_INFO] = connection.info


def _changed(session: Session) -> bool:
    info = session.info.get(_INFO)
    return bool(info is not None and info.get(_CHANGED))


def _before_commit(session: Session) -> None:
    if _changed(session) and _COMMITS.take("stalls"):
        seconds = _COMMITS.stall_seconds
        _say(f"stalling {seconds:g} s before a commit")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            time.sleep(seconds)
        else:
            await_only(asyncio.sleep(seconds))


def _after_commit(session: Session) -> None:
    info = session.info.get(_INFO)
    if info is not None and info.pop(_COMMITTED, False) and _COMMITS.take("crashes"):
        _say("SIGKILL after a commit, before the ack")
        os.kill(os.getpid(), signal.SIGKILL)


def _say(text: str) -> None:
    sys.stderr.write(f"sa-inbox fault (pid {os.getpid()}): {text}\n")
    sys.stderr.flush()


_LISTENERS: tuple[tuple[Any, str, Callable[..., None]], ...] = (
    (Engine, "after_cursor_execute", _after_execute),
    (Engine, "commit", _connection_commit),
    (Engine, "rollback", _connection_rollback),
    (Session, "after_begin", _session_begin),
    (Session, "before_commit", _before_commit),
    (Session, "after_commit", _after_commit),
)


def clear_faults() -> None:
    """Cancel the crashes and stalls still due in this process, and stop watching its
    commits (for a test that installed one in its own process)."""
    _COMMITS.remove()


def crash_after_commit(times: int = 1) -> None:
    """SIGKILL this process right after the next ``times``-th commit that changed rows
    (its COMMIT has returned; the ack has not been sent): the broker redelivers a committed
    message to the next consumer, which must ack it as a duplicate.

    Call it in the consumer process your test starts (or start it with ``python -m
    sa_inbox.testing.inject --crash-after-commit``), never in the test process itself.

    :param times: the commit that kills, counted from now (1: the next one).
    :raises InvalidArgument: if ``times`` is not an int >= 1.
    """
    positive_int(times, "times", InvalidArgument)
    _COMMITS.install()
    with _COMMITS.lock:
        _COMMITS.crashes = times


def stall_before_commit(seconds: float, *, times: int = 1) -> None:
    """Hold the next ``times`` commits that change rows ``seconds`` before they reach the
    database, in this process: made longer than the broker's visibility timeout, the broker
    gives the message to another consumer meanwhile, whose claim waits on this one's
    uncommitted claim and then finds it a duplicate.

    :param seconds: how long, > 0 (on an event loop the task sleeps; a thread blocks).
    :param times: how many commits.
    :raises InvalidArgument: for seconds <= 0 or ``times`` < 1.
    """
    positive_seconds(seconds, "seconds", InvalidArgument)
    positive_int(times, "times", InvalidArgument)
    _COMMITS.install()
    with _COMMITS.lock:
        _COMMITS.stalls = times
        _COMMITS.stall_seconds = float(seconds)


# -- faults of one broker --------------------------------------------------------------------

#: (URL scheme, fault name) -> the fault.
_BROKER_FAULTS: dict[tuple[str, str], Callable[..., Any]] = {}


def register_broker_fault(scheme: str, name: str, fault: Callable[..., Any]) -> None:
    """Offer a fault only one broker has, e.g. ``register_broker_fault("kafka", "rebalance",
    rebalance)`` from a Kafka adapter package (a consumer-group rebalance in the middle of a
    poll), for :func:`broker_fault`.

    :param scheme: the broker URL's scheme.
    :param name: the fault's name.
    :param fault: ``fault(url, *args, **kwargs)``.
    """
    _BROKER_FAULTS[scheme.lower(), name] = fault


def broker_fault(url: str, name: str, *args: Any, **kwargs: Any) -> Any:
    """Inject the broker fault ``name`` on the broker at ``url``.

    :returns: what the fault returns.
    :raises UnsupportedBroker: if no adapter registered that fault for the URL's scheme.
    """
    scheme = url.partition("://")[0].lower()
    fault = _BROKER_FAULTS.get((scheme, name))
    if fault is None:
        known = sorted(f"{s}:{n}" for s, n in _BROKER_FAULTS)
        raise UnsupportedBroker(
            f"no {name!r} fault for {scheme}:// brokers (registered: {', '.join(known) or 'none'})"
        )
    return fault(url, *args, **kwargs)
