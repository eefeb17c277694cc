"""A PostgreSQL primary and its streaming standby, started by ``scripts/servers.sh start DIR
pg-sync`` (or ``pg-async``) in a directory of their own, failed over by its
``pg-freeze-primary``, ``pg-kill-primary`` and ``pg-promote`` commands.

:func:`replicated_servers` starts them and stops them at the end; without PostgreSQL 15
installed it skips the test locally and fails it in CI (as the other live servers do).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import _in_ci
from tests.support.servers import COMMAND_TIMEOUT, SERVERS_SH, own_servers

__all__ = [
    "PG_BIN",
    "ReplicatedServers",
    "delete_queue",
    "process_alive",
    "replicated_servers",
]

PG_BIN = Path("/usr/lib/postgresql/15/bin")


@dataclass(frozen=True)
class ReplicatedServers:
    """A running primary + standby pair (a :class:`benchmarks.failover.Cluster`).

    :param directory: the servers' directory.
    :param env: the variables servers.sh exported for it (``SA_INBOX_TEST_PG_*``).
    """

    directory: Path
    env: dict[str, str]

    @property
    def mode(self) -> str:
        """``sync`` or ``async``."""
        return self.env["SA_INBOX_TEST_PG_REPLICATION"]

    @property
    def primary_url(self) -> str:
        return self.env["SA_INBOX_TEST_PG_PRIMARY_URL"]

    @property
    def standby_url(self) -> str:
        return self.env["SA_INBOX_TEST_PG_STANDBY_URL"]

    @property
    def failover_url(self) -> str:
        """Both servers, libpq keeping the writable one."""
        return self.env["SA_INBOX_TEST_PG_FAILOVER_URL"]

    def run(self, command: str) -> None:
        """``servers.sh COMMAND DIR``; raises if it fails."""
        subprocess.run(
            [str(SERVERS_SH), command, str(self.directory)],
            check=True,
            timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )

    def freeze(self) -> None:
        self.run("pg-freeze-primary")

    def kill(self) -> None:
        self.run("pg-kill-primary")

    def promote(self) -> None:
        self.run("pg-promote")

    def postmaster_pids(self) -> list[int]:
        """The pids in the primary's and standby's ``postmaster.pid`` files (where one is)."""
        pids = []
        for role in ("primary", "standby"):
            path = self.directory / "pgha" / role / "postmaster.pid"
            if path.exists():
                pids.append(int(path.read_text().split()[0]))
        return pids


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@contextmanager
def replicated_servers(mode: str) -> Iterator[ReplicatedServers]:
    """Start a ``pg-sync`` or ``pg-async`` pair (``mode``: ``sync`` / ``async``) in a new
    directory of their own (:func:`tests.support.servers.own_servers`), yield it, stop it
    and remove the directory."""
    if not (PG_BIN / "pg_basebackup").exists():
        message = f"no PostgreSQL 15 in {PG_BIN}: run scripts/servers.sh install postgresql"
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message)
    with own_servers(f"pg-{mode}") as servers:
        yield ReplicatedServers(servers.directory, servers.env)


def delete_queue(amqp_url: str, name: str) -> None:
    """Delete RabbitMQ queue ``name`` and its dead-letter queue."""
    import pika

    from sa_inbox.brokers.rabbitmq import dead_letter_queue_name

    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        channel.queue_delete(name)
        channel.queue_delete(dead_letter_queue_name(name))
    finally:
        connection.close()
