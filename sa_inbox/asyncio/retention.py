"""Retention on an AsyncEngine: :func:`purge` and :func:`purge_store`, awaited.

The synchronous purge (:mod:`sa_inbox.retention`) runs in a greenlet on the engine's
``sync_engine``: its short batches are awaited on the event loop, and its pauses between
batches are ``asyncio`` sleeps, so other tasks (consumers claiming) run meanwhile.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from .. import retention
from ..exc import InvalidBind
from ._bridge import in_greenlet, loop_sleep

__all__ = ["purge", "purge_store"]


def _sync_engine(engine: AsyncEngine) -> Any:
    if not isinstance(engine, AsyncEngine):
        raise InvalidBind(f"bind must be an AsyncEngine, not {type(engine).__name__}")
    return engine.sync_engine


async def purge(engine: AsyncEngine, **kwargs: Any) -> int:
    """``await purge(engine, older_than=policy, ...)``: :func:`sa_inbox.purge` on an
    AsyncEngine; keywords, result and errors as there.

    :raises InvalidBind: if ``engine`` is not an AsyncEngine (before any SQL).
    """
    return await in_greenlet(retention.purge, _sync_engine(engine), sleep=loop_sleep, **kwargs)


async def purge_store(engine: AsyncEngine, store: Any, **kwargs: Any) -> retention.StorePurgeResult:
    """:func:`sa_inbox.retention.purge_store` on an AsyncEngine; ``store`` is an
    :class:`~sa_inbox.InboxStore` or an :class:`~sa_inbox.asyncio.AsyncInboxStore`."""
    sync_store = getattr(store, "sync_store", store)
    return await in_greenlet(
        retention.purge_store, _sync_engine(engine), sync_store, sleep=loop_sleep, **kwargs
    )
