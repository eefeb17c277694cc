"""What the exactly-once checks see of a delivery in the database, through SQLAlchemy's own
events, and the gate that holds concurrent deliveries just before their claim.

While :func:`observing` is active, listeners on the :class:`~sqlalchemy.engine.Engine` class
(SQLAlchemy's ``ConnectionEvents``: ``before_cursor_execute``, ``after_cursor_execute``,
``commit``, ``rollback``; SQLAlchemy docs, "Core Events") see every statement of every engine,
the ``sync_engine`` under an ``AsyncEngine`` included. A statement belongs to the delivery
whose :class:`Watch` is current in its context (a :class:`contextvars.ContextVar`, set by the
worker thread or task; SQLAlchemy runs an async driver's statements in a greenlet of the
task's own context), and is ignored otherwise.

**The claim** is the delivery's first write (``INSERT``, ``UPDATE``, ``DELETE``, ``MERGE``,
``REPLACE``): an insert-first consumer claims before it changes anything (sa-inbox's claim,
an ``INSERT ... ON CONFLICT DO NOTHING``), and a check-then-insert consumer has read its
dedup table by then. The :class:`Gate` holds each concurrent delivery before that statement
until every one has reached it, so they claim together: the race the inbox pattern's
concurrent-duplicate test sets up, made certain rather than likely.

**A change** is a write whose ``cursor.rowcount`` is not 0 (a claim that found its id inserts
nothing); a commit with changes is what applied the message, counted per connection.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from .._compat import await_only
from ..claim import statement_rowcount

__all__ = [
    "CURRENT",
    "Gate",
    "OutboundCall",
    "Watch",
    "observing",
    "statement_kind",
]

#: The delivery the statements of this context belong to.
CURRENT: ContextVar[Watch | None] = ContextVar("sa_inbox_testing_watch", default=None)

_WRITES = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE", "REPLACE", "UPSERT"})
_READS = frozenset({"SELECT", "SHOW", "VALUES", "TABLE"})
_COMMENT = re.compile(r"^\s*(?:--[^\n]*\n|/\*.*?\*/)\s*", re.S)
_WRITE_WORD = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.I)


def statement_kind(statement: str) -> str:
    """``"write"``, ``"read"`` or ``"other"`` (``SAVEPOINT``, ``SET``, ``BEGIN``...) for one
    statement's text; a ``WITH`` statement is a write if it holds one."""
    text = statement
    while True:
        stripped = _COMMENT.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    word = text.lstrip().split(None, 1)[0].upper() if text.strip() else ""
    word = word.lstrip("(")
    if word in _WRITES:
        return "write"
    if word == "WITH":
        return "write" if _WRITE_WORD.search(text) else "read"
    if word in _READS:
        return "read"
    return "other"


@dataclass(frozen=True)
class OutboundCall:
    """One call of a named outbound function during a delivery.

    :param name: the function's import path as given (``"myapp.payments:charge"``).
    :param keys: the idempotency keys among its arguments (UUIDv5 strings, what
        :func:`sa_inbox.idempotency_key` returns).
    :param text: the call, shortened, for the report.
    """

    name: str
    keys: tuple[str, ...]
    text: str


@dataclass
class Watch:
    """What the checks saw of one delivery (one worker).

    :param gate: the gate its claim waits at, or None.
    """

    gate: Gate | None = None
    #: Tables of sa-inbox's own bookkeeping (the consumers table): statements that touch
    #: only these are neither a claim nor a change.
    ignore: frozenset[Any] = frozenset()
    #: Statements' kinds, in order.
    kinds: list[str] = field(default_factory=list)
    #: A read was sent before the first write (a check before the claim).
    read_before_write: bool = False
    #: The first write's rowcount (the claim's), or None before any write.
    claim_rows: int | None = None
    #: The first write's text (the claim), shortened.
    claim: str | None = None
    #: The delivery waited at the gate.
    gated: bool = False
    #: Changed rows not committed yet, per connection.
    pending: dict[int, int] = field(default_factory=dict)
    #: Changed rows of each commit that had changes, in order.
    commits: list[int] = field(default_factory=list)
    #: Acks, and what was wrong at each (uncommitted changes...).
    acks: int = 0
    ack_problems: list[str] = field(default_factory=list)
    #: Calls of the handler (sa-inbox handlers and adapters only).
    handler_calls: int = 0
    #: Calls of the named outbound functions.
    outbound: list[OutboundCall] = field(default_factory=list)
    #: Called at a commit with changes, before it reaches the database (a crash there).
    on_commit: Callable[[Watch], None] | None = None

    @property
    def uncommitted(self) -> int:
        """Changed rows not committed yet."""
        return sum(self.pending.values())


