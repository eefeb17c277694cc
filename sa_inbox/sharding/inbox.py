"""The sharded inbox: route each message by its shard key to one database, claim it there.

The rule: the claim must live in the same database as the business change (only
then do they commit together), so the inbox is sharded with the business data, and every
delivery of one message must reach the same shard (only there is its claim).
:class:`ShardedInbox` enforces what it can of it:

* routing is a pure function of the shard key (:mod:`sa_inbox.sharding.keys`, or the
  caller's ``assign``), checked to name a shard of the map;
* a claim runs only on a Session or Connection of the shard its key routes to
  (:class:`~sa_inbox.exc.WrongShard` otherwise, before any write): one of the
  shard's own Engine is; one of another Engine is identified by asking its server, never
  by its URL (:mod:`sa_inbox.sharding.identity`), and refused if that fails;
* each claim stores a digest of its shard key, in the same single INSERT; a redelivery that
  reaches the same shard under another key is refused with
  :class:`~sa_inbox.exc.ShardKeyChanged` (one locking read, on the duplicate
  path only, as the collision check's);
* a redelivery whose new key routes it to *another* shard finds no claim there: only asking
  the other shards can see it. ``check_other_shards=True`` does so after every *new* claim
  (one primary-key read per other shard, each on its own connection), with a race it cannot
  close: two deliveries of one message under two keys, running at the same time on two
  shards, both claim before either commits, neither sees the other's uncommitted claim,
  and both apply. No isolation level spans two databases; only a distributed lock or
  two-phase commit would, which is what sharding avoids. The check catches the ordinary
  case (a redelivery after the first delivery committed) and never the concurrent one.
  It also ties every shard to the others' availability: a shard it cannot read makes every
  new claim on every other shard fail with :class:`~sa_inbox.exc.ShardUnavailable`
  (nothing is applied unchecked).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from .. import runner
from ..checks import require
from ..claim import Bind, Inbox
from ..exc import (
    InvalidShardMap,
    MessageIdCollision,
    ShardAssignmentFailed,
    ShardKeyChanged,
    ShardUnavailable,
    WrongShard,
)
from ..runner import Result
from .identity import ServerIdentity, server_identity
from .keys import claim_digest, rendezvous_shard, split_digest, validate_shard_key
from .shardmap import ShardTarget, build_shard_map

__all__ = ["ShardInbox", "ShardedInbox"]


class ShardedInbox:
    """An :class:`~sa_inbox.Inbox` sharded with the business data over several databases.

    Every shard holds the same tables (the business tables and the inbox table, created on
    each, e.g. ``metadata.create_all(engine)`` per shard); a message's shard key (a tenant,
    an account, an order id: whatever the business data is sharded by) picks the shard
    where its claim and its business change commit together.

    :param inbox: the inbox definition shared by every shard: its table (which must have the
        ``payload_hash`` column, where the shard key's digest is stored), strategy and hooks.
        Its ``on_collision`` must be ``"raise"``.
    :param shards: shard name -> :class:`~sqlalchemy.engine.Engine` or ``sessionmaker``
        bound to one (validated: see :func:`~sa_inbox.sharding.shardmap.build_shard_map`).
    :param assign: ``shard_key -> shard name``, to route by a directory (a tenant table, a
        range map) instead of the default :func:`~sa_inbox.sharding.keys.rendezvous_shard`
        (SHA-256 highest-random-weight hashing, stable across processes). It must be a pure
        function of the key for as long as a message may be redelivered.
    :param check_other_shards: after each new claim, ask every other shard whether the
        message is claimed there (a redelivery whose key changed to one of another shard),
        and refuse it with :class:`~sa_inbox.exc.ShardKeyChanged`. Costs one read
        per other shard per new message; cannot see a delivery running at the same time on
        another shard (see the module's documentation). **Every shard must be readable**:
        while one shard is unreachable, each new message on every other shard is refused
        with :class:`~sa_inbox.exc.ShardUnavailable` (naming the shard; a FAILED
        delivery, nacked, so a broker with a redelivery limit dead-letters it): requeue on
        it with a delay. Default False.

    Claim a consumer's messages through the ShardedInbox only: a plain
    :class:`~sa_inbox.Inbox` on the same table stores a bare payload digest, which the
    ShardedInbox cannot read a shard key from (it then judges the payload only), and the
    plain collision check would compare a sharded digest as one payload digest.

    :raises InvalidShardMap: for a bad map (see above), an inbox table without
        ``payload_hash``, or an inbox whose ``on_collision`` is ``"record"`` (a changed
        shard key must be refused, never recorded and skipped).
    :raises SyncAsyncMismatch: for an :class:`~sa_inbox.asyncio.AsyncInbox`, or a shard
        given as an AsyncEngine or async_sessionmaker (use
        :class:`~sa_inbox.sharding.asyncio.AsyncShardedInbox`).
    :raises InvalidObject: for an ``inbox`` that is not an Inbox.

    Example::

        sharded = ShardedInbox(Inbox(Base.metadata), {"eu": eu_engine, "us": us_engine})
        result = sharded.handle(
            message.tenant_id, message.id, "billing",
            functools.partial(apply_payment, message=message),
            ack=message.ack, nack=message.nack,
        )
    """

    def __init__(
        self,
        inbox: Inbox,
        shards: Mapping[str, Any],
        *,
        assign: Callable[[str], str] | None = None,
        check_other_shards: bool = False,
    ) -> None:
        inbox = require(
            inbox,
            Inbox,
            "inbox",
            entry="ShardedInbox()",
            instead="pass the Inbox itself, or use AsyncShardedInbox "
            "(sa_inbox.sharding.asyncio) on AsyncEngines",
        )
        if "payload_hash" not in inbox.table.c:
            raise InvalidShardMap(
                f"table {inbox.table.name!r} has no payload_hash column: a sharded claim "
                "stores its shard key's digest there"
            )
        if inbox.on_collision != "raise":
            raise InvalidShardMap(
                "a ShardedInbox needs on_collision='raise': a changed shard key or payload "
                "must be refused, never recorded and skipped"
            )
        if assign is not None and not callable(assign):
            raise InvalidShardMap(f"assign must be callable, not {type(assign).__name__}")
        self.inbox = inbox
        self._targets = build_shard_map(shards)
        #: The shard names, sorted.
        self.names: tuple[str, ...] = tuple(sorted(self._targets))
        self._assign = assign
        self.check_other_shards = bool(check_other_shards)
        self._inboxes = {name: ShardInbox(self, target) for name, target in self._targets.items()}
        self._identities: dict[str, ServerIdentity] = {}

    # -- routing ------------------------------------------------------------------------

    def shard_for(self, shard_key: str) -> str:
        """The name of the shard ``shard_key`` belongs to.

        :raises InvalidShardKey: for an invalid key (before anything else).
        :raises WrongShard: if ``assign`` returns a name that is not in the map.
        :raises ShardAssignmentFailed: (a WrongShard) if ``assign`` raises; its exception is
            chained as ``__cause__``.
        """
        key = validate_shard_key(shard_key)
        if self._assign is None:
            return rendezvous_shard(key, self.names)
        try:
            name = self._assign(key)
        except Exception as exc:
            raise ShardAssignmentFailed(key, exc) from exc
        if not isinstance(name, str) or name not in self._targets:
            raise WrongShard(
                f"assign({key!r}) returned {name!r}, which is not a shard of the map "
                f"{list(self.names)}"
            )
        return name

    def target(self, shard_key: str) -> ShardTarget:
        """The shard (name, engine, session factory) ``shard_key`` belongs to.

        :raises InvalidShardKey, WrongShard: as :meth:`shard_for`.
        """
        return self._targets[self.shard_for(shard_key)]

    def session_factory(self, shard_key: str) -> Callable[[], Session]:
        """The session factory of the shard ``shard_key`` belongs to: open the business
        change's transaction with it and claim in it (:meth:`claim`)."""
        return self.target(shard_key).session_factory

    def shard_inbox(self, name: str) -> ShardInbox:
        """The :class:`ShardInbox` of shard ``name``.

        :raises WrongShard: if ``name`` is not a shard of the map.
        """
        try:
            return self._inboxes[name]
        except KeyError:
            raise WrongShard(f"{name!r} is not a shard of the map {list(self.names)}") from None

    # -- claims -------------------------------------------------------------------------

    def claim(
        self,
        bind: Bind,
        message_id: str,
        consumer_name: str,
        *,
        shard_key: str,
        payload_hash: bytes | None = None,
        message_type: str | None = None,
        correlation_id: str | None = None,
    ) -> bool:
        """Claim ``message_id`` for ``consumer_name`` on the shard of ``shard_key``, inside
        the caller's transaction on that shard (as :meth:`sa_inbox.Inbox.claim`).

        :param bind: a Session, scoped_session or Connection of the key's shard, in the
            caller's transaction (the one holding the business change).
        :param shard_key: the message's shard key.
        :param payload_hash: optional digest of the payload, at most 32 bytes
            (:func:`sa_inbox.collision.payload_hash`); compared as the plain inbox does.
        :returns: True if this transaction now owns the message; False for a duplicate
            (same key; same payload digest where both deliveries gave one).
        :raises InvalidShardKey: for an invalid key, before any SQL.
        :raises WrongShard: if ``bind`` is not on the key's shard (its server asked when
            ``bind`` is not of the shard's own Engine), before any write; a
            :class:`~sa_inbox.exc.ShardAssignmentFailed` if ``assign`` raises.
        :raises UnknownShardIdentity: (a WrongShard) if ``bind`` is of another Engine and its
            server or the shard's cannot be identified.
        :raises InvalidBind: for a Session bound to no engine.
        :raises ShardUnavailable: with ``check_other_shards``, if another shard cannot be
            read: roll back and nack (or requeue later).
        :raises ShardKeyChanged: if the message was claimed under another shard key on
            this shard (or, with ``check_other_shards``, on another shard): roll back and
            nack.
        :raises MessageIdCollision: if both deliveries gave a payload digest and they
            differ.
        :raises: everything :meth:`sa_inbox.Inbox.claim` raises.
        """
        shard = self.shard_for(shard_key)
        digest = claim_digest(shard_key, payload_hash)
        return self._inboxes[shard].claim(
            bind,
            message_id,
            consumer_name,
            payload_hash=digest,
            message_type=message_type,
            correlation_id=correlation_id,
        )

    def is_processed(self, message_id: str, consumer_name: str, *, shard_key: str) -> bool:
        """Whether a committed claim of the message exists on the shard of ``shard_key``
        (one read in a short transaction of its own).

        :raises InvalidShardKey, WrongShard: as :meth:`shard_for`.
        """
        target = self.target(shard_key)
        with target.engine.connect() as conn:
            return self._inboxes[target.name].is_processed(conn, message_id, consumer_name)

    def handle(
        self,
        shard_key: str,
        message_id: str,
        consumer_name: str,
        handler: Callable[[Session], object],
        *,
        ack: Callable[[], Any],
        nack: Callable[[], Any],
        max_retries: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        headers: Mapping[str, str] | None = None,
        payload_hash: bytes | None = None,
        message_type: str | None = None,
        correlation_id: str | None = None,
        max_attempts: int | None = None,
    ) -> Result:
        """:func:`sa_inbox.handle` on the shard of ``shard_key``: a new Session of that
        shard, the claim (as :meth:`claim`), ``handler(session)``, the commit, then ack.

        :param shard_key: the message's shard key.
        :param max_retries: as :func:`sa_inbox.handle` (``max_attempts``: its deprecated
            spelling, ``max_retries + 1``).
        :returns: a :class:`~sa_inbox.Result`; a
            :class:`~sa_inbox.exc.ShardKeyChanged` or
            :class:`~sa_inbox.exc.MessageIdCollision` is a FAILED delivery (rolled back,
            nacked, the handler's change not committed), and so is a
            :class:`~sa_inbox.exc.ShardUnavailable` (``check_other_shards`` could
            not read a shard).
        :raises InvalidShardKey: for an invalid key, before anything (neither acked nor
            nacked, as an invalid message id).
        :raises WrongShard: if ``assign`` names an unknown shard or raises
            (:class:`~sa_inbox.exc.ShardAssignmentFailed`): a configuration error,
            neither acked nor nacked.
        :raises: everything :func:`sa_inbox.handle` raises.
        """
        max_retries, _ = runner.retry_options(
            "ShardedInbox.handle()", max_retries, None, max_attempts=max_attempts
        )
        target = self.target(shard_key)
        return runner.handle(
            target.session_factory,
            self._inboxes[target.name],
            message_id,
            consumer_name,
            handler,
            ack=ack,
            nack=nack,
            max_retries=max_retries,
            sleep=sleep,
            headers=headers,
            payload_hash=claim_digest(shard_key, payload_hash),
            message_type=message_type,
            correlation_id=correlation_id,
        )

    def claimed_elsewhere(self, shard: str, message_id: str, consumer_name: str) -> str | None:
        """The first other shard (by name) holding a committed claim of the message, or
        None: one primary-key read per other shard, each in a short transaction of its own
        (see the module's documentation for what it cannot see).

        :raises ShardUnavailable: if another shard cannot be read (a connection error or a
            pool timeout, chained as ``__cause__``): whether the message was claimed there
            is then unknown.
        """
        for name in self.names:
            if name == shard:
                continue
            try:
                with self._targets[name].engine.connect() as conn:
                    found = self._inboxes[name].is_processed(conn, message_id, consumer_name)
            except _UNREACHABLE as exc:
                raise ShardUnavailable(name, message_id, exc) from exc
            if found:
                return name
        return None

    def shard_identity(self, name: str, *, refresh: bool = False) -> ServerIdentity:
        """The server identity of shard ``name`` (:mod:`sa_inbox.sharding.identity`), read
        once through its engine and cached; ``refresh=True`` reads it again (after a
        failover the shard's engine may reach another server of the same cluster).

        :raises WrongShard: if ``name`` is not a shard of the map.
        :raises UnknownShardIdentity: as :func:`~sa_inbox.sharding.identity.server_identity`.
        """
        target = self.shard_inbox(name).target
        cached = self._identities.get(name)
        if cached is None or refresh:
            with target.engine.connect() as conn:
                cached = server_identity(conn, fresh=refresh)
            self._identities[name] = cached
        return cached


#: The errors that mean "this shard cannot be read now", not "the read is wrong".
_UNREACHABLE = (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError)


class ShardInbox(Inbox):
    """The inbox of one shard of a :class:`ShardedInbox`: an :class:`~sa_inbox.Inbox` on
    the shared table whose claims carry the sharded digest
    (:func:`~sa_inbox.sharding.keys.claim_digest`, given as ``payload_hash``) and are
    judged by it on the duplicate path. Built by the ShardedInbox; hand it to
    :func:`sa_inbox.asyncio.handle` or :func:`sa_inbox.handle` only with such a digest.

    :param router: the ShardedInbox.
    :param target: this shard.
    """

    def __init__(self, router: ShardedInbox, target: ShardTarget) -> None:
        template = router.inbox
        super().__init__(table=template.table, strategy=template.strategy, hooks=template.hooks)
        # The duplicate path is judged here (the shard key's half, then the payload's), not by
        # the plain collision check, which would compare the two halves as one digest (the
        # claim path took the inbox's check when it was made: it goes too).
        self.collisions = None
        self._claims.collisions = None
        self.router = router
        self.target = target
        c = self.table.c
        self._stored = (
            sa.select(c.payload_hash)
            .where(c.message_id == sa.bindparam("message_id"))
            .where(c.consumer_name == sa.bindparam("consumer_name"))
            .with_for_update(read=True)
        )

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
        """:meth:`sa_inbox.Inbox.claim` on this shard, ``payload_hash`` being the sharded
        digest; see :meth:`ShardedInbox.claim` for the errors."""
        self.validate(message_id, consumer_name, payload_hash=payload_hash)
        conn = self._connection(bind)
        self._check_shard(conn)
        if super().claim(
            conn,
            message_id,
            consumer_name,
            message_type=message_type,
            correlation_id=correlation_id,
            payload_hash=payload_hash,
        ):
            if self.router.check_other_shards:
                found = self.router.claimed_elsewhere(self.target.name, message_id, consumer_name)
                if found is not None:
                    raise ShardKeyChanged(message_id, consumer_name, self.target.name, found)
            return True
        params = {"message_id": message_id, "consumer_name": consumer_name}
        stored = conn.execute(self._stored, params).scalar()
        previous = None if stored is None else bytes(stored)
        self._judge(message_id, consumer_name, previous, payload_hash)
        return False

    def _judge(
        self, message_id: str, consumer_name: str, stored: bytes | None, new: bytes | None
    ) -> None:
        """Refuse a duplicate whose shard key (or payload) differs from the stored claim's."""
        stored_key, stored_payload = split_digest(stored)
        new_key, new_payload = split_digest(new)
        if stored_key is not None and new_key is not None and stored_key != new_key:
            raise ShardKeyChanged(message_id, consumer_name, self.target.name, self.target.name)
        if stored_payload is not None and new_payload is not None and stored_payload != new_payload:
            raise MessageIdCollision(message_id, consumer_name, stored_payload, new_payload)

    def _check_shard(self, conn: Connection) -> None:
        """Refuse a connection that is not on this shard's database, before the claim.

        A connection of the shard's own Engine is on it. Another Engine's connection is
        compared by what its server says it is (:mod:`sa_inbox.sharding.identity`; its URL
        cannot tell, see there), against the shard's identity, read again once before a
        refusal (a failover may have moved the shard's engine).

        :raises WrongShard: for a connection on another server or database.
        :raises UnknownShardIdentity: if either identity cannot be established.
        """
        engine = conn.engine
        if engine is self.target.engine:
            return
        mine = server_identity(conn)
        name = self.target.name
        if mine == self.router.shard_identity(name):
            return
        if mine == self.router.shard_identity(name, refresh=True):
            return
        raise WrongShard(
            f"the claim's connection is on {engine.url.render_as_string(hide_password=True)}, "
            f"not on shard {name!r} "
            f"({self.target.engine.url.render_as_string(hide_password=True)}), where the "
            "message's shard key routes it (the servers say they are different: "
            f"{_shown(mine)} and {_shown(self.router.shard_identity(name))}): open the "
            "transaction with ShardedInbox.session_factory(shard_key)"
        )


def _shown(identity: ServerIdentity) -> str:
    return "/".join(identity)
