"""What the sync and asyncio Redis Streams consumers share: every command, every reply.

The consumers differ only in how a command reaches the server (``client.xack(...)`` or
``await client.xack(...)``). Everything else lives here, once: the settings, the entry →
:class:`~sa_inbox.brokers.Delivery` mapping, the settler, and the consumer-group steps
written as generators that *yield* the commands to run (a :class:`Call`, or a
:class:`Batch` of them sent as one pipeline) and get the replies back. The sync
consumer drives them with :func:`drive`, the asyncio one with its awaiting twin.

Redis rules relied on, from the "Redis Streams" tutorial (redis.io/docs/latest/develop/
data-types/streams/, sections "Consumer groups", "Recovering from permanent failures",
"Automatic claiming", "Claiming and the delivery counter") and the XREADGROUP, XAUTOCLAIM and
XPENDING command pages, each checked on Redis 7.0.15 by ``tests/backends/brokers/test_redis.py``:

- ``XREADGROUP ... >`` delivers entries never delivered to the group, adds each to the
  group's pending entries list (PEL) with a delivery counter of 1;
- an entry stays pending until ``XACK``; ``XAUTOCLAIM`` hands entries idle for at least
  ``min-idle-time`` milliseconds to another consumer and increments their delivery counter
  (``JUSTID`` would not: it is not used), so a dead consumer's entries come back, counted;
- ``XPENDING key group start end count`` reports each pending entry's times-delivered counter;
- a Lua script runs atomically: no other client's command runs while it does ("Scripting
  with Lua", redis.io/docs/latest/develop/interact/programmability/eval-intro/), and a
  ``redis.call()`` that fails raises and ends the script, so the commands after it do not
  run ("Redis Lua API reference", ``redis.call``). A dead letter is therefore one script,
  :data:`DEAD_LETTER_SCRIPT`, not a ``MULTI``/``EXEC``: Redis does not roll a transaction
  back when one of its commands fails at run time ("Transactions", "Errors inside a
  transaction"; the "EXECABORT error" page: "a WRONGTYPE error makes only that command
  fail. The other commands still run"), and on Redis 7.0.15 a ``MULTI; XADD; XACK; EXEC``
  whose ``XADD`` hit a dead-letter key of the wrong type still acked the entry, which was
  then lost.
"""

from __future__ import annotations

import abc
import functools
import logging
import os
import socket
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import redis.exceptions
from redis.exceptions import ResponseError

from ... import steps
from ...claim import Inbox
from ...exc import InvalidArgument
from ...exc import InvalidStreamSettings as InvalidStreamSettings
from ...outage import OutageGate
from ...validation import positive_int, positive_seconds
from ..delivery import DeadLetterReason, Delivery
from ..keys import KeylessStreak, read_key
from ..options import DeliveryOptions, options_of
from ..process import DEFAULT_MAX_DELIVERIES
from ..reconnect import Reconnecting, Reconnects
from ..startup import ClientKind, check_client, check_consumer, default_name

__all__ = [
    "CLIENT",
    "DEAD_LETTER_FIELDS",
    "DEAD_LETTER_SCRIPT",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_BLOCK_TIMEOUT",
    "DEFAULT_BODY_FIELD",
    "DEFAULT_KEY_FIELD",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "LEAVE_SCRIPT",
    "Batch",
    "Call",
    "ConsumerBase",
    "Entry",
    "RedisSettler",
    "StreamCore",
    "StreamSettings",
    "drive",
    "run_call",
    "to_delivery",
]

#: The Redis clients: redis-py's blocking one and its asyncio one.
CLIENT = ClientKind(
    broker="Redis",
    method="xreadgroup",
    asyncio_module="redis.asyncio",
    blocking="a redis.Redis client",
    asyncio="a redis.asyncio.Redis client",
)

#: The stream field holding the producer's dedup key, by default.
DEFAULT_KEY_FIELD = "message_id"
#: The stream field holding the message body, by default (absent: an empty body).
DEFAULT_BODY_FIELD = "body"
#: Seconds an entry stays pending (unacked) before another consumer may take it over.
DEFAULT_VISIBILITY_TIMEOUT = 30.0
#: Seconds one ``XREADGROUP`` waits for new entries (so a stop is seen within this).
DEFAULT_BLOCK_TIMEOUT = 1.0
#: Entries fetched per read (``COUNT``).
DEFAULT_BATCH_SIZE = 10

