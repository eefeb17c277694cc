"""The models' table is the one source of its settings, through the real command line.

A project made by ``sa-inbox alembic init``, models with ``Inbox(metadata,
table_name="order_inbox", message_id_length=64)``: autogenerate migrates that table; a
``[sa_inbox] table_name`` / ``message_id_length`` in alembic.ini that disagrees stops
``alembic`` with the conflict named, and writes no revision.
"""

from __future__ import annotations

import pytest

from tests.support.alembic.project import Project

MODELS = 'inbox = Inbox(metadata, table_name="order_inbox", message_id_length=64)\n'


@pytest.mark.backend
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_models_table_is_migrated_and_a_disagreeing_ini_stops_alembic(
    project: Project,
) -> None:
    project.run_ok("sa-inbox", "alembic", "init", "migrations")
    project.configure()
    project.write_models(MODELS)
    project.set_options(table_name="inbox_processed_messages", message_id_length="255")

    failed = project.run("alembic", "revision", "--autogenerate", "-m", "inbox")
    assert failed.returncode != 0
    assert "InboxSettingsConflict: [sa_inbox] table_name = inbox_processed_messages, " in (
        failed.stderr
    )
    assert "table_name = order_inbox, schema = (none), message_id_length = 64" in failed.stderr
    assert project.revision_files() == []

    project.set_options(table_name="", message_id_length="")  # unset: the models decide
    project.run_ok("alembic", "revision", "--autogenerate", "-m", "inbox")
    (revision,) = project.revision_files()
    assert "op.create_inbox_table('order_inbox', message_id_length=64)" in revision.read_text()
    assert "inbox_processed_messages" not in revision.read_text()
