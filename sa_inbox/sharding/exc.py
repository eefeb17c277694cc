"""The sharding helper's own exceptions (all under :class:`~sa_inbox.exc.InboxError`)."""

from __future__ import annotations

from ..exc import ConfigurationError, InboxError

__all__ = ["InvalidShardKey", "InvalidShardMap", "ShardKeyChanged", "WrongShard"]


class InvalidShardMap(ConfigurationError, ValueError):
    """The shard map cannot route messages safely; raised when the
    :class:`~sa_inbox.sharding.ShardedInbox` is built, before any SQL.

    Raised for: an empty map; a shard name that is not a valid key (a non-empty string of at
    most 255 characters, no NUL, no surrounding whitespace); a shard that is neither an
    :class:`~sqlalchemy.engine.Engine` nor a ``sessionmaker`` bound to one; two shards on
    the same database (same backend, host, port and database name: the claims of both
    would share one table, so the map does not say where a message lives); an inbox whose
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

    The rule (issue 16): the claim lives in the same database as the business change, and
    every delivery of one message reaches the same shard. A Session bound to another shard
    would put this delivery's claim where the next delivery will not look. Nothing has been
    sent; the caller's code routes wrongly, so it is a configuration error (raised, never
    nacked, by :func:`sa_inbox.handle`).
    """


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
