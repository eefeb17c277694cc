"""The sharding helper's own exceptions (all under :class:`~sa_inbox.exc.InboxError`)."""

from __future__ import annotations

from ..exc import ConfigurationError, InboxError

__all__ = [
    "InvalidShardKey",
    "InvalidShardMap",
    "ShardAssignmentFailed",
    "ShardKeyChanged",
    "ShardUnavailable",
    "UnknownShardIdentity",
    "WrongShard",
]


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
    """


class InvalidShardKey(InboxError, ValueError):
    """A shard key is not a non-empty string of at most 255 characters (no NUL, no
    surrounding whitespace); raised before any SQL, nothing sent."""


class WrongShard(ConfigurationError):
    """A claim was asked on a database that is not the shard its key routes to, or the
    ``assign`` function named a shard that is not in the map.

    The rule: the claim lives in the same database as the business change, and
    every delivery of one message reaches the same shard. A Session bound to another shard
    would put this delivery's claim where the next delivery will not look. Nothing has been
    written (at most one read-only query asked the server which it is, see
    :mod:`sa_inbox.sharding.identity`); the caller's code routes wrongly, so it is a
    configuration error (raised, never nacked, by :func:`sa_inbox.handle`).
    """


class UnknownShardIdentity(WrongShard):
    """A claim's connection comes from another Engine than its shard's, and the server it is
    on could not be established (a backend that is not asked, a server that does not answer,
    an in-memory database: see :mod:`sa_inbox.sharding.identity`). Refused, as a wrong shard
    is: the check never passes on an unknown identity. Claim on a Session of
    :meth:`~sa_inbox.sharding.ShardedInbox.session_factory` (the shard's own Engine, which
    needs no identity)."""


class ShardAssignmentFailed(WrongShard):
    """The ``assign`` function raised for a shard key (e.g. a ``KeyError`` from a directory
    that does not know the tenant). Raised before any SQL, the function's exception chained
    as ``__cause__``; :meth:`~sa_inbox.sharding.ShardedInbox.handle` raises it without ack or
    nack, as any configuration error.

    :param shard_key: the key that could not be routed.
    :param cause: the function's exception.
    """

    def __init__(self, shard_key: str, cause: Exception) -> None:
        super().__init__(
            f"assign({shard_key!r}) raised {type(cause).__name__}: {cause}; the key cannot be "
            "routed to a shard"
        )
        self.shard_key = shard_key


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
    """

    def __init__(self, shard: str, message_id: str, cause: BaseException) -> None:
        super().__init__(
            f"check_other_shards: shard {shard!r} could not be read ({type(cause).__name__}), "
            f"so whether message {message_id!r} was claimed there is unknown: refused, not "
            "applied (it is retried when redelivered; the shard must be reachable)"
        )
        self.shard = shard
        self.message_id = message_id


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