#: The fields a dead letter carries besides the original entry's fields: why, the one-line
#: detail, the entry's id and delivery count, and the stream it came from (where
#: :func:`sa_inbox.brokers.dead_letters.replay` puts it back).
DEAD_LETTER_FIELDS = (
    "dead_letter_reason",
    "dead_letter_detail",
    "dead_letter_original_id",
    "dead_letter_delivery_count",
    "dead_letter_source",
)

#: The dead letter, atomically. KEYS: dead-letter stream, stream. ARGV: group, entry id, then
#: the dead letter's fields and values. Returns the dead letter's id, or nil if the entry
#: was not pending (nothing done). A failing XADD (wrong key type) ends it before the XACK.
DEAD_LETTER_SCRIPT = """
if #redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then
  return false
end
local dead = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
return dead
"""

#: A consumer leaving its group: ``XGROUP DELCONSUMER`` only if it has no pending entries
#: (deleting a consumer drops its pending entries, which would then never come back).
#: KEYS: stream. ARGV: group, consumer. Returns 1 if it left, 0 if it was kept.
LEAVE_SCRIPT = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

logger = logging.getLogger("sa_inbox.brokers.redis")

T = TypeVar("T")
ClientT = TypeVar("ClientT")
SessionT = TypeVar("SessionT")


@dataclass(frozen=True)
class Call:
    """One redis-py client method call, ``getattr(client, method)(*args, **kwargs)``."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Batch:
    """Several independent calls in one round trip (a pipeline, not a transaction). The reply
    is the list of their replies."""

    calls: tuple[Call, ...]


#: A consumer-group step: yields calls, receives their replies, returns ``T``.
Step = Generator[Call | Batch, Any, T]


@dataclass(frozen=True)
class Entry:
    """One delivered stream entry: its id, its fields as the client returned them (bytes or
    str, per ``decode_responses``), and the group's times-delivered counter for it."""

    entry_id: str
    fields: Mapping[Any, Any]
    times_delivered: int


