"""Pool helpers: a pool of one connection, and a count of the connections an engine opens."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

#: Engine keywords for a pool of exactly one connection: every checkout gets the same one.
ONE_CONNECTION: dict[str, Any] = {"pool_size": 1, "max_overflow": 0}


def count_connects(engine: sa.Engine | AsyncEngine) -> list[object]:
    """The DBAPI connections ``engine`` opens from now on, one entry each (a connection the
    pool invalidated is replaced by a new one)."""
    sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine
    opened: list[object] = []
    sa.event.listen(sync_engine, "connect", lambda dbapi_connection, record: opened.append(record))
    return opened
