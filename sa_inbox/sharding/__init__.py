"""Sharding: the inbox sharded with the business data.

The claim must live in the same database as the business change, so the inbox is sharded
with the business data, and every delivery of one message must reach the same shard.

* :class:`ShardedInbox`: route by shard key, claim on that shard, refuse a changed shard
  key;
* :func:`~sa_inbox.sharding.keys.rendezvous_shard`: the default, stable assignment
  (SHA-256);
* :class:`~sa_inbox.sharding.asyncio.AsyncShardedInbox`: the same on AsyncEngines.
"""

from __future__ import annotations

from ..exc import InvalidShardKey as InvalidShardKey
from ..exc import InvalidShardMap as InvalidShardMap
from ..exc import ShardAssignmentFailed as ShardAssignmentFailed
from ..exc import ShardKeyChanged as ShardKeyChanged
from ..exc import ShardUnavailable as ShardUnavailable
from ..exc import UnknownShardIdentity as UnknownShardIdentity
from ..exc import WrongShard as WrongShard
from .inbox import ShardedInbox as ShardedInbox
from .inbox import ShardInbox as ShardInbox
from .keys import rendezvous_shard as rendezvous_shard
from .keys import shard_key_digest as shard_key_digest
from .shardmap import ShardTarget as ShardTarget

__all__ = [
    "InvalidShardKey",
    "InvalidShardMap",
    "ShardAssignmentFailed",
    "ShardInbox",
    "ShardKeyChanged",
    "ShardTarget",
    "ShardUnavailable",
    "ShardedInbox",
    "UnknownShardIdentity",
    "WrongShard",
    "rendezvous_shard",
    "shard_key_digest",
]
