"""Fixtures of the outage tests, which kill and restart servers (``scripts/servers.sh kill``
/ ``restart``, ``rabbitmqctl close_all_connections``): servers of their own, started once
for this package (:func:`tests.support.servers.own_servers`), never the ones the rest of
the suite uses beside them on other xdist workers. The package is one xdist group
(:data:`tests.support.parallel.GROUPS`): its tests run one after the other on one worker."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BROKER_URL_VARIABLES, URL_VARIABLES
from tests.support.servers import own_servers

#: The servers the lanes need: both databases and every broker.
SERVERS = ("postgresql", "mysql", "rabbitmq", "redis", "nats", "kafka", "sqs")


@pytest.fixture(scope="package")
def server_dir() -> Iterator[Path]:
    """The directory of this package's own servers; while its tests run, the URL variables
    (``SA_INBOX_TEST_POSTGRESQL_URL``, ``SA_INBOX_TEST_AMQP_URL``, ...) name them."""
    variables = [URL_VARIABLES["postgresql"], URL_VARIABLES["mysql"]]
    variables += BROKER_URL_VARIABLES.values()
    with own_servers(*SERVERS) as servers:
        saved = {name: os.environ.get(name) for name in variables}
        missing = [name for name in variables if not servers.env.get(name)]
        assert not missing, f"scripts/servers.sh start exported no {missing}"
        os.environ.update({name: servers.env[name] for name in variables})
        try:
            yield servers.directory
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture
def brokers(server_dir: Path) -> None:
    """Every broker's URL (the lanes consume from all of them), from this package's own
    servers."""
    assert all(os.environ.get(v) for v in BROKER_URL_VARIABLES.values())
