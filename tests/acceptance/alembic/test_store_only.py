"""The inbox store added to a history that already has the processed-messages table, through
the real command line: ``sa-inbox alembic revision --store-only`` creates only the store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.alembic.inspection import assert_inbox_table
from tests.support.alembic.project import Project


def _generated(out: str) -> str:
    return Path(re.search(r"Generated (\S+)", out).group(1)).read_text()  # type: ignore[union-attr]


@pytest.mark.backend
def test_store_only_adds_the_store_to_a_history_with_the_inbox(project: Project) -> None:
    project.init()
    project.write_models("inbox = Inbox(metadata)\n")
    first = _generated(project.run_ok("sa-inbox", "alembic", "revision", "-m", "add inbox"))
    assert "op.create_inbox_table('inbox_processed_messages'" in first
    project.run_ok("alembic", "upgrade", "head")
    (inbox_revision,) = project.version()

    second = _generated(
        project.run_ok("sa-inbox", "alembic", "revision", "-m", "add store", "--store-only")
    )
    assert "op.create_inbox_store_table('inbox_store'" in second
    assert "create_inbox_table(" not in second and "drop_inbox_table(" not in second
    project.run_ok("alembic", "upgrade", "head")
    assert project.table_names() == {"alembic_version", "inbox_processed_messages", "inbox_store"}
    engine = project.engine()
    try:
        assert_inbox_table(engine)
    finally:
        engine.dispose()

    project.run_ok("alembic", "downgrade", "-1")
    assert project.table_names() == {"alembic_version", "inbox_processed_messages"}
    assert project.version() == [inbox_revision]


@pytest.mark.backend
def test_store_after_the_inbox_creates_it_twice_and_the_upgrade_fails(project: Project) -> None:
    """Why --store-only exists: --store is for a history without the inbox yet."""
    project.init()
    project.write_models("inbox = Inbox(metadata)\n")
    project.run_ok("sa-inbox", "alembic", "revision", "-m", "add inbox")
    project.run_ok("alembic", "upgrade", "head")
    project.run_ok("sa-inbox", "alembic", "revision", "-m", "add store", "--store")
    failed = project.run("alembic", "upgrade", "head")
    assert failed.returncode != 0
    assert project.table_names() == {"alembic_version", "inbox_processed_messages"}
