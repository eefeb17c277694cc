"""Fixtures of the outage tests, which kill and restart the suite's own servers
(``scripts/servers.sh kill`` / ``restart``, ``rabbitmqctl close_all_connections``). Each of
their modules is marked ``servers`` and ``xdist_group("servers")``: under pytest-xdist
(``--dist loadgroup``) they run in one worker, one after the other, and ``-m "not
servers"`` leaves them out of a run beside other tests on the same servers."""

from __future__ import annotations

import os

import pytest

from tests.conftest import BROKER_URL_VARIABLES, _required


@pytest.fixture
def brokers() -> None:
    """Every broker's URL (the lanes consume from all of them): a skip without them (a
    failure in CI)."""
    for variable in BROKER_URL_VARIABLES.values():
        _required(variable, "consumers through a database outage")
    assert all(os.environ.get(v) for v in BROKER_URL_VARIABLES.values())
