"""The :class:`Inbox`: the processed-messages table and the claim of a message by a consumer."""

from __future__ import annotations

import functools
import logging
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import UnboundExecutionError
from sqlalchemy.orm import Session, scoped_session
from sqlalchemy.sql.expression import Executable

from .checks import is_asyncio_object
from .collision import CollisionCheck, CollisionMode, check_mode
from .consumers import Consumers, consumers_flag, consumers_for
from .dialects import ClaimDialect, Strategy, claim_dialect_for, is_autocommit
from .dialects.driver_sql import DriverSQL
from .dialects.with_begin import statement_rowcount
from .exc import (
    AutocommitConnection,
    InvalidBind,
    InvalidMessageId,
    InvalidTable,
    InvalidTableType,
    MessageIdCollision,
)
from .hooks import InboxHooks, as_hooks
from .schema import (
    DEFAULT_MESSAGE_ID_LENGTH,
    DEFAULT_TABLE_NAME,
    REQUIRED_COLUMNS,
    claim_columns,
    processed_messages_table,
)
from .validation import bool_flag, validate_key, validate_keys

__all__ = [
    "Bind",
    "ClaimPath",
    "ClaimReport",
    "Inbox",
    "PreparedInsert",
    "connection_for",
    "message_id_of",
    "statement_rowcount",
]

#: What a claim runs on: a Session (or scoped_session) or Connection, in the caller's
#: transaction (never an AUTOCOMMIT one).
Bind = Session | scoped_session[Any] | Connection

#: A message of a broker poll, of the caller's type (see :meth:`Inbox.claim_batch`).
M = TypeVar("M")

_MISSING = object()

logger = logging.getLogger(__name__)


def message_id_of(message: object) -> Any:
    """The ``message_id`` attribute of ``message``: the default ``key`` of
    :meth:`Inbox.claim_batch` (the attribute of :class:`~sa_inbox.store.Incoming` and
    :class:`~sa_inbox.store.StoredMessage`).

    The value is returned as it is; the claim validates it.

    :param message: any object.
    :raises InvalidMessageId: if ``message`` has no ``message_id`` attribute.
    """
    value = getattr(message, "message_id", _MISSING)
    if value is _MISSING:
        raise InvalidMessageId(
            f"{type(message).__name__} has no message_id attribute: pass claim_batch(key=...), "
            "e.g. key=lambda m: m when the messages are the ids themselves"
        )
    return value


