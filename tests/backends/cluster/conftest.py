"""The live Galera cluster as a fixture: fresh tables before each test, dropped after."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.conftest import GALERA_DIR_VARIABLE
from tests.support.galera import GaleraCluster


@pytest.fixture
def cluster(galera_urls: list[str]) -> Iterator[GaleraCluster]:
    """The three nodes with fresh accounts/ledger/inbox tables (3 accounts at 0)."""
    cluster = GaleraCluster(galera_urls, os.environ.get(GALERA_DIR_VARIABLE))
    cluster.reset()
    yield cluster
    cluster.drop()