@dataclass(frozen=True)
class StreamSettings:
    """One consumer's configuration (see :class:`~sa_inbox.brokers.redis.Consumer`
    for each parameter); checked on construction.

    :raises InvalidArgument: for an empty stream / group / member / field name, a
        dead-letter stream equal to the stream, a timeout, batch size or ``max_deliveries``
        that is not > 0.
    """

    stream: str
    group: str
    member: str
    key_field: str = DEFAULT_KEY_FIELD
    body_field: str = DEFAULT_BODY_FIELD
    dead_letter_stream: str = ""
    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT
    block_timeout: float = DEFAULT_BLOCK_TIMEOUT
    batch_size: int = DEFAULT_BATCH_SIZE
    max_deliveries: int = DEFAULT_MAX_DELIVERIES
    start_id: str = "0"

    def __post_init__(self) -> None:
        for name in ("stream", "group", "member", "key_field", "body_field", "start_id"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise InvalidArgument(f"{name} must be a non-empty string")
        if not self.dead_letter_stream:
            object.__setattr__(self, "dead_letter_stream", f"{self.stream}:dead")
        if self.dead_letter_stream == self.stream:
            raise InvalidArgument("dead_letter_stream must differ from the stream")
        for name in ("visibility_timeout", "block_timeout"):
            positive_seconds(getattr(self, name), name, InvalidArgument)
        for name in ("batch_size", "max_deliveries"):
            positive_int(getattr(self, name), name, InvalidArgument)

    @property
    def min_idle_ms(self) -> int:
        """``XAUTOCLAIM``'s min-idle-time: the visibility timeout in milliseconds."""
        return max(1, round(self.visibility_timeout * 1000))

    @property
    def block_ms(self) -> int:
        """``XREADGROUP``'s ``BLOCK``, in milliseconds (never 0, which blocks forever)."""
        return max(1, round(self.block_timeout * 1000))


def default_member() -> str:
    """A consumer name unique to this process and instance: ``host-pid-random``."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# -- the entry → Delivery mapping --------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def to_delivery(entry: Entry, settings: StreamSettings) -> Delivery:
    """The :class:`~sa_inbox.brokers.Delivery` for one stream entry.

    :param entry: the entry and its times-delivered counter.
    :param settings: which field holds the key (``key_field``) and which the body.
    :returns: ``message_id`` from the key field (None when absent; None with a
        :attr:`~sa_inbox.brokers.Delivery.key_error`, so dead-lettered
        ``invalid_message_id``, when not UTF-8), ``body`` from the body field as bytes (``b""`` when
        absent), ``delivery_count`` from the counter, ``headers`` every field decoded as
        UTF-8 text, ``broker_ref`` ``stream/entry-id`` (for logs; never the key).
    """
    fields = {_text(name): value for name, value in entry.fields.items()}
    key = fields.get(settings.key_field)
    body = fields.get(settings.body_field, b"")
    message_id, key_error = read_key(key)
    return Delivery(
        message_id=message_id,
        body=body if isinstance(body, bytes) else str(body).encode(),
        delivery_count=max(1, entry.times_delivered),
        headers={name: _text(value) for name, value in fields.items()},
        broker_ref=f"{settings.stream}/{entry.entry_id}",
        key_error=key_error,
    )


# -- settling ----------------------------------------------------------------------------


def ack_call(settings: StreamSettings, entry: Entry) -> Call:
    """``XACK stream group id``: the group forgets the entry."""
    return Call("xack", (settings.stream, settings.group, entry.entry_id))


def give_back_call(settings: StreamSettings, entry: Entry) -> Call:
    """``XCLAIM`` the entry to this member, idle for the visibility timeout, its delivery
    counter set back by one (see :meth:`RedisSettler.give_back`)."""
    return Call(
        "xclaim",
        (settings.stream, settings.group, settings.member, 0, [entry.entry_id]),
        {
            "idle": settings.min_idle_ms,
            "retrycount": max(0, entry.times_delivered - 1),
            "justid": True,
        },
    )


def touch_call(settings: StreamSettings, entries: Sequence[Entry]) -> Call:
    """``XCLAIM stream group member 0 id… JUSTID``: the entries stay this member's, their
    idle time set back to 0 so no ``XAUTOCLAIM`` takes them over, their delivery counters
    untouched (XCLAIM command page: ``JUSTID`` "the retry counter is not incremented")."""
    return Call(
        "xclaim",
        (settings.stream, settings.group, settings.member, 0, [e.entry_id for e in entries]),
        {"justid": True},
    )


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a lost or refused Redis connection (redis-py's ``ConnectionError``
    and ``TimeoutError``, ``BusyLoadingError`` while a restarted server loads its data) or
    a group that vanished with a server restarted without its data (``NOGROUP``): the
    consumer reconnects, creating the group again if needed."""
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith("NOGROUP")


def dead_letter_call(
    settings: StreamSettings, entry: Entry, reason: DeadLetterReason, detail: str
) -> Call:
    """:data:`DEAD_LETTER_SCRIPT` for one entry: ``XADD`` it to the dead-letter stream with the
    original fields plus :data:`DEAD_LETTER_FIELDS`, then ``XACK`` it, atomically; nothing
    if the entry is no longer pending (another consumer settled it meanwhile).

    The entry is thus either in the dead-letter stream and acked, or neither (still pending,
    so it comes back): never lost, never dead-lettered twice. An entry of more than 3,990
    fields exceeds Lua's ``unpack`` limit ("too many results to unpack" on Redis 7.0.15): the
    script fails, the settler raises, and the entry stays pending.
    """
    return Call(
        "eval",
        dead_letter_script_arguments(
            settings.stream, settings.group, settings.dead_letter_stream, entry, reason, detail
        ),
    )


def dead_letter_script_arguments(
    stream: str,
    group: str,
    dead_letter_stream: str,
    entry: Entry,
    reason: DeadLetterReason,
    detail: str,
) -> tuple[Any, ...]:
    """``EVAL``'s arguments for :data:`DEAD_LETTER_SCRIPT` (the script, the number of keys,
    the keys, then group, entry id and the dead letter's fields): ``client.eval(*args)``.

    Shared with the FastStream middleware (:mod:`sa_inbox.brokers.faststream`), whose Redis
    dead letters are the same atomic ``XADD`` + ``XACK``.
    """
    fields: dict[Any, Any] = dict(entry.fields)
    fields.update(
        dead_letter_reason=reason.value,
        dead_letter_detail=detail,
        dead_letter_original_id=entry.entry_id,
        dead_letter_delivery_count=str(entry.times_delivered),
        dead_letter_source=stream,
    )
    flat = [item for pair in fields.items() for item in pair]
    return (DEAD_LETTER_SCRIPT, 2, dead_letter_stream, stream, group, entry.entry_id, *flat)


class RedisSettler:
    """The :class:`~sa_inbox.brokers.Settler` of one entry, on a call runner.

    :param settings: the consumer's settings.
    :param entry: the entry.
    :param run: runs a :class:`Call` / :class:`Batch`: the sync consumer's returns the reply,
        the asyncio consumer's a coroutine (which :func:`~sa_inbox.brokers.process_async`
        awaits).
    """

    def __init__(
        self, settings: StreamSettings, entry: Entry, run: Callable[[Call | Batch], Any]
    ) -> None:
        self._settings = settings
        self._entry = entry
        self._run = run

    def ack(self) -> Any:
        """``XACK`` (after the commit)."""
        return self._run(ack_call(self._settings, self._entry))

    def retry(self) -> None:
        """Nothing: the entry stays pending, and ``XAUTOCLAIM`` hands it out again once it
        has been idle for the visibility timeout (with its delivery counter incremented)."""

    def give_back(self) -> Any:
        """Leave it pending, uncounted and free to take at once (a run of keyless entries):
        ``XCLAIM ... IDLE <visibility timeout> RETRYCOUNT <times delivered - 1>`` sets the
        entry's idle time and delivery counter (XCLAIM command page), so the next
        ``XAUTOCLAIM`` of the group hands it out now with the counter it had."""
        return self._run(give_back_call(self._settings, self._entry))

    def dead_letter(self, reason: DeadLetterReason, detail: str) -> Any:
        """``XADD`` to the dead-letter stream and ``XACK``, in one Lua script."""
        return self._run(dead_letter_call(self._settings, self._entry, reason, detail))


# -- the consumer-group steps ------------------------------------------------------------


class StreamCore:
    """The consumer-group protocol as steps (generators yielding calls), for either client.

    Holds the ``XAUTOCLAIM`` cursor between batches, so a long pending list is scanned a
    batch at a time rather than from the start each time.
    """

    def __init__(self, settings: StreamSettings) -> None:
        self.settings = settings
        self._cursor = "0-0"

    def ensure_group(self) -> Step[None]:
        """``XGROUP CREATE stream group start-id MKSTREAM``; an existing group is kept
        (Redis answers ``BUSYGROUP``)."""
        s = self.settings
        try:
            yield Call("xgroup_create", (s.stream, s.group), {"id": s.start_id, "mkstream": True})
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def leave_group(self) -> Step[bool]:
        """Remove this member from the group if nothing is pending to it (:data:`LEAVE_SCRIPT`),
        so members of stopped consumers do not pile up in ``XINFO CONSUMERS``; a member with
        pending entries (failed ones waiting for their retry) stays, for them to be taken
        over. Returns whether it left."""
        s = self.settings
        left = yield Call("eval", (LEAVE_SCRIPT, 1, s.stream, s.group, s.member))
        return bool(left)

    def next_batch(self, *, block: bool = True) -> Step[list[Entry]]:
        """Up to ``batch_size`` entries: first those pending longer than the visibility
        timeout (any consumer's, taken over by ``XAUTOCLAIM``, counted by ``XPENDING``), then
        new ones (``XREADGROUP >``, counter 1), blocking up to ``block_timeout`` only when
        nothing was taken over and ``block`` is true.

        A pending entry deleted from the stream meanwhile (``XDEL``, or trimmed by
        ``MAXLEN``/``XTRIM``) is dropped from the pending list by ``XAUTOCLAIM`` itself
        (Redis >= 7.0 returns its id apart): it is logged, it cannot be dead-lettered."""
        s = self.settings
        reply = yield Call(
            "xautoclaim",
            (s.stream, s.group, s.member, s.min_idle_ms),
            {"start_id": self._cursor, "count": s.batch_size},
        )
        self._cursor = _text(reply[0])
        if len(reply) > 2 and reply[2]:
            logger.warning(
                "stream %s: pending entries deleted from the stream, dropped by XAUTOCLAIM: %s",
                s.stream,
                ", ".join(_text(i) for i in reply[2]),
                extra={"action": "deleted_pending"},
            )
        entries = yield from self._counted([(_text(i), f) for i, f in reply[1] if f is not None])
        room = s.batch_size - len(entries)
        if room > 0:
            wait = s.block_ms if block and not entries else None
            reply = yield Call(
                "xreadgroup", (s.group, s.member, {s.stream: ">"}), {"count": room, "block": wait}
            )
            entries += [Entry(_text(i), f or {}, 1) for i, f in _stream_entries(reply)]
        return entries

    def _counted(self, claimed: Sequence[tuple[str, Any]]) -> Step[list[Entry]]:
        """The claimed entries with their times-delivered counters, from one XPENDING each
        (pipelined)."""
        if not claimed:
            return []
        s = self.settings
        replies = yield Batch(
            tuple(
                Call("xpending_range", (s.stream, s.group), {"min": i, "max": i, "count": 1})
                for i, _ in claimed
            ),
        )
        return [  # not pending any more: acked meanwhile, a duplicate whatever its count
            Entry(i, fields, int(pending[0]["times_delivered"]) if pending else 2)
            for (i, fields), pending in zip(claimed, replies, strict=True)
        ]


def _stream_entries(reply: Any) -> list[tuple[Any, Any]]:
    """The ``(id, fields)`` pairs of an XREADGROUP reply on one stream (RESP2: a list of
    ``[stream, entries]``; RESP3: a dict ``{stream: [entries]}``)."""
    if not reply:
        return []
    if isinstance(reply, Mapping):
        return [pair for entries in reply.values() for batch in entries for pair in batch]
    return [pair for _, entries in reply for pair in entries]


# -- the consumers' shared half ----------------------------------------------------------

#: Why a Redis consumer refuses ``DeliveryOptions.retry_delay``: a failed entry stays
#: pending and comes back when ``XAUTOCLAIM`` takes it over, after ``visibility_timeout``.
NO_RETRY_DELAY = "a failed entry comes back by XAUTOCLAIM after visibility_timeout"


class ConsumerBase(Reconnecting, abc.ABC, Generic[ClientT, SessionT]):
    """Consume one Redis stream through a consumer group, exactly once in effect.

    Each entry becomes a :class:`~sa_inbox.brokers.Delivery` keyed on the producer's field
    ``options.key_source`` (never the entry id) and goes through :func:`sa_inbox.brokers.process`
    (:func:`~sa_inbox.brokers.process_async`): claim, ``handler(session, delivery)``, commit,
    then ``XACK``. A failed entry is left pending; once idle for ``visibility_timeout`` it is
    taken over by ``XAUTOCLAIM`` (by this or another consumer of the group) with its delivery
    counter incremented, and on the ``max_deliveries``-th failure it is moved to the
    dead-letter stream (``XADD`` + ``XACK`` in one Lua script) with its reason, so the
    entries behind it are not blocked. An entry without the key field is dead-lettered
    ``missing_message_id``, unprocessed.

    The group is created if missing (``XGROUP CREATE ... MKSTREAM``, from ``start_id``).
    Several consumers (threads or processes, each with its own ``member`` name) may share the
    group: Redis gives each new entry to one of them, and the inbox claim makes a duplicate
    publish, or a taken-over entry that had already committed, an acked duplicate.

    :param client: the redis-py client (``decode_responses`` either way).
    :param stream: the stream's key.
    :param group: the consumer group's name.
    :param session_factory: a ``sessionmaker`` (``async_sessionmaker`` for asyncio).
    :param inbox: the inbox to claim in.
    :param handler: ``handler(session, delivery)``, the business change (must not commit;
        ``async def`` for asyncio).
    :param consumer_name: the inbox's consumer name; default the group's name (all members
        of a group are one logical consumer).
    :param member: this consumer's name in the group; default ``host-pid-random``.
    :param body_field: the field holding the body (default ``body``; absent: ``b""``).
    :param visibility_timeout: seconds an entry stays pending before it may be taken over
        (``XAUTOCLAIM``'s min-idle-time, sent in ms); a failed entry is retried after it
        too. An entry's idle time runs from its delivery, and the entries of a batch wait
        while the ones before them are handled: make it longer than a whole batch takes
        (``batch_size`` times your slowest transaction, lock waits included), or entries still
        waiting in a batch are also handed to another consumer (safe: the claim makes the
        later one a duplicate; but wasted work, and their delivery counts grow).
    :param block_timeout: seconds one ``XREADGROUP`` blocks waiting for entries (a stop is
        seen within it).
    :param batch_size: entries per read (``COUNT``).
    :param start_id: where a newly created group starts (``"0"``: the whole stream; ``"$"``:
        only entries added later).
    :param options: the settings every consumer shares
        (:class:`~sa_inbox.brokers.DeliveryOptions`): ``key_source`` is the entry field
        holding the producer's key (default ``message_id``), ``dead_letter`` the dead-letter
        stream (default ``<stream>:dead``); ``retry_delay`` is refused (a failed entry comes
        back after ``visibility_timeout``). ``max_keyless`` is below.
    **Outages and reconnects.** While the database cannot be reached the entry in hand stays
    pending, uncounted: the consumer reads nothing new, and every third of
    ``visibility_timeout`` sets the idle time of its batch's unsettled entries back to 0
    (:func:`touch_call`), so no member's ``XAUTOCLAIM`` takes them over and counts them
    (:mod:`sa_inbox.outage`). A lost Redis connection (a restart) is redis-py's to make
    again, on the next command of its pool; ``run()`` waits with back-off between polls
    that fail so (:class:`~sa_inbox.brokers.reconnect.Reconnects`), one WARNING when it is
    lost and one INFO when it is back, and creates the group again if it vanished. What was
    unsettled stays pending and comes back by ``XAUTOCLAIM`` after ``visibility_timeout``,
    counted as Redis counts a claim. A Redis that kept no data (no AOF, no RDB) has lost the
    stream's entries: no consumer can bring those back.

    **Keyless entries.** With ``options.max_keyless``, entries without the key field (or
    with one that is not UTF-8) since the last keyed one, however far apart, after which
    ``run()`` / ``poll()`` gives back those it holds (left pending, their delivery counters
    as they were, free to take at once: see :meth:`RedisSettler.give_back`) and raises
    :class:`~sa_inbox.exc.MissingKeyHeader`: a misspelled ``key_source``. A keyed entry, or
    a read that brings nothing, settles those held as the producer's (dead-lettered
    ``missing_message_id``) and the run counts on: at most ``max_keyless - 1`` of a run are
    dead-lettered (:mod:`sa_inbox.brokers.keys`). None: each keyless entry is dead-lettered
    at once.

    :raises InvalidArgument: for invalid settings (see :class:`StreamSettings`).
    :raises ConfigurationError: when it is made, before any command or SQL, for objects it
        cannot use: a Redis client of the other half
        (:class:`~sa_inbox.exc.SyncAsyncMismatch`) or no Redis client
        (:class:`~sa_inbox.exc.InvalidObject`), a session factory of the other half or
        ``Session.begin``
        (:class:`~sa_inbox.exc.InvalidSessionFactory`), an asyncio inbox given to the sync
        consumer (:class:`~sa_inbox.exc.SyncAsyncMismatch`; the asyncio consumer takes an
        Inbox or its AsyncInbox), a handler that cannot take ``(session, delivery)``
        (:class:`~sa_inbox.exc.InvalidHandler`), ``options`` that are not a DeliveryOptions
        or set ``retry_delay`` (:class:`~sa_inbox.exc.InvalidArgument`).

    **Readiness.** ``run()`` first runs ``check()`` (the inbox table exists, the session
    factory makes sessions of the consumer's half, the engine is not autocommit, the handler
    fits): a consumer set up wrongly fails before it reads an entry. Call ``check()``
    (``await`` it on the asyncio consumer) from a health endpoint too.
    """

    #: True for the asyncio consumer (its session factory, inbox and handler).
    asynchronous = False

    def __init__(
        self,
        client: ClientT,
        stream: str,
        *,
        group: str,
        session_factory: Callable[[], SessionT],
        inbox: Inbox,
        handler: Callable[[SessionT, Delivery], Any],
        consumer_name: str | None = None,
        member: str | None = None,
        body_field: str = DEFAULT_BODY_FIELD,
        visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT,
        block_timeout: float = DEFAULT_BLOCK_TIMEOUT,
        batch_size: int = DEFAULT_BATCH_SIZE,
        start_id: str = "0",
        options: DeliveryOptions | None = None,
    ) -> None:
        entry = f"{type(self).__name__}()"
        shared = options_of(options, entry, refused=[("retry_delay", NO_RETRY_DELAY)])
        key_field = shared.key(DEFAULT_KEY_FIELD)
        self.settings = StreamSettings(
            stream,
            group,
            member or default_member(),
            key_field,
            body_field,
            shared.dead_letter or "",
            visibility_timeout,
            block_timeout,
            batch_size,
            shared.limit(),
            start_id,
        )
        check_client(client, CLIENT, asynchronous=self.asynchronous, entry=entry)
        name = default_name(consumer_name, group)
        self.readiness = check_consumer(
            entry,
            session_factory=session_factory,
            inbox=inbox,
            handler=handler,
            consumer_name=name,
            max_deliveries=shared.limit(),
            asynchronous=self.asynchronous,
        )
        self.client = client
        self._core = StreamCore(self.settings)
        self._streak = KeylessStreak(key_field, shared.max_keyless)
        self._process_kw: dict[str, Any] = {
            "session_factory": session_factory,
            "inbox": self.readiness.inbox,
            "consumer_name": name,
            "handler": handler,
            "max_deliveries": shared.limit(),
            "on_settled": shared.on_settled,
        }
        self._group_ready = False
        self._stop = self._stop_event()
        #: The entries of the batch in hand not settled yet (kept alive during an outage).
        self._unsettled: Sequence[Entry] = ()
        self.reconnects = Reconnects(f"Redis consumer {self.settings.member} of {stream}")
        self._process_kw["outage"] = OutageGate(
            name,
            hooks=self.readiness.inbox.hooks,
            sleep=self._outage_sleep,
            keep_alive=self._keep_alive,
            keep_alive_every=self.settings.visibility_timeout / 3,
        )

    @abc.abstractmethod
    def _outage_sleep(self, seconds: float) -> Any:
        """The outage gate's wait, cut short by a stop (:class:`~sa_inbox.outage.OutageGate`)."""

    @abc.abstractmethod
    def _keep_alive(self) -> Any:
        """Keep the unsettled entries of the batch in hand this member's
        (:func:`touch_call`)."""

    def _connection_lost(self, exc: BaseException) -> bool:
        return is_connection_error(exc)

    def _lost(self, exc: BaseException) -> float:
        """A lost connection: the held keyless entries stay pending (they come back by
        XAUTOCLAIM); the group is checked again on the next poll. The seconds to wait."""
        self._streak.release()
        self._group_ready = False
        self._unsettled = ()
        return self.reconnects.failed(exc)

    @abc.abstractmethod
    def _stop_event(self) -> Any:
        """The event :meth:`stop` sets: each client's consumer makes its own kind
        (``threading.Event`` / ``asyncio.Event``)."""

    def stop(self) -> None:
        """Ask ``run()`` to return after the batch in hand (from the consumer's thread or
        event loop; for the sync consumer, from any thread)."""
        self._stop.set()

    def _delivery(self, entry: Entry, run: Callable[[Call | Batch], Any]) -> tuple[Delivery, Any]:
        """One entry's delivery and its settler, running calls with ``run``."""
        return to_delivery(entry, self.settings), RedisSettler(self.settings, entry, run)

    def _give_back_calls(self, entries: Sequence[Entry]) -> Batch:
        """Give back ``entries`` (the rest of a batch when a keyless run stopped the
        consumer): see :meth:`RedisSettler.give_back`."""
        return Batch(tuple(give_back_call(self.settings, entry) for entry in entries))


# -- the sync I/O edge -------------------------------------------------------------------


def run_call(client: Any, call: Call | Batch) -> Any:
    """Run one call (or a pipeline of several) on a sync ``redis.Redis``."""
    if isinstance(call, Batch):
        with client.pipeline(transaction=False) as pipe:
            for each in call.calls:
                getattr(pipe, each.method)(*each.args, **each.kwargs)
            return pipe.execute()
    return getattr(client, call.method)(*call.args, **call.kwargs)


def drive(step: Step[T], client: Any) -> T:
    """Run a step to its end on a sync client; a server error reply is thrown into it.

    :raises redis.RedisError: what the step does not handle.
    """
    return steps.drive(step, functools.partial(run_call, client), ResponseError)
