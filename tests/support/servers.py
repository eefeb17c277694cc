"""Servers of a test's own, started by ``scripts/servers.sh start DIR NAME...`` in a new
directory and stopped after: for the tests that kill, freeze or fail over a server (never
one the rest of the suite uses, which may run beside them on other xdist workers) and for a
second server of a kind.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import _in_ci

__all__ = ["SERVERS_SH", "OwnServers", "own_servers", "servers_sh"]

SERVERS_SH = Path(__file__).resolve().parents[2] / "scripts" / "servers.sh"
#: Seconds one servers.sh command may take (a Galera or RabbitMQ start takes the longest).
COMMAND_TIMEOUT = 180


@dataclass(frozen=True)
class OwnServers:
    """Servers that ``servers.sh start`` started in ``directory``.

    :param env: the variables its ``env.sh`` exports (``SA_INBOX_TEST_*_URL``, ...).
    """

    directory: Path
    env: dict[str, str]


def servers_sh(
    *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``scripts/servers.sh ARGS``, its output captured; never raises for its exit code.

    :param env: variables added to its environment (``SA_INBOX_RABBITMQ_CONSUMER_TIMEOUT``).
    """
    return subprocess.run(
        [str(SERVERS_SH), *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def read_env(path: Path) -> dict[str, str]:
    """The ``export NAME='value'`` lines of an ``env.sh``."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = shlex.split(value)[0]
    return env


@contextmanager
def own_servers(*names: str, env: Mapping[str, str] | None = None) -> Iterator[OwnServers]:
    """Start servers ``names`` (``postgresql``, ``mysql``, ``redis``, ``pg-sync``, ...) in a
    new directory under the system's temp directory (the postgres user must traverse it: a
    pytest ``tmp_path`` is closed to it), yield them, then stop them and remove the
    directory. If they cannot start: the test fails in CI, and is skipped locally, with
    servers.sh's last lines. ``env`` is added to ``servers.sh start``'s environment."""
    directory = Path(tempfile.mkdtemp(prefix="sa-inbox-own-"))
    try:
        started = servers_sh("start", str(directory), *names, env=env)
        if started.returncode != 0:
            what = " ".join(names)
            message = f"scripts/servers.sh could not start {what}: {started.stderr[-2000:]}"
            if _in_ci():
                pytest.fail(message)
            pytest.skip(message)
        yield OwnServers(directory, read_env(directory / "env.sh"))
    finally:
        servers_sh("stop", str(directory))
        shutil.rmtree(directory, ignore_errors=True)