class Inbox:
    """The inbox of processed messages, defined on the caller's :class:`~sqlalchemy.MetaData`.

    ``inbox.table`` is the processed-messages table (see
    :func:`sa_inbox.schema.processed_messages_table`); create it with
    ``metadata.create_all()`` or through Alembic.

    :param metadata: the MetaData the table joins.
    :param table_name: the table's name.
    :param schema: the table's schema, or ``None``.
    :param message_id_length: length in characters of ``message_id`` and ``consumer_name``.
    :param strategy: ``"native"`` (default) for each backend's insert-or-skip statement;
        ``"savepoint"`` for the portable SAVEPOINT + INSERT form on every backend.
    :param on_collision: what a claim does when it carries a ``payload_hash`` that differs
        from the one stored with the id's earlier claim (two messages sharing an id, see
        :mod:`sa_inbox.collision`): ``"raise"`` (default)
        :class:`~sa_inbox.exc.MessageIdCollision`, or ``"record"`` a row in the
        ``inbox_collisions`` table (defined on the same MetaData) and skip the message.
    :param hooks: told of every claim (new, duplicate, collision, seconds) and used by
        :func:`sa_inbox.handle` for its spans and handler times (see
        :mod:`sa_inbox.hooks`); default the no-op hooks.
    :param consumers: record which handler owns each consumer name in the consumers table
        (``inbox_consumers``, defined on the same MetaData; :mod:`sa_inbox.consumers`):
        :func:`sa_inbox.handle` refuses a handler that is not the name's owner before it
        claims anything. ``False``: no such check (the caller keeps one handler per name).
    :param send_with_begin: send a claim that opens its transaction together with the
        transaction's ``BEGIN``, in one round trip, where the driver lets sa-inbox do so
        exactly as the driver would have sent both (psycopg 3, synchronous: see
        :mod:`sa_inbox.dialects.with_begin`); elsewhere, and with ``False``, a claim is one
        statement sent after the driver's own ``BEGIN``.
    :raises InvalidArgument: for an unknown ``strategy`` or ``on_collision``, a
        ``send_with_begin`` that is not a bool.
    :raises InvalidTable: for a ``consumers`` that is not a bool, or a table of the
        consumers table's name on the MetaData that is not one.

    Example::

        inbox = Inbox(Base.metadata)
        with Session(engine) as session, session.begin():
            if inbox.claim(session, message_id, "billing"):
                apply_payment(session, message)
        ack()   # only after the commit
    """

    def __init__(
        self,
        metadata: sa.MetaData | None = None,
        *,
        table_name: str = DEFAULT_TABLE_NAME,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
        strategy: Strategy = "native",
        table: sa.Table | None = None,
        on_collision: CollisionMode = "raise",
        hooks: InboxHooks | None = None,
        consumers: bool = True,
        send_with_begin: bool = True,
    ) -> None:
        consumers = consumers_flag(consumers)
        send_with_begin = bool_flag(send_with_begin, "send_with_begin")
        #: The hooks every claim reports to (:mod:`sa_inbox.hooks`).
        self.hooks: InboxHooks = as_hooks(hooks)
        if table is None:
            if metadata is None:
                raise InvalidTableType("Inbox() needs a MetaData (or table=)")
            table = processed_messages_table(
                metadata, table_name=table_name, schema=schema, message_id_length=message_id_length
            )
        self.table = table
        self.strategy: Strategy = strategy
        claim_dialect_for("", strategy)  # validate the strategy now, not at the first claim
        self._columns = claim_columns(table)
        self._max_lengths = {
            name: getattr(table.c[name].type, "length", None) or message_id_length
            for name in ("message_id", "consumer_name")
        }
        self._insert = PreparedInsert(
            table, strategy, row_keys=self._columns, with_begin=send_with_begin
        )
        self._consumers_seen: dict[str, str] = {}
        self.on_collision: CollisionMode = check_mode(on_collision)
        #: The duplicate path's digest comparison; None if the table has no payload_hash.
        self.collisions: CollisionCheck | None = (
            CollisionCheck(table, ("payload_hash",), _stored_digest, on_collision)
            if "payload_hash" in table.c
            else None
        )
        self._claims = ClaimPath(self._insert, self.collisions, single=True)
        #: The owner of each consumer name (:mod:`sa_inbox.consumers`), or None.
        self.consumers: Consumers | None = consumers_for(
            table, self._max_lengths["consumer_name"], consumers
        )

    @classmethod
    def for_table(
        cls,
        table: sa.Table,
        *,
        strategy: Strategy = "native",
        on_collision: CollisionMode = "raise",
        hooks: InboxHooks | None = None,
        consumers: bool = True,
        send_with_begin: bool = True,
    ) -> Inbox:
        """An Inbox over an existing table, such as one mapped with
        :class:`~sa_inbox.schema.InboxMessageMixin`.

        :param consumers: as :class:`Inbox`: the consumers table joins ``table``'s MetaData.
        :param send_with_begin: as :class:`Inbox`.
        :raises InvalidTable: if ``table`` lacks a required column or its primary key is
            not exactly ``(message_id, consumer_name)``; :class:`~sa_inbox.exc.InvalidTableType`
            if it is not a Table.
        """
        if not isinstance(table, sa.Table):
            raise InvalidTableType(
                f"Inbox.for_table() takes a Table, not {type(table).__name__} (an Inbox's table "
                "is inbox.table)"
            )
        missing = [name for name in REQUIRED_COLUMNS if name not in table.c]
        if missing:
            raise InvalidTable(f"table {table.name!r} lacks the columns {missing}")
        key = [column.name for column in table.primary_key.columns]
        if sorted(key) != ["consumer_name", "message_id"]:
            raise InvalidTable(
                f"table {table.name!r} must have the primary key (message_id, consumer_name), "
                f"not {key}"
            )
        return cls(
            table=table,
            strategy=strategy,
            on_collision=on_collision,
            hooks=hooks,
            consumers=consumers,
            send_with_begin=send_with_begin,
        )

    # -- claims -------------------------------------------------------------------------

    def claim(
        self,
        bind: Bind,
        message_id: str,
        consumer_name: str,
        *,
        message_type: str | None = None,
        correlation_id: str | None = None,
        payload_hash: bytes | None = None,
    ) -> bool:
        """Claim ``message_id`` for ``consumer_name`` inside the caller's transaction.

        One statement (plus, on MySQL/MariaDB, ``SHOW WARNINGS`` only when the server
        reported warnings other than a duplicate's, see
        :meth:`~sa_inbox.dialects.MySQLClaim.claim_one`). Never commits or rolls back the
        caller's transaction: the claim becomes durable with the caller's commit, together
        with the business change.

        :param bind: a Session, scoped_session or Connection, in (or auto-beginning) the
            caller's transaction.
        :param message_id: the producer-assigned id, at most ``message_id_length`` characters.
        :param consumer_name: the consumer (handler) name; one message can be processed once
            per consumer.
        :param message_type: optional, stored for debugging (at most 255 characters).
        :param correlation_id: optional, stored for debugging (at most 255 characters).
        :param payload_hash: optional digest of the payload (at most 64 bytes; see
            :func:`sa_inbox.collision.payload_hash`). When given and the id is already
            claimed, the stored digest is read (one locking read, on the duplicate path
            only) and compared: a difference is a collision (see ``on_collision``).
        :returns: True if this transaction now owns the message; False if an earlier delivery
            already committed it (a duplicate: skip the handler, then ack), or for a
            collision recorded with ``on_collision="record"``.
        :raises MessageIdCollision: with ``on_collision="raise"``, when ``payload_hash``
            differs from the stored one: roll back and nack.
        :raises InvalidMessageId: for an invalid ``message_id`` or ``consumer_name``, before
            any SQL.
        :raises TransientClaimError: on a serialization failure or deadlock: roll back and
            retry the whole transaction.
        :raises ClaimWarning: on MySQL/MariaDB, for a warning other than duplicate key.
        :raises AutocommitConnection: if ``bind`` commits each statement on its own
            (SQLAlchemy's AUTOCOMMIT or the driver's own autocommit; the claim would commit
            apart from the business change).
        :raises InvalidBind: if ``bind`` is not a Session, scoped_session or Connection.
        """
        row = self.validate(
            message_id,
            consumer_name,
            message_type=message_type,
            correlation_id=correlation_id,
            payload_hash=payload_hash,
        )
        digest = row.get("payload_hash")
        return self._claims.one(bind, row, digest, self.hooks)

    def claim_many(
        self,
        bind: Bind,
        message_ids: Iterable[str],
        consumer_name: str,
        *,
        payload_hashes: Mapping[str, bytes | None] | None = None,
    ) -> set[str]:
        """Claim a batch of messages (one broker poll) for ``consumer_name``.

        Ids are de-duplicated and sent sorted, so two batches with overlapping ids lock in
        the same order and cannot deadlock. PostgreSQL, SQLite (3.35+) and MariaDB (10.5+)
        run one ``INSERT … RETURNING message_id`` per 1000 ids; MySQL 8 and Oracle, which
        cannot return the inserted rows of an insert-or-skip, run one statement per id.

        :param bind: a Session or Connection in the caller's transaction.
        :param message_ids: any iterable of ids (duplicates within it are allowed).
        :param consumer_name: the consumer.
        :param payload_hashes: optional ``message_id -> digest`` (as ``payload_hash`` of
            :meth:`claim`): stored with the new claims, and compared, in one locking read
            on the duplicate path only, for the ids already claimed.
        :returns: exactly the ids newly claimed by this call (the set of ids returned by the
            database, never inferred from positions).
        :raises InvalidMessageId: if any id, digest or the consumer name is invalid (nothing
            is sent).
        :raises TransientClaimError: as :meth:`claim`.
        :raises MessageIdCollision: as :meth:`claim`, for the first colliding id (sorted).
        """
        consumer = validate_key(consumer_name, "consumer_name", self._max_lengths["consumer_name"])
        ids = validate_keys(message_ids, "message_id", self._max_lengths["message_id"])
        if not ids:
            return set()
        digests = self._digests(ids, payload_hashes)
        rows: list[dict[str, Any]] = [{"message_id": mid, "consumer_name": consumer} for mid in ids]
        if digests:
            for row in rows:
                row["payload_hash"] = digests.get(row["message_id"])
        return self._claims.many(bind, rows, digests, self.hooks)

    def _digests(
        self, ids: Iterable[str], payload_hashes: Mapping[str, bytes | None] | None
    ) -> dict[str, bytes]:
        """The validated non-None digests of ``ids`` ({} without a payload_hash column)."""
        if not payload_hashes or self.collisions is None:
            return {}
        digests = {mid: _optional_bytes(payload_hashes.get(mid)) for mid in ids}
        return {mid: digest for mid, digest in digests.items() if digest is not None}

    def claim_batch(
        self,
        bind: Bind,
        messages: Iterable[M],
        consumer_name: str,
        *,
        key: Callable[[M], str] = message_id_of,
        payload_hash: Callable[[M], bytes | None] | None = None,
    ) -> list[M]:
        """Claim a broker poll for ``consumer_name`` and return the messages to process.

        The poll may carry one id more than once (a producer retry, a redelivery inside
        the same poll). Applying every message whose id :meth:`claim_many` reports as new
        would apply such an id once per copy; this returns each newly claimed id's *first*
        message only, in poll order, so ``for m in inbox.claim_batch(...): apply(m)``
        applies every new id exactly once. Ids already claimed by a committed transaction
        are left out. The claim itself is :meth:`claim_many`'s (same statement, same lock
        order, same backends).

        :param bind: a Session, scoped_session or Connection in the caller's transaction.
        :param messages: the poll, in delivery order: any iterable (read once) of messages
            of any type; a bare ``str`` or ``bytes`` is refused.
        :param consumer_name: the consumer.
        :param key: ``message -> message_id``. The default, :func:`message_id_of`, reads
            the ``message_id`` attribute (as on :class:`~sa_inbox.store.Incoming`); pass e.g.
            ``key=operator.attrgetter("id")``, ``key=lambda m: m.key().decode()``, or, when
            the messages are the ids themselves, ``key=lambda m: m``. Its own exceptions
            propagate unchanged, before any SQL.
        :param payload_hash: optional ``message -> digest`` (e.g. ``lambda m:
            sa_inbox.collision.payload_hash(m.body)``): the digests are stored and compared
            as :meth:`claim_many`'s; two copies of one id within the poll with different
            digests are a collision too (the later copy is the colliding one).
        :returns: a new list of the messages whose id this call newly claimed, the first
            occurrence of each id, in poll order (empty if nothing is new).
        :raises InvalidMessageId: if ``messages`` is a ``str``/``bytes`` or not iterable,
            a message has no ``message_id`` (default ``key``), ``key`` returns an invalid
            id, or ``consumer_name`` is invalid; nothing is sent.
        :raises TransientClaimError: as :meth:`claim`.
        :raises MessageIdCollision: as :meth:`claim`.

        Example::

            with Session.begin() as session:
                for message in inbox.claim_batch(session, poll, "billing"):
                    apply_payment(session, message)
            consumer.commit()   # ack the poll only after the commit
        """
        if isinstance(messages, str | bytes):
            raise InvalidMessageId("messages must be an iterable of messages, not a string")
        try:
            batch = list(messages)
        except TypeError:
            raise InvalidMessageId(
                f"messages must be an iterable, not {type(messages).__name__}"
            ) from None
        ids = [key(message) for message in batch]
        digests: dict[str, bytes | None] = {}
        repeats: list[tuple[str, bytes | None, bytes]] = []
        if payload_hash is not None:
            for message, message_id in zip(batch, ids, strict=True):
                digest = payload_hash(message)
                first = digests.setdefault(message_id, digest)
                if digest is not None and first is not None and digest != first:
                    repeats.append((message_id, first, digest))
        # validates all before any SQL
        claimed = self.claim_many(bind, ids, consumer_name, payload_hashes=digests or None)
        if repeats and self.collisions is not None:
            self._repeats(self._connection(bind), consumer_name, repeats)
        to_process: list[M] = []
        for message, message_id in zip(batch, ids, strict=True):
            if message_id in claimed:
                claimed.discard(message_id)  # later copies of the id are skipped
                to_process.append(message)
        return to_process

    def _repeats(
        self, conn: Connection, consumer: str, repeats: list[tuple[str, bytes | None, bytes]]
    ) -> None:
        """Raise or record the copies of one id within a poll whose digests differ."""
        assert self.collisions is not None
        with ClaimReport(self.hooks, consumer) as report:
            for message_id, first, digest in repeats:
                report.collisions += 1
                self.collisions.found(conn, message_id, consumer, first, digest)

    def is_processed(
        self, bind: Bind, message_id: str, consumer_name: str, *, causal: bool = False
    ) -> bool:
        """Whether a committed (or this transaction's) claim exists for the message.

        :param bind: a Session, scoped_session or Connection.
        :param message_id: the message's id.
        :param consumer_name: the consumer.
        :param causal: on a MariaDB Galera cluster, see every claim the cluster committed
            before this call, whichever node committed it. A node applies the other nodes'
            write-sets asynchronously, so a plain read there can miss a claim another node
            has just committed (``wsrep_sync_wait=0``, the default: MariaDB KB,
            "wsrep_sync_wait"). With ``causal=True`` the read is sent as ``SET STATEMENT
            wsrep_sync_wait = 1 FOR SELECT …``: it waits until the node has caught up, for
            this statement only (the session's setting is left alone). Make it the first
            read of its transaction: at ``REPEATABLE READ`` a transaction that read before
            reads from that earlier snapshot. Elsewhere (one PostgreSQL, MySQL or SQLite
            server) ``causal`` changes nothing; see
            :meth:`~sa_inbox.dialects.ClaimDialect.causal_select`.
        :raises InvalidMessageId: for an invalid id, before any SQL.
        :raises InvalidBind, AutocommitConnection: for a bind that is not one of the above or
            commits each statement on its own.
        """
        row = self.validate(message_id, consumer_name)
        key = sa.and_(
            self.table.c.message_id == row["message_id"],
            self.table.c.consumer_name == row["consumer_name"],
        )
        conn = self._connection(bind)
        select = sa.select
        if causal:
            select = functools.partial(
                claim_dialect_for(conn.dialect.name, self.strategy).causal_select, conn
            )
        query = select(sa.literal(1)).select_from(self.table).where(key)
        return conn.execute(query).first() is not None

    # -- helpers ------------------------------------------------------------------------

    def validate(
        self,
        message_id: str,
        consumer_name: str,
        *,
        message_type: str | None = None,
        correlation_id: str | None = None,
        payload_hash: bytes | None = None,
    ) -> dict[str, Any]:
        """Validate a claim's values without sending anything; return the row to insert.

        :raises InvalidMessageId: as :meth:`claim`.
        """
        row = dict.fromkeys(self._columns)
        row["message_id"] = validate_key(message_id, "message_id", self._max_lengths["message_id"])
        row["consumer_name"] = self._consumer(consumer_name)
        if message_type is not None:
            row["message_type"] = _optional_text(message_type, "message_type")
        if correlation_id is not None:
            row["correlation_id"] = _optional_text(correlation_id, "correlation_id")
        if payload_hash is not None:
            row["payload_hash"] = _optional_bytes(payload_hash)
        # Values the table has no column for were validated, and are not inserted.
        return row if len(row) == len(self._columns) else _only(row, self._columns)

    def _consumer(self, consumer_name: object) -> str:
        """``consumer_name`` validated (:func:`~sa_inbox.validation.validate_key`); a name
        validated before is found in a small cache (a consumer claims under a few names)."""
        if type(consumer_name) is str:
            known = self._consumers_seen.get(consumer_name)
            if known is not None:
                return known
        name = validate_key(consumer_name, "consumer_name", self._max_lengths["consumer_name"])
        if len(self._consumers_seen) < _CONSUMER_CACHE:
            self._consumers_seen[name] = name
        return name

    def _connection(self, bind: Bind) -> Connection:
        return self._claims.connection(bind)

    def _prepared(self, conn: Connection) -> tuple[ClaimDialect, Executable]:
        """The claim dialect and cached single-row statement for ``conn``'s backend."""
        return self._insert(conn)


