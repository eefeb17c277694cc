"""The live 3-node MariaDB Galera cluster of ``scripts/servers.sh galera``, for the tests.

Each node gets two engines: a plain one, as a user would make it (the runner and worker under
test use it), and a *checking* one whose sessions set ``wsrep_sync_wait = 1``, so that the
business state the tests assert on is read after every write-set the cluster committed before
the read (MariaDB KB, "wsrep_sync_wait": the node waits for the write-sets it has received to
be applied before a read). Node numbers are 1-based, as for ``servers.sh galera-kill DIR N``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import sqlalchemy as sa

from tests.support.app import App

__all__ = ["SERVERS_SH", "GaleraCluster", "causal_engine"]

SERVERS_SH = Path(__file__).resolve().parents[2] / "scripts" / "servers.sh"


def causal_engine(url: str, **kw: object) -> sa.Engine:
    """An engine whose connections read causally (``SET SESSION wsrep_sync_wait = 1``)."""
    return sa.create_engine(
        url, connect_args={"init_command": "SET SESSION wsrep_sync_wait = 1"}, **kw
    )


class GaleraCluster:
    """The three nodes: ``apps[i]`` (plain engines) and ``checks[i]`` (causal reads) for
    node ``i + 1``, all on the same tables.

    :param urls: the nodes' URLs (``SA_INBOX_TEST_GALERA_URLS``).
    :param directory: the directory ``servers.sh`` started the cluster in, or None (then
        :meth:`kill` and :meth:`restart` cannot be used).
    """

    def __init__(self, urls: list[str], directory: str | None = None) -> None:
        self.urls = urls
        self.directory = directory
        self.apps = [App(sa.create_engine(url, pool_size=10, max_overflow=10)) for url in urls]
        self.checks = [App(causal_engine(url)) for url in urls]

    def reset(self, accounts: int = 3) -> None:
        """Fresh tables, made through node 1 (DDL is replicated to every node, in total
        order, before it returns: MariaDB KB, "Schema Upgrades", Total Order Isolation)."""
        self.apps[0].reset(accounts)

    def dispose(self) -> None:
        for app in (*self.apps, *self.checks):
            app.engine.dispose()

    def drop(self) -> None:
        self.apps[0].drop()
        self.dispose()

    def states(self) -> list[tuple[int, int, Decimal, int]]:
        """Per node, read causally: ``(ledger rows, distinct message ids in the ledger, sum
        of the balances, inbox rows)``."""
        result = []
        for app in self.checks:
            with app.engine.connect() as conn:
                ledger = app.ledger
                rows, ids = conn.execute(
                    sa.select(sa.func.count(), sa.func.count(sa.distinct(ledger.c.message_id)))
                ).one()
                total = conn.execute(sa.select(sa.func.sum(app.accounts.c.balance))).scalar_one()
                inbox = conn.execute(
                    sa.select(sa.func.count()).select_from(app.inbox.table)
                ).scalar_one()
            result.append((int(rows), int(ids), Decimal(total or 0), int(inbox)))
        return result

    def kill(self, node: int) -> None:
        """SIGKILL node ``node`` (1-3) through ``servers.sh galera-kill``."""
        self._servers("galera-kill", node)

    def restart(self, node: int) -> str:
        """Restart killed node ``node``; returns when it is Synced again, with how it
        rejoined: ``"IST"`` (the write-sets it missed) or ``"SST"`` (a full copy)."""
        output = self._servers("galera-restart", node)
        return "IST" if "rejoined by IST" in output else "SST"

    @contextmanager
    def killed(self, node: int) -> Iterator[None]:
        """Node ``node`` killed inside the block, restarted after it (even on failure)."""
        self.kill(node)
        try:
            yield
        finally:
            self.restart(node)

    def _servers(self, command: str, node: int) -> str:
        """Runs ``servers.sh COMMAND DIR NODE``; its log (stderr) is passed on and
        returned."""
        assert self.directory is not None, "no SA_INBOX_TEST_GALERA_DIR"
        done = subprocess.run(
            [str(SERVERS_SH), command, self.directory, str(node)],
            stderr=subprocess.PIPE,
            text=True,
        )
        sys.stderr.write(done.stderr)
        done.check_returncode()
        return done.stderr
