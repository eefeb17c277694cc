"""The Kafka tests' fixtures (``test_kafka.py``, ``test_faststream_kafka.py``): the broker's
address, an async driver's URL, and the payments app with the Kafka adapter's tables. Test
modules of other brokers define an ``aio_app`` of their own, which wins there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.backends.brokers.kafka_support import bootstrap, kafka_app
from tests.conftest import ASYNC_DRIVERS, async_driver_url, broker_url
from tests.support.app import App, sync_driver_url


@pytest.fixture
def servers() -> str:
    """The Kafka broker's ``host:port``."""
    return bootstrap(broker_url("kafka"))


#: One async driver per database: an adapter takes the same path on each driver of one
#: database (psycopg 3's async driver is proven by ``tests/backends/asyncio`` and the
#: misuse matrix).
DRIVERS = [name for name in ASYNC_DRIVERS if name != "psycopg_async"]


@pytest.fixture(params=DRIVERS)
def aio_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """An async driver's URL: aiosqlite, asyncpg, aiomysql."""
    return async_driver_url(request.param, tmp_path)


@pytest.fixture
def aio_app(aio_url: str) -> Iterator[App]:
    """The payments app (on the sync driver of ``aio_url``'s backend), the Kafka adapter's
    tables created with it."""
    engine = sa.create_engine(sync_driver_url(aio_url))
    app = kafka_app(engine)
    yield app
    app.drop()
    engine.dispose()
