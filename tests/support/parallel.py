"""The suite on pytest-xdist workers (``pytest -n N --dist loadgroup``, as ``scripts/test.sh``
runs it).

The tests create and drop tables of fixed names in the test database, so each worker gets a
database of its own on the PostgreSQL and MariaDB servers: at its start,
``<test database>_<worker id>`` (``sa_inbox_test_gw0``, ...) is created beside the test
database (dropped first if a former run left it), the worker's URL variables are pointed at
it (child processes inherit them), and it is dropped when the worker ends. Brokers need no
such step: each test names its own queues, streams and subjects (a uuid in the name).

What a database per worker cannot separate runs in one group, serially on one worker while
the other workers go on: :data:`GROUPS` (and Oracle's tests: one database, no server here to
make more on). ``--dist loadgroup`` schedules by these groups (:func:`scheduler_plugin`):
the controller knows a test by its node id only, so a group is named by where its tests
live, and :func:`check_groups` fails the collection if a test uses a group's fixture
elsewhere. Without xdist nothing changes: one process, the test database itself.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import sqlalchemy as sa

from tests.support.databases import create_database, drop_database

__all__ = [
    "GROUPS",
    "check_groups",
    "end_worker",
    "group_of",
    "scheduler_plugin",
    "start_worker",
    "worker_id",
]

#: Set by pytest-xdist in each worker process: ``gw0``, ``gw1``, ...
WORKER_VARIABLE = "PYTEST_XDIST_WORKER"

#: Node id prefixes of the tests that share one thing across workers, and their group: the
#: Galera cluster's one test database (its chaos test SIGKILLs a node), the second
#: PostgreSQL server the sharding tests start once per session (once per worker otherwise),
#: the servers the outage tests start once for their package, then kill and restart, and
#: the documentation's examples and tutorial (the broker queues and streams they name).
GROUPS = {
    "tests/backends/cluster/test_galera_": "galera",
    "tests/backends/sharding/": "shards",
    "tests/backends/outages/": "outages",
    "tests/docs/test_examples.py": "docs",
    "tests/docs/test_tutorial.py": "docs",
}

#: The fixture behind each group: a test using it must live where its group's tests do.
GROUP_FIXTURES = {"galera_urls": "galera", "shard_urls": "shards", "server_dir": "outages"}

#: The databases this worker made: (URL variable, the test database's URL, the new name).
_MADE = pytest.StashKey[list[tuple[str, str, str]]]()


def worker_id() -> str | None:
    """The xdist worker id of this process (``gw0``, ...), or None outside xdist."""
    return os.environ.get(WORKER_VARIABLE) or None


def start_worker(config: pytest.Config, variables: list[str]) -> None:
    """On an xdist worker, for each of the URL ``variables`` that is set: create the
    worker's database beside the one it names and point the variable at it. Nothing outside
    xdist.

    :raises pytest.UsageError: if a server refuses to create the database (a user without
        the right to: run with ``-n 0``, or grant it).
    """
    worker = worker_id()
    made: list[tuple[str, str, str]] = []
    config.stash[_MADE] = made
    if worker is None:
        return
    for variable in variables:
        base = os.environ.get(variable)
        if not base:
            continue
        name = f"{_database(base)}_{worker}"
        try:
            os.environ[variable] = create_database(base, name)
        except Exception as exc:
            raise pytest.UsageError(
                f"xdist worker {worker}: cannot create the database {name} beside {variable}'s "
                f"({exc.__class__.__name__}: {exc}); run without xdist (-n 0) or let the user "
                "create databases"
            ) from exc
        made.append((variable, base, name))


def end_worker(config: pytest.Config) -> None:
    """Drop the databases :func:`start_worker` made and give the variables back."""
    for variable, base, name in reversed(config.stash.get(_MADE, [])):
        os.environ[variable] = base
        drop_database(base, name)


def group_of(nodeid: str) -> str | None:
    """The group test ``nodeid`` runs in, if any."""
    for prefix, group in GROUPS.items():
        if nodeid.startswith(prefix):
            return group
    return "oracle" if _names_oracle(nodeid) else None


def _names_oracle(nodeid: str) -> bool:
    """Whether a parametrised test's id names Oracle among its parameters (``[oracle]``,
    ``[native-oracle]``, ``[oracle-True]``, ...)."""
    params = nodeid.rpartition("::")[2].partition("[")[2].removesuffix("]")
    return "oracle" in params.split("-")


def check_groups(items: list[pytest.Item]) -> None:
    """Fail the collection if a test uses a group's fixture outside that group's path.

    :raises pytest.UsageError: naming the test, the fixture and the paths of its group.
    """
    for item in items:
        for fixture, group in GROUP_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()) and group_of(item.nodeid) != group:
                paths = [prefix for prefix, name in GROUPS.items() if name == group]
                raise pytest.UsageError(
                    f"{item.nodeid} uses {fixture}: it must live under {', '.join(paths)} "
                    f"(xdist group {group!r}), or tests.support.parallel.GROUPS name its path"
                )


def scheduler_plugin() -> object:
    """A plugin whose ``pytest_xdist_make_scheduler`` gives ``--dist loadgroup`` the groups
    of :func:`group_of`; each other test is a unit of its own, as for pytest-xdist's
    loadgroup. (Registered only where pytest-xdist is loaded: its hook is unknown
    otherwise.)"""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    class Plugin:
        @pytest.hookimpl(tryfirst=True)
        def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> object:
            if config.getvalue("dist") != "loadgroup":
                return None
            return GroupScheduling(config, log)

    return Plugin()


def _database(url: str) -> str:
    database = sa.make_url(url).database
    if not database:
        raise pytest.UsageError(f"xdist: the URL {url!r} names no database to make others beside")
    return database
