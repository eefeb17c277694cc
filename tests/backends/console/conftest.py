"""Fixtures of the console's tests: the tables with rows, and clients of the app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.conftest import importorskip
from tests.support.console_app import ConsoleApp
from tests.support.store_app import make_engine

importorskip("sa_inbox.console", "console")

#: The console's own credentials in these tests.
TOKEN = "console-test-token-0123456789"
USER, PASSWORD = "oncall", "correct horse battery staple"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def capp(url: str) -> Iterator[ConsoleApp]:
    engine: sa.Engine = make_engine(url)
    app = ConsoleApp(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()
