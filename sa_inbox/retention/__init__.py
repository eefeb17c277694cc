"""Retention: the window processed-message rows must live, the batched purge, and
PostgreSQL time partitions.

=========================  ================================================================
module                     what it holds
=========================  ================================================================
:mod:`.policy`             :class:`RetentionPolicy`: the window a purge may not cut into
:mod:`.purge`              :func:`purge`, :func:`purge_store`: short batched deletes
:mod:`.partitions`         :class:`.partitions.PartitionedInbox`, partition maintenance (PostgreSQL)
=========================  ================================================================

Every name of the former ``sa_inbox.retention`` module is importable from here.
"""

from __future__ import annotations

from .policy import DEFAULT_MARGIN as DEFAULT_MARGIN
from .policy import RetentionPolicy as RetentionPolicy
from .policy import resolve_window as resolve_window
from .purge import DEFAULT_BATCH_SIZE as DEFAULT_BATCH_SIZE
from .purge import DEFAULT_LOCK_TIMEOUT as DEFAULT_LOCK_TIMEOUT
from .purge import Batch as Batch
from .purge import PurgeTarget as PurgeTarget
from .purge import StorePurgeResult as StorePurgeResult
from .purge import count_expired as count_expired
from .purge import database_now as database_now
from .purge import purge as purge
from .purge import purge_store as purge_store
from .purge import purge_target as purge_target
from .purge import purge_target_of as purge_target_of
from .purge import python_utc_now as python_utc_now
from .purge import store_purge_targets as store_purge_targets

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_MARGIN",
    "Batch",
    "PurgeTarget",
    "RetentionPolicy",
    "StorePurgeResult",
    "count_expired",
    "database_now",
    "purge",
    "purge_store",
    "purge_target",
    "purge_target_of",
    "python_utc_now",
    "resolve_window",
    "store_purge_targets",
]
