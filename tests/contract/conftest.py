"""The ``sut`` fixture: every contract scenario runs once per store.

``memory`` is :class:`sa_inbox.testing.MemoryStore`; the others are the database store on
the backends of :data:`tests.conftest.BACKENDS`, found (or skipped, or failed in CI) exactly
as the ``url`` fixture finds them, and marked ``backend``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, backend_url
from tests.support.store_app import StoreApp, make_engine

from .stores import DatabaseStore, MemoryStoreUnderTest, StoreUnderTest

STORES = ("memory", *BACKENDS)


@pytest.fixture(params=STORES)
def sut(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreUnderTest]:
    """The store under test, empty, with its own fake clock."""
    if request.param == "memory":
        yield MemoryStoreUnderTest()
        return
    request.applymarker(pytest.mark.backend)
    engine = make_engine(backend_url(request.param, tmp_path))
    app = StoreApp(engine)
    app.reset()
    try:
        yield DatabaseStore(request.param, app)
    finally:
        app.drop()
        engine.dispose()
