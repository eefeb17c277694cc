"""The ``sa-inbox`` command line: a :mod:`click` group, one sub-command per task.

=======================  ===============================================================
module                   commands
=======================  ===============================================================
:mod:`._common`          no command: the exit codes, :class:`~._common.CannotRun`, and
                         opening a command's ``--url``
:mod:`.demo`             ``demo``
:mod:`.worker`           ``worker``
:mod:`.store`            ``store counts``, ``store replay``
:mod:`.stats`            ``stats`` (the report and ``--check``)
:mod:`.retention`        ``purge``, ``partitions maintain``, ``partitions list``
:mod:`.alembic`          ``alembic init``, ``alembic revision``
:mod:`.bench`            ``bench``
:mod:`.chaos`            ``chaos``
:mod:`.relay`            ``relay``
:mod:`.outbox`           ``outbox counts``, ``outbox replay``
:mod:`.dead_letters`     ``dead-letters count``, ``dead-letters list``, ``dead-letters replay``
=======================  ===============================================================

Sub-commands stay thin: they parse options and call the library (``demo`` calls
:func:`sa_inbox.demo.run_demo`), importing it only when they run, so that
``sa-inbox --help`` stays fast.

Exit codes (:mod:`._common`): 0 success; 1 the run finished but its verification failed;
2 usage error (or an extra the command needs is not installed); 3 the command could not run
(database unreachable, a worker died; a broker unreachable); 9-21 ``stats --check`` warnings
(:data:`sa_inbox.stats.WARNING_CODES`); 130 interrupted.
"""

from __future__ import annotations

import click

from ._common import Group
from .alembic import alembic_group
from .bench import bench
from .chaos import chaos
from .console import console_command
from .dead_letters import dead_letters_group
from .demo import demo
from .outbox import outbox_group
from .relay import relay_command
from .retention import partitions_group, purge_command
from .stats import stats_command
from .store import store_group
from .worker import worker_command

__all__ = ["main"]


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sa-inbox")
def main() -> None:
    """sa-inbox: exactly-once message processing for SQLAlchemy (the inbox pattern)."""


main.add_command(demo)
main.add_command(alembic_group)
main.add_command(purge_command)
main.add_command(partitions_group)
main.add_command(worker_command)
main.add_command(store_group)
main.add_command(stats_command)
main.add_command(bench)
main.add_command(chaos)
main.add_command(relay_command)
main.add_command(outbox_group)
main.add_command(dead_letters_group)
main.add_command(console_command)
