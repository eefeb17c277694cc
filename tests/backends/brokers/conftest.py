"""The Kafka tests' fixtures (``test_kafka.py``, ``test_faststream_kafka.py``): the broker's
address, and the payments app with the Kafka adapter's tables on each async driver. Test
modules of other brokers define an ``aio_app`` (and the SQS one an ``aio_url``) of their
own, which win there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.backends.brokers.kafka_support import bootstrap, kafka_app
from tests.conftest import ASYNC_DRIVERS as DRIVERS
from tests.conftest import async_driver_url, broker_url
from tests.support.app import App, sync_driver_url


@pytest.fixture
def servers() -> str:
    """The Kafka broker's ``host:port``."""
    return bootstrap(broker_url("kafka"))


@pytest.fixture(params=list(DRIVERS))
def aio_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """An async driver's URL (one run per driver of ``tests/backends/asyncio``)."""
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
