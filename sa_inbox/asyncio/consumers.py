"""The asyncio spelling of a consumer name's hand-over (:mod:`sa_inbox.consumers`).

:meth:`sa_inbox.consumers.Consumers.hand_over` runs on the AsyncEngine's synchronous engine
in a greenlet, as the rest of the asyncio API does; the engine is checked when the method is
called, before the awaitable exists.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from ..checks import require_asyncio
from ..consumers import Consumers
from ..exc import InvalidTable
from ._bridge import in_greenlet

__all__ = ["hand_over"]


def hand_over(
    consumers: Consumers | None,
    engine: object,
    consumer_name: str,
    handler: object,
    *,
    entry: str,
) -> Coroutine[Any, Any, str | None]:
    """``consumers.hand_over(engine.sync_engine, consumer_name, handler)``, awaitable.

    :param entry: the method's name, for the messages.
    :raises SyncAsyncMismatch: for a synchronous Engine, at the call.
    :raises InvalidTable: for an inbox or store built with ``consumers=False``, at the call.
    :raises: when awaited, as :meth:`~sa_inbox.consumers.Consumers.hand_over`.
    """
    async_engine = require_asyncio(
        engine,
        AsyncEngine,
        "engine",
        entry=entry,
        instead="for an Engine, call inbox.consumers.hand_over(engine, consumer_name, handler)",
    )
    if consumers is None:
        raise InvalidTable(
            f"{entry}: this one was built with consumers=False, so no consumer name has an "
            "owner to hand over"
        )
    return in_greenlet(consumers.hand_over, async_engine.sync_engine, consumer_name, handler)
