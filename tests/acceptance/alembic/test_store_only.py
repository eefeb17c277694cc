"""Tables added to a history that already has the others, through the real command line:
``sa-inbox alembic revision --store-only`` creates only the store, ``--consumers-only`` only
the consumers table (a history whose inbox tables were created without it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sa_inbox.consumers import handler_name
from tests.support.alembic.inspection import assert_inbox_table
from tests.support.alembic.project import Project

#: What ``sa-inbox alembic revision`` creates by default.
INBOX_TABLES = ("inbox_processed_messages", "inbox_consumers")


def _create_order(session: object) -> None:
    """A handler to own a consumer name."""


def _generated(out: str) -> str:
    return Path(re.search(r"Generated (\S+)", out).group(1)).read_text()  # type: ignore[union-attr]


@pytest.mark.backend
def test_store_only_adds_the_store_to_a_history_with_the_inbox(project: Project) -> None:
    project.init()
    project.write_models("inbox = Inbox(metadata)\n")
    first = _generated(project.run_ok("sa-inbox", "alembic", "revision", "-m", "add inbox"))
    assert "op.create_inbox_table('inbox_processed_messages'" in first
    assert "op.create_inbox_consumers_table('inbox_consumers'" in first
    project.run_ok("alembic", "upgrade", "head")
    (inbox_revision,) = project.version()

    second = _generated(
        project.run_ok("sa-inbox", "alembic", "revision", "-m", "add store", "--store-only")
    )
    assert "op.create_inbox_store_table('inbox_store'" in second
    assert "create_inbox_table(" not in second and "drop_inbox_table(" not in second
    assert "inbox_consumers_table(" not in second
    project.run_ok("alembic", "upgrade", "head")
    assert project.table_names() == {"alembic_version", *INBOX_TABLES, "inbox_store"}
    engine = project.engine()
    try:
        assert_inbox_table(engine)
    finally:
        engine.dispose()

    project.run_ok("alembic", "downgrade", "-1")
    assert project.table_names() == {"alembic_version", *INBOX_TABLES}
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
    assert project.table_names() == {"alembic_version", *INBOX_TABLES}


@pytest.mark.backend
def test_consumers_only_adds_the_consumers_table_to_a_history_without_it(
    project: Project,
) -> None:
    """A history whose inbox was created without the consumers table (--no-consumers, or an
    earlier release): --consumers-only adds it, and a handler then owns its name."""
    project.init()
    project.write_models("inbox = Inbox(metadata)\n")
    first = _generated(
        project.run_ok("sa-inbox", "alembic", "revision", "-m", "add inbox", "--no-consumers")
    )
    assert "inbox_consumers_table(" not in first
    project.run_ok("alembic", "upgrade", "head")
    (inbox_revision,) = project.version()
    assert project.table_names() == {"alembic_version", "inbox_processed_messages"}

    second = _generated(
        project.run_ok("sa-inbox", "alembic", "revision", "-m", "owners", "--consumers-only")
    )
    options = "'inbox_consumers', consumer_name_length=255"
    assert f"op.create_inbox_consumers_table({options})" in second
    assert f"op.drop_inbox_consumers_table({options})" in second
    assert "create_inbox_table(" not in second and "create_inbox_store_table(" not in second
    project.run_ok("alembic", "upgrade", "head")
    assert project.table_names() == {"alembic_version", *INBOX_TABLES}
    assert "No new upgrade operations detected" in project.run_ok("alembic", "check")
    engine = project.engine()
    try:
        models = project.import_models()
        models.inbox.consumers.ensure(engine, "billing", _create_order)
        assert models.inbox.consumers.owner(engine, "billing") == handler_name(_create_order)
    finally:
        engine.dispose()

    project.run_ok("alembic", "downgrade", "-1")
    assert project.table_names() == {"alembic_version", "inbox_processed_messages"}
    assert project.version() == [inbox_revision]
