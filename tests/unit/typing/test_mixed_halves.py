"""mypy --strict rejects, in a user's file, the sync/async mix-ups sa-inbox refuses at run
time (``mixed_halves.py``: every line marked ``# mix`` and no other)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

FILE = Path(__file__).with_name("mixed_halves.py")


@pytest.mark.slow
def test_mypy_rejects_exactly_the_mixed_lines(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports",
         "silent", "--cache-dir", str(tmp_path), str(FILE)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    flagged = {
        int(m.group(1))
        for m in re.finditer(rf"^\S*{re.escape(FILE.name)}:(\d+): error", result.stdout, re.M)
    }
    lines = FILE.read_text().splitlines()
    marked = {n for n, line in enumerate(lines, 1) if line.rstrip().endswith("# mix")}
    assert marked, "the file marks no mix-up"
    assert flagged == marked, (
        f"unflagged mix-ups: {sorted(marked - flagged)}, flagged correct lines: "
        f"{sorted(flagged - marked)}\n{result.stdout}"
    )
