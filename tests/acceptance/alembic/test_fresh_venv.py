"""The template's env.py in a virtualenv holding only ``sa-inbox[alembic]``, as users get it.

SQLAlchemy 2.1 no longer installs greenlet, which :mod:`sqlalchemy.ext.asyncio` needs: an
env.py importing it at the top failed every ``alembic`` command of a sync project. The test
virtualenv has greenlet (for the async template tests), so this one builds its own:
``python -m venv``, ``pip install <copy of the sources>[alembic]`` (SQLite's driver is
Python's own ``sqlite3``), then ``sa-inbox alembic init``, ``sa-inbox alembic revision
--store`` and ``alembic upgrade head`` as subprocesses, and reads the tables they made from
the SQLite file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
REVISION = "f1e5c0ffee01"


def _run(args: list[str | Path], cwd: Path, timeout: float = 180) -> str:
    """Run ``args`` outside the test virtualenv's environment; fail with its output."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _sources(target: Path) -> Path:
    """The package's sources only, so that a stale ``build/`` in the checkout (setuptools
    copies into it) can never stand in for the template under test."""
    target.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, target / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "sa_inbox", target / "sa_inbox", ignore=ignore)
    return target


def test_sync_project_migrates_without_greenlet(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], tmp_path)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    source = _sources(tmp_path / "src")
    _run([python, "-m", "pip", "install", "--quiet", f"{source}[alembic]"], tmp_path, timeout=300)
    # What the user has: no greenlet, hence no sqlalchemy.ext.asyncio.
    probe = "import importlib.util as u; print(u.find_spec('greenlet') is None)"
    assert _run([python, "-c", probe], tmp_path).strip() == "True"

    project = tmp_path / "project"
    project.mkdir()
    database = project / "app.db"
    url = f"sqlite:///{database}"
    _run([bin_dir / "sa-inbox", "alembic", "init", "migrations"], project)
    _run([bin_dir / "sa-inbox", "alembic", "revision", "--store", "--rev-id", REVISION], project)
    _run([bin_dir / "alembic", "-x", f"url={url}", "upgrade", "head"], project)

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        assert set(sa.inspect(engine).get_table_names()) == {
            "alembic_version",
            "inbox_processed_messages",
            "inbox_store",
            "inbox_consumers",
        }
        with engine.connect() as conn:
            versions = conn.execute(sa.text("SELECT version_num FROM alembic_version")).all()
        assert [tuple(row) for row in versions] == [(REVISION,)]
    finally:
        engine.dispose()
