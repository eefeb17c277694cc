"""Running ``sa-inbox`` as a user does: ``python -m sa_inbox.cli ARGS`` in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ROOT", "run_cli", "run_hiding"]

#: The repository's root: the child's working directory and first import path.
ROOT = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str,
    cwd: Path = ROOT,
    timeout: float = 120,
    path: Sequence[Path] = (),
    traceback: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``sa-inbox ARGS`` to its end; its exit code, stdout and stderr.

    :param cwd: the child's working directory.
    :param timeout: seconds before :class:`subprocess.TimeoutExpired`.
    :param path: folders put before the repository on the child's ``PYTHONPATH`` (a stand-in
        module that hides an installed one).
    :param traceback: whether stderr may hold a Python traceback (a run whose consumer
        processes print their own); by default one fails the test.
    """
    completed = subprocess.run(
        [sys.executable, "-m", "sa_inbox.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [*path, ROOT]))},
    )
    if not traceback:
        assert "Traceback" not in completed.stderr, completed.stderr
    return completed


def run_hiding(
    hidden: set[str], code: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` with the modules ``hidden`` made unimportable (the finder of
    scripts/import_matrix.py), from the repository root."""
    prelude = (
        "import runpy, sys\n"
        f"matrix = runpy.run_path({str(ROOT / 'scripts' / 'import_matrix.py')!r})\n"
        f"sys.meta_path.insert(0, matrix['Hidden']({set(hidden)!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )
