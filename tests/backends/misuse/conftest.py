"""The misuse matrix runs once per async driver (aiosqlite, asyncpg, psycopg 3 async,
aiomysql), each with the same database's sync driver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from tests.backends.asyncio.conftest import async_url as async_url
from tests.backends.asyncio.conftest import sync_url as sync_url
from tests.support.app import App

from .env import Env


@pytest.fixture
def env(sync_url: str, async_url: str) -> Iterator[Env]:
    engine = sa.create_engine(sync_url)
    # each delivery runs its own event loop (asyncio.run): no connection outlives it
    aengine = create_async_engine(async_url, poolclass=NullPool)
    world = Env(App(engine), aengine)
    world.app.reset()
    yield world
    for cleanup in reversed(world.cleanups):
        cleanup()
    world.app.drop()
    engine.dispose()
    aengine.sync_engine.dispose()


__all__ = ["env"]
