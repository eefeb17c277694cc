"""Exceptions raised by sa-inbox, all of them in this one module.

Every exception derives from :class:`InboxError`, so ``except sa_inbox.InboxError`` catches
everything the library raises on its own account. Database errors that are not about the
inbox (a failing business statement, a lost connection) are never wrapped: they reach the
caller as SQLAlchemy's own :class:`sqlalchemy.exc.DBAPIError`. A
:class:`ConfigurationError` is raised to the caller, never acked or nacked.

The tree (each class under its first base, its other bases in brackets)::

    InboxError
        ConfigurationError
            MissingTable
            InvalidArgument [ValueError]
            InvalidBind [TypeError]
            InvalidObject [TypeError]
                SyncAsyncMismatch
            InvalidSessionFactory [TypeError]
            InvalidHandler [TypeError]
            InvalidTable [ValueError]
                InvalidTableType [TypeError]
            ConsumerNameTaken
            AnonymousHandler [TypeError]
            MissingKeyHeader
            MissingExtra [ImportError]
            UnsupportedBroker [ValueError]
            AsyncPublisherInSyncRelay [TypeError]
            AlembicSetupError
                InboxSettingsConflict
                InboxTableDropRefused
            InvalidShardMap [ValueError]
            WrongShard
                UnknownShardIdentity
                ShardAssignmentFailed
        AsyncHandlerError [TypeError]
            AsyncHandlerInSyncRunner [SyncAsyncMismatch]
        InvalidMessageId [ValueError]
        InvalidShardKey [ValueError]
        InvalidOutboxMessage [ValueError]
        DuplicateMessage
        MessageIdCollision
        ShardKeyChanged
        TransientClaimError
        DatabaseUnavailable
        ClaimWarning
        UnsafeTransaction
            AutocommitConnection [ConfigurationError]
            SplitTransaction [ConfigurationError]
            HandlerEndedTransaction
        UnsupportedBackend
        ClaimLost
        HandlerFailed
        DeliveryLimitExceeded
        NoPubAckError
        ShardUnavailable
        DeadLetterQueueUnavailable
        SourceRefused
        RetentionWindowTooShort [ValueError]
        UnsafePartitionKey [ValueError]
        PurgeLockTimeout
        ExactlyOnceViolation [AssertionError]

Deprecated aliases of :class:`InvalidArgument`, importable from here for one release:
``InvalidConsumerArgument``, ``InvalidDeadLetterArgument``, ``InvalidKeySetting``,
``InvalidRelayArgument``, ``InvalidRetentionPolicy``, ``InvalidRetryArgument``,
``InvalidStoreArgument``, ``InvalidStrategy``, ``InvalidStreamSettings``,
``InvalidTableOptions``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlembicSetupError",
    "AnonymousHandler",
    "AsyncHandlerError",
    "AsyncHandlerInSyncRunner",
    "AsyncPublisherInSyncRelay",
    "AutocommitConnection",
    "ClaimLost",
    "ClaimWarning",
    "ConfigurationError",
    "ConsumerNameTaken",
    "DatabaseUnavailable",
    "DeadLetterQueueUnavailable",
    "DeliveryLimitExceeded",
    "DuplicateMessage",
    "ExactlyOnceViolation",
    "HandlerEndedTransaction",
    "HandlerFailed",
    "InboxError",
    "InboxSettingsConflict",
    "InboxTableDropRefused",
    "InvalidArgument",
    "InvalidBind",
    "InvalidHandler",
    "InvalidMessageId",
    "InvalidObject",
    "InvalidOutboxMessage",
    "InvalidSessionFactory",
    "InvalidShardKey",
    "InvalidShardMap",
    "InvalidTable",
    "InvalidTableType",
    "MessageIdCollision",
    "MissingExtra",
    "MissingKeyHeader",
    "MissingTable",
    "NoPubAckError",
    "PurgeLockTimeout",
    "RetentionWindowTooShort",
    "ShardAssignmentFailed",
    "ShardKeyChanged",
    "ShardUnavailable",
    "SourceRefused",
    "SplitTransaction",
    "SyncAsyncMismatch",
    "TransientClaimError",
    "UnknownShardIdentity",
    "UnsafePartitionKey",
    "UnsafeTransaction",
    "UnsupportedBackend",
    "UnsupportedBroker",
    "WrongShard",
]


class InboxError(Exception):
    """Root of every exception raised by sa-inbox.

    .. seealso:: :ref:`error-inboxerror` on the errors page.
    """


class ConfigurationError(InboxError):
    """sa-inbox, the database or the handler is set up wrongly: no message is at fault.

    The same error would fail every message, so it is never a message failure: the runner
    (:func:`sa_inbox.handle`) raises it to the caller without ack or nack, and the
    :class:`~sa_inbox.Worker` stops with it instead of counting a failed attempt (the
    message's row is left for a worker that is set up right). Nothing has been committed.

    .. seealso:: :ref:`error-configurationerror` on the errors page.
    """


class MissingTable(ConfigurationError):
    """A table or column that a statement needs does not exist in the database.

    Raised from the database's own error (chained as ``__cause__``): PostgreSQL SQLSTATE
    42P01 / 42703 (undefined table / column, manual, Appendix A "PostgreSQL Error Codes"),
    MySQL/MariaDB errors 1146 / 1054 (``ER_NO_SUCH_TABLE`` / ``ER_BAD_FIELD_ERROR``),
    SQLite's "no such table" / "no such column", Oracle ORA-00942 / ORA-00904. Create the
    tables (``metadata.create_all()`` or an Alembic migration) before consuming.

    .. seealso:: :ref:`error-missingtable` on the errors page.
    """


class InvalidArgument(ConfigurationError, ValueError):
    """An argument of an sa-inbox entry point was rejected before any SQL was sent or any
    broker was connected to: nothing has been written, read or moved.

    Raised for a value out of range or of the wrong kind: a count, limit, batch size,
    ``max_attempts`` or ``prefetch`` that is not an int >= 1; a timeout or back-off that is
    not a number of seconds > 0; a duration that is not a :class:`datetime.timedelta`, or a
    retention policy, purge or partition setting that is malformed; a naive ``now``; a
    payload that is not JSON-serialisable (NaN and Infinity refused); a claim strategy
    other than ``"native"`` or ``"savepoint"``; a broker adapter's key setting, stream or
    consumer setting, or dead-letter argument that the broker cannot serve; an Alembic
    operation's table name, schema or factory option; a replay whose filters choose no
    rows. The message names the argument and what it accepts.

    .. seealso:: :ref:`error-invalidargument` on the errors page.
    """


class InvalidBind(ConfigurationError, TypeError):
    """A ``bind`` argument is not of a type the operation can run on.

    A claim runs on a :class:`~sqlalchemy.orm.Session`, a
    :class:`~sqlalchemy.orm.scoped_session` or a :class:`~sqlalchemy.engine.Connection`; a
    purge on an :class:`~sqlalchemy.engine.Engine` or a Connection. Checked before any SQL.

    .. seealso:: :ref:`error-invalidbind` on the errors page.
    """


class InvalidObject(ConfigurationError, TypeError):
    """An entry point was given an object of the wrong kind where an sa-inbox object is
    expected: ``handle()`` given a Table instead of an :class:`~sa_inbox.Inbox`, a
    :class:`~sa_inbox.Worker` given an unbound :class:`~sa_inbox.InboxStore`. Checked before
    any SQL; the message says what to pass instead.

    .. seealso:: :ref:`error-invalidobject` on the errors page.
    """


class SyncAsyncMismatch(InvalidObject):
    """An object of the asyncio half of the API was given to the synchronous half, or the
    reverse: an :class:`~sa_inbox.asyncio.AsyncInbox` to :func:`sa_inbox.handle`, an
    ``AsyncEngine`` to :meth:`~sa_inbox.InboxStore.bind`, a synchronous bound store to
    :class:`~sa_inbox.asyncio.AsyncWorker`.

    The synchronous code would call the async object's methods without awaiting them (the
    claim would never be made, and every redelivery applied again), so it is refused
    before any SQL, with neither ack nor nack; the message names the object to pass.

    .. seealso:: :ref:`error-syncasyncmismatch` on the errors page.
    """


class InvalidSessionFactory(ConfigurationError, TypeError):
    """The session factory did not make a :class:`~sqlalchemy.orm.Session`.

    The runner needs a factory such as ``sessionmaker(engine)`` (called with no arguments,
    returning a new Session). ``Session.begin`` or ``sessionmaker.begin``, which return a
    transaction context manager, are the usual mistake.

    .. seealso:: :ref:`error-invalidsessionfactory` on the errors page.
    """


class InvalidHandler(ConfigurationError, TypeError):
    """The handler cannot be called the way the runner or worker calls it.

    :func:`sa_inbox.handle` calls ``handler(session)``; the :class:`~sa_inbox.Worker` calls
    ``handler(session, message)``. Checked with :func:`inspect.signature` before anything
    is sent.

    .. seealso:: :ref:`error-invalidhandler` on the errors page.
    """


class InvalidTable(ConfigurationError, ValueError):
    """A table given to sa-inbox, or the definition asked for, cannot serve the inbox.

    Raised for a table that lacks a required column or whose primary key is not
    ``(message_id, consumer_name)`` (:meth:`sa_inbox.Inbox.for_table`), a
    ``message_id_length`` that is not a positive int, a ``MERGE`` (Oracle) built without the
    table's key columns, and a partition name over PostgreSQL's 63 characters. Raised while
    the table or statement is defined, before any SQL.

    .. seealso:: :ref:`error-invalidtable` on the errors page.
    """


class InvalidTableType(InvalidTable, TypeError):
    """An :class:`InvalidTable` where no table was given at all, or not a table.

    ``Inbox()`` with neither a MetaData nor ``table=``, or a purge given something other
    than an :class:`~sa_inbox.Inbox` or a :class:`~sqlalchemy.Table`.

    .. seealso:: :ref:`error-invalidtabletype` on the errors page.
    """


class ConsumerNameTaken(ConfigurationError):
    """A handler claimed under a ``consumer_name`` that another handler owns.

    Claims are unique per ``(message_id, consumer_name)``: two handlers sharing a name share
    its claims, and each id is applied by whichever handler claims it first, the other one
    skipping it as a duplicate (acked, never run). The first handler to claim under a name
    owns it (:mod:`sa_inbox.consumers`); nothing was claimed. Give each handler its own
    consumer name, or hand the name over with ``inbox.consumers.hand_over(engine, name,
    handler)``.

    :param consumer_name: the name.
    :param owner: the qualified name of the handler that owns it.
    :param handler: the qualified name of the handler refused.

    .. seealso:: :ref:`error-consumernametaken` on the errors page.
    """

    def __init__(self, consumer_name: str, owner: str, handler: str) -> None:
        super().__init__(
            f"consumer name {consumer_name!r} belongs to the handler {owner}; {handler} may not "
            "claim under it (its messages would be split between the two, each skipped by the "
            "other as a duplicate): give it its own consumer_name, or hand the name over with "
            f"inbox.consumers.hand_over(engine, {consumer_name!r}, handler)"
        )
        self.consumer_name = consumer_name
        self.owner = owner
        self.handler = handler

    def __reduce__(self) -> tuple[type[ConsumerNameTaken], tuple[str, str, str]]:
        """Pickled with its three values (a worker process reporting it to its parent)."""
        return type(self), (self.consumer_name, self.owner, self.handler)


class AnonymousHandler(ConfigurationError, TypeError):
    """A lambda was to own a consumer name (:mod:`sa_inbox.consumers`).

    Every lambda of one scope is ``module.<lambda>``: two of them under one consumer name
    would share its claims unseen. Raised before anything is claimed; define the handler as
    a function, or name its owner with :func:`sa_inbox.consumers.owned_as`.

    .. seealso:: :ref:`error-anonymoushandler` on the errors page.
    """

    def __init__(self, name: str) -> None:
        super().__init__(
            f"the handler {name!r} is a lambda: it cannot own a consumer name, since every "
            "lambda of one scope has that name. Define it as a function "
            "(functools.partial(fn, message=...) passes it the message), or name its owner: "
            "sa_inbox.consumers.owned_as('billing.apply_payment', handler)"
        )
        self.handler_name = name


class MissingKeyHeader(ConfigurationError):
    """The key header was missing (or not text) on ``deliveries`` consecutive deliveries.

    One delivery without the key is the producer's bug and is dead-lettered; a run of them
    is the consumer's: a misspelled ``key_source`` would dead-letter the whole queue. A run
    counts every keyless delivery since the last keyed one, however far apart; at the limit
    the consumer gives the deliveries it holds back to the broker unprocessed and
    ``run()`` / ``consume()`` raises this. Those of the run that came one at a time on a
    quiet queue were dead-lettered before the limit (``dead_lettered``: at most the limit
    less one).

    :param key: the header (stream field, keyword argument) the consumer reads the key from.
    :param deliveries: how many consecutive deliveries lacked it.
    :param carried: the header names those deliveries carried, with how many carried each.
    :param wrong_types: the types of the values found under ``key`` that are not text
        (``int``...), with their counts.
    :param dead_lettered: how many of them were dead-lettered before the limit.

    .. seealso:: :ref:`error-missingkeyheader` on the errors page.
    """

    def __init__(
        self,
        key: str,
        deliveries: int,
        carried: dict[str, int],
        wrong_types: dict[str, int] | None = None,
        *,
        dead_lettered: int = 0,
    ) -> None:
        wrong_types = wrong_types or {}
        seen = ", ".join(f"{name!r} ({count})" for name, count in list(carried.items())[:10])
        typed = ", ".join(f"{kind} ({count})" for kind, count in wrong_types.items())
        settled = (
            f"{deliveries - dead_lettered} of them were given back to the broker unprocessed, "
            f"{dead_lettered} dead-lettered before the run reached the limit"
            if dead_lettered
            else "the deliveries were given back to the broker unprocessed, nothing was "
            "dead-lettered"
        )
        super().__init__(
            f"{key!r} was missing on {deliveries} consecutive deliveries"
            + (f" (present but not text: {typed})" if typed else "")
            + f"; they carried {seen or 'no headers'}. Check the consumer's key setting "
            f"(names are matched exactly) and the producers; {settled}"
        )
        self.key = key
        self.deliveries = deliveries
        self.carried = carried
        self.wrong_types = wrong_types
        self.dead_lettered = dead_lettered


class MissingExtra(ConfigurationError, ImportError):
    """A module of sa-inbox needs an optional dependency that is not installed.

    The message is one line naming the extra that installs it: ``sa_inbox.brokers.rabbitmq
    needs the 'rabbitmq' extra: pip install 'sa-inbox[rabbitmq]'``; the missing module is its
    ``name`` (the dependency's own import error is not chained). Raised by
    :mod:`sa_inbox._optional` when the module is imported.

    :ivar module: the sa-inbox module that needs it (``"sa_inbox.brokers.rabbitmq"``).
    :ivar extra: the extra that installs it (``"rabbitmq"``).

    .. seealso:: :ref:`error-missingextra` on the errors page.
    """

    def __init__(self, module: str, extra: str, dependency: str) -> None:
        super().__init__(
            f"{module} needs the {extra!r} extra: pip install 'sa-inbox[{extra}]'",
            name=dependency,
        )
        self.module = module
        self.extra = extra

    def __reduce__(self) -> tuple[type[MissingExtra], tuple[str, str, str]]:
        # Rebuilt from its fields, not from ``args`` (the message), when pickled across
        # processes.
        return type(self), (self.module, self.extra, self.name or "")


class UnsupportedBroker(ConfigurationError, ValueError):
    """No adapter or chaos driver for this broker URL's scheme (``amqp://``, ``redis://`` and
    ``nats://`` have one).

    .. seealso:: :ref:`error-unsupportedbroker` on the errors page.
    """


class AsyncPublisherInSyncRelay(ConfigurationError, TypeError):
    """The synchronous :class:`~sa_inbox.outbox.OutboxRelay` was given a publisher whose
    ``publish`` (or ``publish_many``) returns an awaitable (an ``async def``, or
    :class:`~sa_inbox.brokers.redis.Publisher` on a ``redis.asyncio`` client):
    nothing was published, and no confirm can be awaited. Raised to the caller, the batch's
    rows given back unpublished; use :class:`~sa_inbox.asyncio.AsyncOutboxRelay`, or a
    plain publisher.

    .. seealso:: :ref:`error-asyncpublisherinsyncrelay` on the errors page.
    """


class AlembicSetupError(ConfigurationError):
    """The Alembic environment could not be set up as asked.

    For example a ``[sa_inbox] target_metadata`` option in ``alembic.ini`` that names no
    importable :class:`~sqlalchemy.MetaData`.

    .. seealso:: :ref:`error-alembicsetuperror` on the errors page.
    """


class InboxSettingsConflict(AlembicSetupError):
    """``[sa_inbox]`` in ``alembic.ini`` says one thing about a table the models define.

    The models' table (``Inbox(metadata, table_name=..., message_id_length=...)``) is the one
    the application claims through, so it is the one migrated; an ``alembic.ini`` option that
    disagrees with it (``table_name``, ``store_table_name``, ``schema``,
    ``message_id_length``) is refused instead of being ignored. Remove the option.

    .. seealso:: :ref:`error-inboxsettingsconflict` on the errors page.
    """


class InboxTableDropRefused(AlembicSetupError):
    """A revision would drop an sa-inbox table whose rows autogenerate could not keep.

    Raised when the upgrade reaches ``op.refuse_inbox_table_drop(...)``, the line that
    autogenerate writes where a table left the models and could not be paired with exactly
    one compatible new table to rename it to. Nothing of the revision has run before it (it
    is the first operation). The message says how to edit the revision.

    .. seealso:: :ref:`error-inboxtabledroprefused` on the errors page.
    """


class InvalidShardMap(ConfigurationError, ValueError):
    """The shard map cannot route messages safely; raised when the
    :class:`~sa_inbox.sharding.ShardedInbox` is built, before any SQL.

    Raised for: an empty map; a shard name that is not a valid key (a non-empty string of at
    most 255 characters, no NUL, no surrounding whitespace); a shard that is neither an
    :class:`~sqlalchemy.engine.Engine` nor a ``sessionmaker`` bound to one; two shards on
    the same database as far as their URLs tell (same backend, database name and
    locations: host and port, every ``?host=``/``?port=`` of libpq's multi-host form, a
    Unix socket: the claims of both would share one table, so the map does not say where a
    message lives; the map is checked without connecting, so one server under two names,
    ``localhost`` and ``127.0.0.1``, is not seen); an inbox whose
    table has no ``payload_hash`` column (the shard key's digest is stored there) or whose
    ``on_collision`` is not ``"raise"``; an ``assign`` function that returns a name
    that is not in the map (raised at the claim, see :class:`WrongShard`).

    .. seealso:: :ref:`error-invalidshardmap` on the errors page.
    """


class WrongShard(ConfigurationError):
    """A claim was asked on a database that is not the shard its key routes to, or the
    ``assign`` function named a shard that is not in the map.

    The rule: the claim lives in the same database as the business change, and
    every delivery of one message reaches the same shard. A Session bound to another shard
    would put this delivery's claim where the next delivery will not look. Nothing has been
    written (at most one read-only query asked the server which it is, see
    :mod:`sa_inbox.sharding.identity`); the caller's code routes wrongly, so it is a
    configuration error (raised, never nacked, by :func:`sa_inbox.handle`).

    .. seealso:: :ref:`error-wrongshard` on the errors page.
    """


class UnknownShardIdentity(WrongShard):
    """A claim's connection comes from another Engine than its shard's, and the server it is
    on could not be established (a backend that is not asked, a server that does not answer,
    an in-memory database: see :mod:`sa_inbox.sharding.identity`). Refused, as a wrong shard
    is: the check never passes on an unknown identity. Claim on a Session of
    :meth:`~sa_inbox.sharding.ShardedInbox.session_factory` (the shard's own Engine, which
    needs no identity).

    .. seealso:: :ref:`error-unknownshardidentity` on the errors page.
    """


class ShardAssignmentFailed(WrongShard):
    """The ``assign`` function raised for a shard key (e.g. a ``KeyError`` from a directory
    that does not know the tenant). Raised before any SQL, the function's exception chained
    as ``__cause__``; :meth:`~sa_inbox.sharding.ShardedInbox.handle` raises it without ack or
    nack, as any configuration error.

    :param shard_key: the key that could not be routed.
    :param cause: the function's exception.

    .. seealso:: :ref:`error-shardassignmentfailed` on the errors page.
    """

    def __init__(self, shard_key: str, cause: Exception) -> None:
        super().__init__(
            f"assign({shard_key!r}) raised {type(cause).__name__}: {cause}; the key cannot be "
            "routed to a shard"
        )
        self.shard_key = shard_key


class AsyncHandlerError(InboxError, TypeError):
    """A synchronous runner was given an ``async def`` handler, or one returning an awaitable.

    The sync runner and worker cannot await it: its body would never run while the claim
    committed, so the message would be acked without being applied. The attempt is refused
    before anything commits (a nack, or a failed attempt in the worker). Use the asyncio
    API for coroutine handlers.

    .. seealso:: :ref:`error-asynchandlererror` on the errors page.
    """


class AsyncHandlerInSyncRunner(AsyncHandlerError, SyncAsyncMismatch):
    """An ``async def`` handler (a coroutine function, a ``functools.partial`` of one, an
    object whose ``__call__`` is ``async def``) given to the synchronous API: the runner,
    the worker or a synchronous broker adapter.

    Seen from the handler itself, before anything is sent: a configuration error (every
    message would fail the same way), raised to the caller with neither ack nor nack. A
    plain function that returns an awaitable is only seen when called: that is an
    :class:`AsyncHandlerError`, a failed delivery.

    .. seealso:: :ref:`error-asynchandlerinsyncrunner` on the errors page.
    """


class InvalidMessageId(InboxError, ValueError):
    """A ``message_id`` or ``consumer_name`` was rejected before any SQL was sent.

    Raised for ``None``, non-``str`` values, the empty string, values with leading or
    trailing whitespace, values containing NUL, and values longer than the column
    (counted in characters). Nothing has been written when this is raised.

    .. seealso:: :ref:`error-invalidmessageid` on the errors page.
    """


class InvalidShardKey(InboxError, ValueError):
    """A shard key is not a non-empty string of at most 255 characters (no NUL, no
    surrounding whitespace); raised before any SQL, nothing sent.

    .. seealso:: :ref:`error-invalidshardkey` on the errors page.
    """


class InvalidOutboxMessage(InboxError, ValueError):
    """A message given to :meth:`~sa_inbox.outbox.Outbox.publish` cannot be recorded.

    Raised before any SQL for: a destination that is not a non-empty string of at most 255
    characters (no NUL, no surrounding whitespace); a payload that is neither bytes nor
    JSON-serialisable (NaN and Infinity refused); headers that are not a mapping of such
    strings to strings without NUL, CR or LF (NATS and AMQP carry headers as text lines or
    short strings); a ``message_id`` that is not a valid key (see
    :func:`sa_inbox.validation.validate_key`). Nothing has been written.

    .. seealso:: :ref:`error-invalidoutboxmessage` on the errors page.
    """


class DuplicateMessage(InboxError):
    """The message was already processed by this consumer: an earlier delivery committed it.

    Raised by the session extension when a registered claim finds the message already
    claimed; the flush (or commit) is aborted and the caller must roll back. The attributes
    name the delivery that was a duplicate.

    :param message_id: the producer-assigned id of the duplicate message.
    :param consumer_name: the consumer that already processed it.

    .. seealso:: :ref:`error-duplicatemessage` on the errors page.
    """

    def __init__(self, message_id: str, consumer_name: str) -> None:
        super().__init__(
            f"message {message_id!r} was already processed by consumer {consumer_name!r}"
        )
        self.message_id = message_id
        self.consumer_name = consumer_name


class MessageIdCollision(InboxError):
    """Two different messages share one ``(message_id, consumer_name)``.

    A claim (or store receive) carried a payload digest that differs from the digest stored
    with the id's earlier claim: this is not a redelivery but a second message whose producer
    reused the id. Skipping it as a duplicate would lose it silently, so by default the claim
    raises this; the caller's transaction must roll back and the message is nacked (the
    runner does so: it is a failed delivery, not a configuration error). With
    ``on_collision="record"`` the collision is written to the collisions table instead and
    the message is skipped (see :mod:`sa_inbox.collision`).

    :param message_id: the shared id.
    :param consumer_name: the consumer.
    :param stored_hash: the digest stored with the earlier claim.
    :param payload_hash: the digest of this delivery.

    .. seealso:: :ref:`error-messageidcollision` on the errors page.
    """

    def __init__(
        self,
        message_id: str,
        consumer_name: str,
        stored_hash: bytes | None,
        payload_hash: bytes | None,
    ) -> None:
        super().__init__(
            f"message id {message_id!r} of consumer {consumer_name!r} was already claimed by a "
            f"different message (payload hash {_hex(stored_hash)} stored, {_hex(payload_hash)} "
            "now): two producers share an id"
        )
        self.message_id = message_id
        self.consumer_name = consumer_name
        self.stored_hash = stored_hash
        self.payload_hash = payload_hash


class ShardKeyChanged(InboxError):
    """A delivery carries another shard key than the delivery that claimed the message.

    Detected on the shard that holds the claim: the claim stores a digest of its shard key
    (see :mod:`sa_inbox.sharding.keys`), and a redelivery routed to the same shard with
    another key has another digest. With ``check_other_shards=True`` it is also raised when
    a new claim finds the message already claimed on another shard (see
    :class:`~sa_inbox.sharding.ShardedInbox` for that check's race). Like
    :class:`~sa_inbox.exc.MessageIdCollision` it is a failed delivery: the caller's
    transaction rolls back and the message is nacked (never acked, never applied twice).

    :param message_id: the message id.
    :param consumer_name: the consumer.
    :param shard: the shard this delivery was routed to.
    :param found_on: the shard holding the earlier claim.

    .. seealso:: :ref:`error-shardkeychanged` on the errors page.
    """

    def __init__(self, message_id: str, consumer_name: str, shard: str, found_on: str) -> None:
        where = "on the same shard" if found_on == shard else f"on shard {found_on!r}"
        super().__init__(
            f"message {message_id!r} of consumer {consumer_name!r} was claimed {where} under "
            f"another shard key; this delivery was routed to shard {shard!r}: the producer "
            "changed the message's shard key, refused (not applied, not acked)"
        )
        self.message_id = message_id
        self.consumer_name = consumer_name
        self.shard = shard
        self.found_on = found_on


class TransientClaimError(InboxError):
    """The database aborted the transaction for a reason that a retry can fix.

    Serialization failures, deadlocks and lock wait timeouts: PostgreSQL SQLSTATE 40001 /
    40P01 / 55P03 (manual,
    "Transaction Isolation", 13.2), MySQL/MariaDB errors 1213 (deadlock) / 1205 (lock wait
    timeout), Oracle ORA-08177 / ORA-00060, SQLite SQLITE_BUSY / SQLITE_LOCKED. The caller's
    transaction is no longer usable: roll back and run the whole unit of work again (see
    :func:`sa_inbox.run_in_transaction`). The driver's error is chained as ``__cause__``.

    .. seealso:: :ref:`error-transientclaimerror` on the errors page.
    """


class DatabaseUnavailable(InboxError):
    """A consumer was stopped while it waited for its database to come back
    (:mod:`sa_inbox.outage`): the delivery in hand is left unsettled, uncounted where the
    broker allows, for the broker to hand out again. The failure that began the outage is
    chained as ``__cause__``. Consumers' ``run()`` catch it and return.

    .. seealso:: :ref:`error-databaseunavailable` on the errors page.
    """


class ClaimWarning(InboxError):
    """MySQL/MariaDB reported a warning other than a duplicate key during ``INSERT IGNORE``.

    ``INSERT IGNORE`` downgrades truncation, NULL-into-NOT-NULL, bad character and
    foreign-key errors to warnings (MySQL manual, "13.2.6 INSERT Statement", "IGNORE").
    sa-inbox reads the statement's warnings and raises this on any warning but 1062
    (duplicate entry). The row may have been written: the caller must roll back.

    :param warnings: the ``(level, code, message)`` rows of ``SHOW WARNINGS``.

    .. seealso:: :ref:`error-claimwarning` on the errors page.
    """

    def __init__(self, warnings: list[tuple[str, int, str]]) -> None:
        text = "; ".join(f"{level} {code}: {message}" for level, code, message in warnings)
        super().__init__(f"INSERT IGNORE raised warnings other than duplicate key: {text}")
        self.warnings = warnings


class UnsafeTransaction(InboxError):
    """The claim and the business change would not share one transaction.

    The base of :class:`AutocommitConnection` (a configuration error) and
    :class:`HandlerEndedTransaction` (a failed attempt).

    .. seealso:: :ref:`error-unsafetransaction` on the errors page.
    """


class AutocommitConnection(UnsafeTransaction, ConfigurationError):
    """A claim was asked to run on a connection that commits each statement on its own.

    The claim would commit apart from the business change, so a failing handler would leave
    the claim committed and the message lost. Detected for SQLAlchemy's
    ``isolation_level="AUTOCOMMIT"`` and for driver-level autocommit (psycopg 3
    ``autocommit=True``, PyMySQL ``autocommit=True``, :mod:`sqlite3` with
    ``isolation_level=None`` outside a transaction or ``autocommit=True``).

    .. seealso:: :ref:`error-autocommitconnection` on the errors page.
    """


class SplitTransaction(UnsafeTransaction, ConfigurationError):
    """The claim's transaction would span more than one database connection.

    A Session whose binds send the claim and the business change to different engines
    commits them one after the other, not atomically (no two-phase commit): a failure at
    the second commit leaves the claim committed and the message lost. Bind the inbox table
    and the business tables to one engine.

    .. seealso:: :ref:`error-splittransaction` on the errors page.
    """


class HandlerEndedTransaction(UnsafeTransaction):
    """The handler committed, rolled back or replaced the transaction that holds the claim.

    Only the runner may end that transaction, after the handler returns. A commit is
    refused before it reaches the database (nothing is committed); a rollback is detected
    when the handler returns. Either way the attempt fails (nack, or a failed attempt in
    the worker) and is never acked.

    .. seealso:: :ref:`error-handlerendedtransaction` on the errors page.
    """


class UnsupportedBackend(InboxError):
    """The database or driver lacks a feature the requested operation needs.

    For example SQLite older than 3.24.0 has no ``ON CONFLICT DO NOTHING`` (SQLite manual,
    "UPSERT").

    .. seealso:: :ref:`error-unsupportedbackend` on the errors page.
    """


class ClaimLost(InboxError):
    """A worker's claim on a stored message is no longer its own.

    The claim's visibility timeout passed and another worker claimed the row again (or it
    was reaped or replayed). The transaction is rolled back, so the message is processed
    once, by the row's current claim holder.

    .. seealso:: :ref:`error-claimlost` on the errors page.
    """


class HandlerFailed(InboxError):
    """Raised by :meth:`~sa_inbox.store.InboxStore.complete_batch` run without savepoints
    when a handler raised: the whole transaction was rolled back, nothing of the batch
    committed.

    :param message: the :class:`~sa_inbox.store.StoredMessage` whose handler raised (typed
        loosely: this module imports nothing of the package).
    :param error: what it raised (also the ``__cause__``).

    .. seealso:: :ref:`error-handlerfailed` on the errors page.
    """

    def __init__(self, message: Any, error: BaseException) -> None:
        super().__init__(f"handler failed on message {message.message_id!r}: {error}")
        self.message = message
        self.error = error


#: ``retry_at(message)``: when a message that failed this attempt may be claimed again
#: (aware UTC), or ``None`` when its attempts are used up (``dead``).


class DeliveryLimitExceeded(InboxError):
    """The broker delivered a message more often than ``max_deliveries``; not processed.

    .. seealso:: :ref:`error-deliverylimitexceeded` on the errors page.
    """


class NoPubAckError(InboxError):
    """No PubAck came for a message although JetStream answers (its account info, asked
    right after): no stream stores the subject, yet a plain subscriber took the publish, so
    the server sent no "no responders" either. The message's fault, not an outage: the
    relay counts an attempt.

    .. seealso:: :ref:`error-nopubackerror` on the errors page.
    """


class ShardUnavailable(InboxError):
    """``check_other_shards=True`` could not read another shard (a connection error, a pool
    timeout), so it cannot tell whether the message was claimed there.

    The delivery is refused rather than applied unchecked: a FAILED delivery, rolled back and
    nacked by :meth:`~sa_inbox.sharding.ShardedInbox.handle` (not a configuration error). It
    ties every shard's new deliveries to the availability of all the others: with one shard
    down every new message fails on every shard, and a broker with a redelivery limit moves
    them to its dead-letter queue. Requeue on this error with a delay (it names the shard),
    or run without the check.

    :param shard: the shard that could not be read.
    :param message_id: the message being claimed.

    .. seealso:: :ref:`error-shardunavailable` on the errors page.
    """

    def __init__(self, shard: str, message_id: str, cause: BaseException) -> None:
        super().__init__(
            f"check_other_shards: shard {shard!r} could not be read ({type(cause).__name__}), "
            f"so whether message {message_id!r} was claimed there is unknown: refused, not "
            "applied (it is retried when redelivered; the shard must be reachable)"
        )
        self.shard = shard
        self.message_id = message_id


class DeadLetterQueueUnavailable(InboxError):
    """A dead-letter queue / stream could not be read or written: the broker is unreachable,
    the queue (RabbitMQ) or stream (NATS) does not exist, the Redis key is no stream, or the
    connection broke in the middle of a replay.

    What a replay had moved before is moved (each move is confirmed before the dead letter
    is removed); the rest is still in the dead-letter queue: run the replay again.

    :param target: the queue as ``scheme://host/queue``, its password hidden.
    :param why: the broker client's error, on one line.

    .. seealso:: :ref:`error-deadletterqueueunavailable` on the errors page.
    """

    def __init__(self, target: str, why: str) -> None:
        super().__init__(f"cannot read the dead letters of {target}: {why}")
        self.target = target
        self.why = why

    def __reduce__(self) -> tuple[type[DeadLetterQueueUnavailable], tuple[str, str]]:
        return type(self), (self.target, self.why)


class SourceRefused(InboxError):
    """The source queue / stream refused a dead letter's publish (no such queue, no stream
    for the subject, JetStream's duplicate window): the dead letter was left in place.
    Raised by a broker's dead-letter queue's ``move`` and counted by
    :func:`sa_inbox.brokers.dead_letters.replay`, never raised to its caller.

    .. seealso:: :ref:`error-sourcerefused` on the errors page.
    """


class RetentionWindowTooShort(InboxError, ValueError):
    """A purge would delete rows the broker can still redeliver or replay.

    A processed-messages row must outlive every redelivery of its message: the broker
    redelivers an unacked message for up to ``max_redelivery`` and can replay old messages
    for up to ``max_replay`` (Kafka's retention, SQS's retention period, a RabbitMQ stream's
    ``max-age``). Deleting a row younger than their sum (plus the safety margin) would let
    a redelivery be processed a second time. Nothing has been deleted.

    :param older_than: the window asked for.
    :param minimum: the shortest window the policy allows.

    .. seealso:: :ref:`error-retentionwindowtooshort` on the errors page.
    """

    def __init__(self, older_than: object, minimum: object) -> None:
        super().__init__(
            f"refusing to purge rows older than {older_than}: the retention policy needs "
            f"at least {minimum} (max_redelivery + max_replay + margin), or a redelivery "
            "of a purged message would be processed twice"
        )
        self.older_than = older_than
        self.minimum = minimum


class UnsafePartitionKey(InboxError, ValueError):
    """A partitioned processed-messages table whose partition key breaks deduplication.

    The partition key must come from the message itself (e.g. the producer's event time),
    so that every redelivery carries the same value, lands in the same partition and
    collides with the primary key ``(message_id, consumer_name, key)``. A key taken from
    arrival time (``received_at``, a server or Python default) differs on each delivery: a
    redelivery would land in another partition and be processed twice. Nothing is created.

    .. seealso:: :ref:`error-unsafepartitionkey` on the errors page.
    """


class PurgeLockTimeout(InboxError):
    """Another purger held the table's purge lock for longer than the timeout.

    MySQL/MariaDB purges take the named lock ``GET_LOCK()`` around each batch (MySQL
    manual, "Locking Functions"); nothing was deleted by the batch that timed out.

    .. seealso:: :ref:`error-purgelocktimeout` on the errors page.
    """


class ExactlyOnceViolation(InboxError, AssertionError):
    """A consumer failed :func:`sa_inbox.testing.check_exactly_once`: a duplicate applied
    twice, a key taken from the broker's metadata, an ack before the commit...

    An :class:`AssertionError`, so a test runner reports it as a failed test. Its message is
    the whole report: each check's verdict, then each finding with the failure mode it
    names, what was seen, the rule it breaks and the fix.

    :param report: the :class:`sa_inbox.testing.Report`.

    .. seealso:: :ref:`error-exactlyonceviolation` on the errors page.
    """

    def __init__(self, report: Any) -> None:
        super().__init__(str(report))
        self.report = report

    def __reduce__(self) -> tuple[type[ExactlyOnceViolation], tuple[Any]]:
        return type(self), (self.report,)


def _hex(digest: bytes | None) -> str:
    return "none" if digest is None else digest.hex()[:16]


InvalidConsumerArgument = InvalidArgument
InvalidDeadLetterArgument = InvalidArgument
InvalidKeySetting = InvalidArgument
InvalidRelayArgument = InvalidArgument
InvalidRetentionPolicy = InvalidArgument
InvalidRetryArgument = InvalidArgument
InvalidStoreArgument = InvalidArgument
InvalidStrategy = InvalidArgument
InvalidStreamSettings = InvalidArgument
InvalidTableOptions = InvalidArgument
