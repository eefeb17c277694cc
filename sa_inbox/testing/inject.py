"""Start a consumer process with a fault installed: ``python -m sa_inbox.testing.inject``.

::

    python -m sa_inbox.testing.inject --crash-after-commit -m myapp.consumer --queue payments
    python -m sa_inbox.testing.inject --stall-before-commit 45 path/to/consumer.py

The fault (:func:`~sa_inbox.testing.faults.crash_after_commit`,
:func:`~sa_inbox.testing.faults.stall_before_commit`) is installed in this process, then the
consumer runs as ``python -m MODULE ARGS`` (or ``python SCRIPT ARGS``) would run it, as
``__main__`` with its own ``sys.argv``: an integration test starts it with
:mod:`subprocess`, as production starts the consumer, and sees it die or stall at the point
the fault names.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from collections.abc import Sequence

from .faults import crash_after_commit, stall_before_commit

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sa_inbox.testing.inject",
        description="Run a consumer with a fault of the inbox pattern's failure cases.",
    )
    parser.add_argument(
        "--crash-after-commit",
        type=int,
        nargs="?",
        const=1,
        metavar="N",
        help="SIGKILL the process right after its N-th commit that changes rows (default 1)",
    )
    parser.add_argument(
        "--stall-before-commit",
        type=float,
        metavar="SECONDS",
        help="hold the next commit that changes rows SECONDS before it reaches the database",
    )
    parser.add_argument("-m", dest="module", help="the consumer's module, run as __main__")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="[SCRIPT] ARGS...")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Install the faults asked for, then run the consumer."""
    parser = _parser()
    options = parser.parse_args(argv)
    if options.module is None and not options.target:
        parser.error("give the consumer: -m MODULE [ARGS] or SCRIPT [ARGS]")
    if options.crash_after_commit is not None:
        crash_after_commit(options.crash_after_commit)
    if options.stall_before_commit is not None:
        stall_before_commit(options.stall_before_commit)
    if options.module is not None:
        sys.argv = [options.module, *options.target]
        runpy.run_module(options.module, run_name="__main__", alter_sys=True)
    else:
        script, *arguments = options.target
        sys.argv = [script, *arguments]
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