class ClaimPath:
    """The claim itself, shared by :meth:`Inbox.claim` and
    :meth:`~sa_inbox.InboxStore.receive`: the bind's connection (never an AUTOCOMMIT one),
    the cached insert-or-skip, and the duplicate path (collisions, hooks, the debug log).

    :param insert: the table's prepared statement and per-engine checks.
    :param collisions: the duplicate path's digest comparison, or None.
    :param single: the single-row statement as driver SQL where possible
        (:meth:`PreparedInsert.single`); the store's receive.
    """

    def __init__(
        self, insert: PreparedInsert, collisions: CollisionCheck | None, *, single: bool = False
    ) -> None:
        self.insert = insert
        self.table = insert.table
        self.collisions = collisions
        self._single = insert.single if single else insert

    def connection(self, bind: Bind) -> Connection:
        """The Connection of ``bind``.

        :raises InvalidBind: as :func:`connection_for`.
        :raises AutocommitConnection: if it commits each statement on its own.
        """
        conn = connection_for(bind, self.table)
        if is_autocommit(conn):
            raise AutocommitConnection(
                "the claim's connection is in AUTOCOMMIT mode: the claim would commit on its "
                "own, apart from the business change; use a transactional connection"
            )
        return conn

    def one(
        self, bind: Bind, row: Mapping[str, Any], digest: bytes | None, hooks: InboxHooks
    ) -> bool:
        """Insert-or-skip one validated row; True if it was inserted.

        :raises MessageIdCollision: on the duplicate path, for a ``digest`` that differs
            from the stored one (``on_collision="raise"``).
        """
        start = time.perf_counter()
        conn = self.connection(bind)
        dialect, statement = self._single(conn)
        inserted = dialect.claim_one(conn, self.table, statement, row)
        with ClaimReport(hooks, row["consumer_name"], start) as report:
            if inserted:
                report.new = 1
                return True
            digests = {} if digest is None else {row["message_id"]: digest}
            self.skipped(conn, [row["message_id"]], digests, report)
        return False

    def many(
        self,
        bind: Bind,
        rows: Sequence[Mapping[str, Any]],
        digests: Mapping[str, bytes],
        hooks: InboxHooks,
    ) -> set[str]:
        """Insert-or-skip validated rows of one consumer (in lock order); the new ids."""
        start = time.perf_counter()
        conn = self.connection(bind)
        dialect, statement = self.insert(conn)
        claimed = dialect.claim_many(conn, self.table, rows, statement)
        skipped = [row["message_id"] for row in rows if row["message_id"] not in claimed]
        pending = {mid: digest for mid, digest in digests.items() if mid not in claimed}
        with ClaimReport(hooks, rows[0]["consumer_name"], start) as report:
            report.new = len(claimed)
            self.skipped(conn, skipped, pending, report)
        return claimed

    def skipped(
        self,
        conn: Connection,
        skipped: list[str],
        digests: Mapping[str, bytes],
        report: ClaimReport,
    ) -> set[str]:
        """The duplicate path: compare the ``skipped`` ids' digests (where given), count
        duplicates and collisions into ``report``, log the duplicates.

        :returns: the ids that collided and were recorded (``on_collision="record"``).
        :raises MessageIdCollision: in ``"raise"`` mode (counted as one collision; the
            other ids were not judged).
        """
        consumer = report.consumer_name
        report.duplicates = len(skipped)
        collided: set[str] = set()
        if digests and self.collisions is not None:
            try:
                collided = self.collisions.check(conn, consumer, digests)
            except MessageIdCollision:
                report.collisions, report.duplicates = 1, len(skipped) - 1
                raise
        report.collisions, report.duplicates = len(collided), len(skipped) - len(collided)
        if logger.isEnabledFor(logging.DEBUG):
            for message_id in skipped:
                if message_id not in collided:
                    logger.debug(
                        "message %s (consumer %s): duplicate, already claimed",
                        message_id,
                        consumer,
                        extra={
                            "event": "inbox.claim.duplicate",
                            "message_id": message_id,
                            "consumer_name": consumer,
                        },
                    )
        return collided


