"""Delete old dispatched outbox rows with the retention machinery's batched purge.

A dispatched row is no deduplication record (the consumers' inboxes are), so its window
needs no :class:`~sa_inbox.RetentionPolicy`: keep it as long as you want to inspect what
was sent. ``pending``, ``processing`` and ``dead`` rows are never deleted. ``sa-inbox purge
--table outbox_messages`` purges the same rows (it recognises the outbox's columns), with
the policy options every purge takes.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..exc import InvalidArgument
from ..retention.purge import (
    DEFAULT_BATCH_SIZE,
    Batch,
    PurgeTarget,
    outbox_dispatched_target,
    purge_target,
)
from .outbox import Outbox

__all__ = ["dispatched_target", "purge_dispatched"]


def dispatched_target(outbox: Outbox) -> PurgeTarget:
    """The outbox's ``dispatched`` rows by ``dispatched_at``, on Python's UTC clock (the
    clock the relay marks them with); the index ``ix_<table>_purge`` serves the batches."""
    return outbox_dispatched_target(outbox.table)


def purge_dispatched(
    bind: sa.Engine | Connection,
    outbox: Outbox,
    *,
    older_than: datetime.timedelta,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[Batch], None] | None = None,
) -> int:
    """Delete ``dispatched`` rows whose ``dispatched_at`` is older than ``older_than``.

    The batched purge of :func:`sa_inbox.purge` (:func:`~sa_inbox.retention.purge.purge_target`):
    short transactions of at most ``batch_size`` rows, ``SKIP LOCKED`` on PostgreSQL, a named
    lock per batch on MySQL/MariaDB.

    :param bind: an Engine, or a Connection not in a transaction.
    :param outbox: the outbox.
    :param older_than: a timedelta >= 0.
    :returns: rows deleted.
    :raises InvalidArgument: if ``older_than`` is not a non-negative timedelta.
    :raises InvalidBind, InvalidArgument: as :func:`sa_inbox.purge`.
    """
    if not isinstance(older_than, datetime.timedelta) or older_than < datetime.timedelta(0):
        raise InvalidArgument(f"older_than must be a timedelta >= 0, not {older_than!r}")
    return purge_target(
        bind, dispatched_target(outbox), older_than, batch_size=batch_size, on_batch=on_batch
    )