class Gate:
    """Holds ``parties`` deliveries before their claim until all have reached it (or ended
    without one), then lets them claim together.

    :param parties: the deliveries that meet, >= 2.
    :param asynchronous: True when they are asyncio tasks of one event loop (their
        statements run in SQLAlchemy's greenlets, which wait on the loop); False for threads.
    :param timeout: seconds to wait for the others before going on alone (a lock taken
        before the claim can keep a delivery from reaching it: then the claims are not
        simultaneous, which :attr:`together` reports).
    """

    def __init__(self, parties: int, *, asynchronous: bool, timeout: float) -> None:
        self.parties = parties
        self.asynchronous = asynchronous
        self.timeout = timeout
        self.arrived = 0
        self.ended = 0
        #: Deliveries that were waiting together when the gate opened.
        self.together = 0
        self._condition = threading.Condition()
        self._event: asyncio.Event | None = None

    def _open(self) -> bool:
        return self.arrived + self.ended >= self.parties

    def arrive(self) -> None:
        """Wait until every delivery has arrived or ended (called before the claim)."""
        if self.asynchronous:
            await_only(self._arrive_async())
            return
        with self._condition:
            self.arrived += 1
            self._condition.notify_all()
            if self._condition.wait_for(self._open, self.timeout):
                self.together = max(self.together, self.arrived)

    async def _arrive_async(self) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        self.arrived += 1
        if self._open():
            self.together = self.arrived
            self._event.set()
            return
        try:
            await asyncio.wait_for(self._event.wait(), self.timeout)
        except TimeoutError:
            return

    def end(self, watch: Watch) -> None:
        """A delivery ended; one that never reached its claim no longer holds the others."""
        if watch.gated:
            return
        if self.asynchronous:
            self.ended += 1
            if self._open() and self._event is not None:
                self.together = max(self.together, self.arrived)
                self._event.set()
            return
        with self._condition:
            self.ended += 1
            self._condition.notify_all()


def _connection_key(conn: Connection) -> int:
    return id(conn)


def _ignored(watch: Watch, context: Any) -> bool:
    """Whether the statement touches only tables the watch ignores."""
    if not watch.ignore:
        return False
    statement = getattr(getattr(context, "compiled", None), "statement", None)
    table = getattr(statement, "table", None)
    if table is not None:
        return table in watch.ignore
    froms = getattr(statement, "get_final_froms", None)
    tables = set(froms()) if froms is not None else set()
    return bool(tables) and tables <= watch.ignore


def _before(conn: Connection, cursor: Any, statement: str, context: Any, **_: Any) -> None:
    watch = CURRENT.get()
    if watch is None or _ignored(watch, context):
        return
    kind = statement_kind(statement)
    watch.kinds.append(kind)
    if kind == "read" and watch.claim_rows is None:
        watch.read_before_write = True
    if kind == "write" and watch.claim_rows is None and not watch.gated:
        watch.gated = True
        watch.claim = " ".join(statement.split())[:200]
        if watch.gate is not None:
            watch.gate.arrive()


def _after(conn: Connection, cursor: Any, statement: str, context: Any, **_: Any) -> None:
    watch = CURRENT.get()
    if watch is None or statement_kind(statement) != "write" or _ignored(watch, context):
        return
    rows = statement_rowcount(cursor, context)
    if watch.claim_rows is None:
        watch.claim_rows = rows
    if rows != 0:
        key = _connection_key(conn)
        watch.pending[key] = watch.pending.get(key, 0) + (rows if rows > 0 else 1)


def _commit(conn: Connection) -> None:
    watch = CURRENT.get()
    if watch is None:
        return
    rows = watch.pending.get(_connection_key(conn), 0)
    if rows and watch.on_commit is not None:
        watch.on_commit(watch)
    watch.pending.pop(_connection_key(conn), None)
    if rows:
        watch.commits.append(rows)


def _rollback(conn: Connection) -> None:
    watch = CURRENT.get()
    if watch is not None:
        watch.pending.pop(_connection_key(conn), None)


#: The listeners, each taking the event's arguments by name (``named=True``).
_LISTENERS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("before_cursor_execute", _before),
    ("after_cursor_execute", _after),
    ("commit", _commit),
    ("rollback", _rollback),
)
_active = 0
_lock = threading.Lock()


@contextmanager
def observing() -> Iterator[None]:
    """Listen to every engine's statements while the block runs (re-entrant)."""
    global _active
    with _lock:
        if _active == 0:
            for name, listener in _LISTENERS:
                event.listen(Engine, name, listener, named=True)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                for name, listener in _LISTENERS:
                    event.remove(Engine, name, listener)