class ClaimReport:
    """The one report of a finished claim to the hooks
    (:meth:`~sa_inbox.hooks.InboxHooks.claimed`): a context manager entered once the
    claim's statement ran, whose counts are filled in the block and told to ``hooks`` when
    it ends, an error in it included (a collision raised, a failed collision record).

    :param hooks: the hooks told.
    :param consumer_name: the consumer.
    :param start: the claim's :func:`time.perf_counter` start, or ``None`` for no claim
        time (0 seconds: collisions found within one poll).
    """

    def __init__(self, hooks: InboxHooks, consumer_name: str, start: float | None = None) -> None:
        self.hooks = hooks
        self.consumer_name = consumer_name
        self.start = start
        self.new = self.duplicates = self.collisions = 0

    def __enter__(self) -> ClaimReport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        seconds = 0.0 if self.start is None else time.perf_counter() - self.start
        self.hooks.claimed(
            self.consumer_name,
            new=self.new,
            duplicates=self.duplicates,
            collisions=self.collisions,
            seconds=seconds,
        )


class PreparedInsert:
    """The insert-or-skip statement of one table, built once per backend, and the backend's
    one-time checks, run once per engine: what :class:`Inbox` claims and
    :class:`~sa_inbox.store.InboxStore` receives with.

    Built once per dialect name, so an insert only binds its row (SQLAlchemy then finds the
    compiled form in the engine's cache by the statement's cache key). Idempotent and
    lock-free: two first calls racing build equal statements and run the same read-only
    checks; no lock is ever held across SQL (it would block an event loop).

    :param table: the table inserted into.
    :param strategy: ``"native"`` or ``"savepoint"`` (see :class:`Inbox`).
    :param build: ``build(dialect, table)`` makes the single-row statement; default
        ``dialect.insert_or_skip(table)``. The inbox store passes one that binds its
        payload as JSON text serialised once (:func:`sa_inbox.store.receive.receive_insert`).
    :param row_keys: the keys of every row :meth:`single` is used for, when they are always
        the same (a claim's, the store's receive): then :meth:`single` gives the statement
        as :class:`~sa_inbox.dialects.driver_sql.DriverSQL`, compiled once per SQLAlchemy
        dialect. ``None`` (the default): :meth:`single` gives the statement itself.
    :param with_begin: give that driver SQL its form sent with ``BEGIN`` where the claim
        dialect has one for the connection's driver
        (:meth:`~sa_inbox.dialects.ClaimDialect.with_begin`).
    """

    def __init__(
        self,
        table: sa.Table,
        strategy: Strategy = "native",
        build: Callable[[ClaimDialect, sa.Table], Executable] | None = None,
        row_keys: Iterable[str] | None = None,
        with_begin: bool = True,
    ) -> None:
        self.table = table
        self.strategy: Strategy = strategy
        self.build = build or _insert_or_skip
        self.row_keys = None if row_keys is None else tuple(row_keys)
        self.with_begin = bool_flag(with_begin, "send_with_begin")
        self._statements: dict[str, tuple[ClaimDialect, Executable]] = {}
        self._checked: weakref.WeakSet[sa.Engine] = weakref.WeakSet()
        # Per SQLAlchemy dialect (one per engine): the driver SQL, or None where the
        # statement keeps SQLAlchemy's compiled path. Lock-free: a racing first call
        # compiles the same text.
        self._driver: weakref.WeakKeyDictionary[sa.Dialect, DriverSQL | None] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(self, conn: Connection) -> tuple[ClaimDialect, Executable]:
        """The dialect and statement for ``conn``'s backend, after the one-time checks.

        :raises UnsupportedBackend: if the server or the table fails a check.
        """
        name = conn.dialect.name
        prepared = self._statements.get(name)
        if prepared is None:
            dialect = claim_dialect_for(name, self.strategy)
            prepared = (dialect, self.build(dialect, self.table))
            self._statements[name] = prepared
        if conn.engine not in self._checked:
            prepared[0].check_backend(conn)
            if prepared[0].check_table(conn, self.table):
                self._checked.add(conn.engine)
        return prepared

    def single(self, conn: Connection) -> tuple[ClaimDialect, Executable | DriverSQL]:
        """As :meth:`__call__`, the statement of a single-row insert: as driver SQL where
        ``row_keys`` were given and the statement is an ``INSERT`` (PostgreSQL,
        MySQL/MariaDB, SQLite; Oracle's ``MERGE`` keeps the compiled path) that
        :meth:`DriverSQL.build` accepts, on a connection it :meth:`~DriverSQL.runs_on`.

        :raises UnsupportedBackend: as :meth:`__call__`.
        """
        dialect, statement = self(conn)
        if self.row_keys is None or not isinstance(statement, sa.Insert):
            return dialect, statement
        try:
            driver = self._driver[conn.dialect]
        except KeyError:
            driver = DriverSQL.build(statement, conn.dialect, self.row_keys)
            if driver is not None and self.with_begin:
                driver.with_begin = dialect.with_begin(statement, conn.dialect, self.row_keys)
            self._driver[conn.dialect] = driver
        if driver is None or not DriverSQL.runs_on(conn):
            return dialect, statement
        return dialect, driver


