"""The Kafka tests' fixtures (``test_kafka.py``, ``test_faststream_kafka.py``): the broker's
address, and the payments app with the Kafka adapter's tables on each async driver. Test
modules of other brokers define ``aio_url`` / ``aio_app`` of their own, which win there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.backends.brokers.kafka_support import bootstrap, kafka_app, sync_url
from tests.conftest import ASYNC_DRIVERS as DRIVERS
from tests.conftest import backend_url, broker_url
from tests.support.app import App


@pytest.fixture
def servers() -> str:
    """The Kafka broker's ``host:port``."""
    return bootstrap(broker_url("kafka"))


@pytest.fixture(params=list(DRIVERS))
def aio_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    backend, driver = DRIVERS[request.param]
    url = sa.make_url(backend_url(backend, tmp_path))
    return url.set(drivername=driver).render_as_string(hide_password=False)


@pytest.fixture
def aio_app(aio_url: str) -> Iterator[App]:
    """The payments app (on the sync driver of ``aio_url``'s backend), the Kafka adapter's
    tables created with it."""
    engine = sa.create_engine(sync_url(aio_url))
    app = kafka_app(engine)
    yield app
    app.drop()
    engine.dispose()
