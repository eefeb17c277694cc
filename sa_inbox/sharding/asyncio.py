"""The sharded inbox on asyncio: :class:`AsyncShardedInbox`, the same routing, checks and
errors as :class:`~sa_inbox.sharding.ShardedInbox` on AsyncEngines.

One implementation serves both, as in :mod:`sa_inbox.asyncio`: the synchronous router runs on
the sync engines behind the async ones (``AsyncEngine.sync_engine``), in a greenlet, and only
the edges (the handler, ack/nack, the session factory) are async.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from .. import runner
from .._compat import session_options
from .._optional import optional_dependencies
from ..checks import unwrap
from ..claim import Inbox
from ..exc import InvalidShardMap, SyncAsyncMismatch
from ..handlers import check_handler
from ..runner import Result
from .inbox import ShardedInbox
from .keys import claim_digest

with optional_dependencies(__name__, "asyncio", "greenlet"):
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

    from ..asyncio import runner as async_runner
    from ..asyncio._bridge import AsyncBind, AwaitOnly, in_greenlet, on_sync_bind
    from ..asyncio.claim import AsyncInbox

__all__ = ["AsyncShardedInbox"]


def _async_shard(name: object, shard: object) -> tuple[AsyncEngine, Callable[[], AsyncSession]]:
    if isinstance(shard, sa.Engine | sessionmaker):
        raise SyncAsyncMismatch(
            f"shard {name!r} is {type(shard).__name__}, of the synchronous API; "
            "AsyncShardedInbox takes an AsyncEngine or an async_sessionmaker bound to one: "
            "use ShardedInbox (sa_inbox.sharding) for Engines"
        )
    if isinstance(shard, AsyncEngine):
        return shard, async_sessionmaker(shard)
    if isinstance(shard, async_sessionmaker):
        bind: Any = session_options(shard).get("bind")
        if isinstance(bind, AsyncEngine):
            return bind, shard
        raise InvalidShardMap(
            f"shard {name!r}: the async_sessionmaker must be bound to an AsyncEngine, "
            f"not {type(bind).__name__}"
        )
    raise InvalidShardMap(
        f"shard {name!r} must be an AsyncEngine or an async_sessionmaker bound to one, "
        f"not {type(shard).__name__}"
    )


class AsyncShardedInbox:
    """:class:`~sa_inbox.sharding.ShardedInbox` on asyncio.

    :param inbox: as for ShardedInbox (or its AsyncInbox, unwrapped).
    :param shards: shard name -> :class:`~sqlalchemy.ext.asyncio.AsyncEngine` or
        ``async_sessionmaker`` bound to one.
    :param assign: as for ShardedInbox.
    :param check_other_shards: as for ShardedInbox (the other shards are read through
        their engines, in the claim's greenlet).
    :raises InvalidShardMap: as ShardedInbox, and for a shard that is not an AsyncEngine or
        a bound async_sessionmaker.
    :raises SyncAsyncMismatch: for a shard given as an Engine or sessionmaker.
    :raises InvalidObject: for an ``inbox`` that is neither an Inbox nor an AsyncInbox
        (an AsyncInbox is unwrapped).

    Each method checks what it is given when called, before it returns the awaitable
    (:meth:`claim` its ``bind``; :meth:`is_processed` and :meth:`handle` the shard key, and
    :meth:`handle` its handler and ``max_attempts``), so that a mistake is not lost in a
    coroutine never awaited; :meth:`is_processed`'s result also refuses to be read as a
    truth value (``if router.is_processed(...)`` without ``await`` raises
    :class:`~sa_inbox.exc.SyncAsyncMismatch`).
    """

    def __init__(
        self,
        inbox: Inbox | AsyncInbox,
        shards: Mapping[str, Any],
        *,
        assign: Callable[[str], str] | None = None,
        check_other_shards: bool = False,
    ) -> None:
        inbox = unwrap(inbox, Inbox, "inbox", entry="AsyncShardedInbox()")
        if not isinstance(shards, Mapping):
            raise InvalidShardMap(
                f"shards must be a mapping of name -> AsyncEngine, not {type(shards).__name__}"
            )
        resolved = {name: _async_shard(name, shard) for name, shard in shards.items()}
        sync_engines: dict[str, sa.Engine] = {
            name: engine.sync_engine for name, (engine, _) in resolved.items()
        }
        #: The synchronous router on the sync engines behind the async ones.
        self.sync_router = ShardedInbox(
            inbox, sync_engines, assign=assign, check_other_shards=check_other_shards
        )
        self._factories = {name: factory for name, (_, factory) in resolved.items()}

    def shard_for(self, shard_key: str) -> str:
        """As :meth:`ShardedInbox.shard_for`."""
        return self.sync_router.shard_for(shard_key)

    def session_factory(self, shard_key: str) -> Callable[[], AsyncSession]:
        """The async session factory of the shard ``shard_key`` belongs to."""
        return self._factories[self.shard_for(shard_key)]

    def claim(
        self,
        bind: AsyncBind,
        message_id: str,
        consumer_name: str,
        *,
        shard_key: str,
        payload_hash: bytes | None = None,
        message_type: str | None = None,
        correlation_id: str | None = None,
    ) -> Coroutine[Any, Any, bool]:
        """As :meth:`ShardedInbox.claim`, on an AsyncSession or AsyncConnection of the key's
        shard.

        :raises InvalidBind: at the call, before the coroutine is made, for a ``bind`` that
            is not an AsyncSession, async_scoped_session or AsyncConnection (a synchronous
            Session among them).
        """
        return on_sync_bind(
            bind,
            self.sync_router.claim,
            message_id,
            consumer_name,
            shard_key=shard_key,
            payload_hash=payload_hash,
            message_type=message_type,
            correlation_id=correlation_id,
        )

    def is_processed(
        self, message_id: str, consumer_name: str, *, shard_key: str
    ) -> AwaitOnly[bool]:
        """As :meth:`ShardedInbox.is_processed`; awaited.

        :raises InvalidShardKey, WrongShard: at the call, as :meth:`shard_for`.
        :raises SyncAsyncMismatch: if the result is read as a truth value without ``await``.
        """
        self.shard_for(shard_key)
        return AwaitOnly(
            in_greenlet(
                self.sync_router.is_processed, message_id, consumer_name, shard_key=shard_key
            ),
            "AsyncShardedInbox.is_processed()",
            "use ShardedInbox (sa_inbox.sharding) on Engines in synchronous code",
        )

    def handle(
        self,
        shard_key: str,
        message_id: str,
        consumer_name: str,
        handler: Callable[[AsyncSession], Awaitable[Any] | Any],
        *,
        ack: Callable[[], Any],
        nack: Callable[[], Any],
        max_retries: int | None = None,
        payload_hash: bytes | None = None,
        message_type: str | None = None,
        correlation_id: str | None = None,
        max_attempts: int | None = None,
    ) -> Coroutine[Any, Any, Result]:
        """:func:`sa_inbox.asyncio.handle` on the shard of ``shard_key`` (outcomes, errors and
        ``max_retries`` as :meth:`ShardedInbox.handle`).

        :raises InvalidShardKey, WrongShard: at the call, as :meth:`shard_for`.
        :raises InvalidHandler: at the call, for a handler that cannot be called as
            ``handler(session)``; :class:`~sa_inbox.exc.InvalidArgument` for a bad
            ``max_retries``.
        """
        max_retries, _ = runner.retry_options(
            "AsyncShardedInbox.handle()", max_retries, None, max_attempts=max_attempts
        )
        shard = self.shard_for(shard_key)
        check_handler(handler, ("session",), asynchronous=True)
        return async_runner.handle(
            self._factories[shard],
            self.sync_router.shard_inbox(shard),
            message_id,
            consumer_name,
            handler,
            ack=ack,
            nack=nack,
            max_retries=max_retries,
            payload_hash=claim_digest(shard_key, payload_hash),
            message_type=message_type,
            correlation_id=correlation_id,
        )