def _insert_or_skip(dialect: ClaimDialect, table: sa.Table) -> Executable:
    return dialect.insert_or_skip(table)


def connection_for(bind: Bind, table: sa.Table) -> Connection:
    """The Connection a Session, scoped_session or Connection runs ``table``'s statements on.

    :raises InvalidBind: for anything else (a :class:`TypeError` too), and for a Session
        bound to no engine (SQLAlchemy's ``UnboundExecutionError``, chained).
    """
    if isinstance(bind, Session | scoped_session):
        try:
            return bind.connection(bind_arguments={"clause": table})
        except UnboundExecutionError as exc:
            raise InvalidBind(
                f"the Session is bound to no engine, so {table.name!r} has nowhere to be "
                "claimed: create it from a sessionmaker(engine)"
            ) from exc
    if isinstance(bind, Connection):
        return bind
    hint = (
        ": for an AsyncSession or AsyncConnection use sa-inbox's asyncio API "
        "(sa_inbox.asyncio: AsyncInbox(inbox), AsyncInboxStore, AsyncOutbox)"
        if is_asyncio_object(bind)
        else ""
    )
    raise InvalidBind(
        f"bind must be a Session, scoped_session or Connection, not {type(bind).__name__}{hint}"
    )


#: Consumer names an Inbox keeps validated (a consumer claims under a handful).
_CONSUMER_CACHE = 256


def _only(row: dict[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """``row`` without the keys that are not ``columns`` (a table without the optional
    columns)."""
    return {name: row[name] for name in columns}


def _stored_digest(row: Mapping[Any, Any]) -> bytes | None:
    """The ``payload_hash`` column of a read row."""
    value = row["payload_hash"]
    return None if value is None else bytes(value)


def _optional_text(value: str | None, field: str, max_length: int = 255) -> str | None:
    if value is None:
        return None
    return validate_key(value, field, max_length)


def _optional_bytes(value: bytes | None, max_length: int = 64) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, bytes):
        raise InvalidMessageId(f"payload_hash must be bytes, not {type(value).__name__}")
    if len(value) > max_length:
        raise InvalidMessageId(f"payload_hash is {len(value)} bytes; the column holds {max_length}")
    return value
