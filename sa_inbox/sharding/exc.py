"""The sharding helper's exceptions, defined in :mod:`sa_inbox.exc` and re-exported here so
that this import path keeps working."""

from __future__ import annotations

from ..exc import InvalidShardKey as InvalidShardKey
from ..exc import InvalidShardMap as InvalidShardMap
from ..exc import ShardAssignmentFailed as ShardAssignmentFailed
from ..exc import ShardKeyChanged as ShardKeyChanged
from ..exc import ShardUnavailable as ShardUnavailable
from ..exc import UnknownShardIdentity as UnknownShardIdentity
from ..exc import WrongShard as WrongShard

__all__ = [
    "InvalidShardKey",
    "InvalidShardMap",
    "ShardAssignmentFailed",
    "ShardKeyChanged",
    "ShardUnavailable",
    "UnknownShardIdentity",
    "WrongShard",
]
