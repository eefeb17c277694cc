"""An existing application's Alembic history gains the inbox, through the real command line.

The app has a plain ``alembic init`` environment and a first revision with its business
table (with rows). ``sa-inbox alembic revision -m "add inbox"`` writes the next revision;
``alembic upgrade head`` adds the inbox and keeps the rows; ``alembic check`` is clean;
``alembic downgrade -1`` removes the inbox and only the inbox. All commands run as
subprocesses, as a user would run them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support.alembic.inspection import TABLE, assert_inbox_table, count_rows
from tests.support.alembic.project import Project

ACCOUNTS = (
    'accounts = sa.Table("accounts", metadata, '
    'sa.Column("id", sa.Integer, primary_key=True, autoincrement=False), '
    'sa.Column("balance", sa.Numeric(14, 2), nullable=False))\n'
)
PLUGINS = '["alembic.autogenerate.*", "sa_inbox.*"]'


def _existing_app(project: Project, *, plugin: bool = False) -> str:
    """A generic Alembic project whose first revision creates ``accounts``; its revision id."""
    project.run_ok("alembic", "init", "migrations")
    project.configure()
    env = project.migrations / "env.py"
    text = env.read_text().replace(
        "target_metadata = None",
        f"from {project.models_module} import metadata as target_metadata",
    )
    if plugin:
        text = text.replace(
            "connection=connection, target_metadata=target_metadata\n",
            f"connection=connection, target_metadata=target_metadata,\n"
            f"            autogenerate_plugins={PLUGINS},\n",
        )
        assert "autogenerate_plugins" in text
    env.write_text(text)
    project.write_models(ACCOUNTS)
    project.run_ok("alembic", "revision", "--autogenerate", "-m", "accounts")
    project.run_ok("alembic", "upgrade", "head")
    engine = project.engine()
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text("INSERT INTO accounts (id, balance) VALUES (1, 10), (2, 20), (3, 30)")
            )
    finally:
        engine.dispose()
    (first,) = project.version()
    return first


@pytest.mark.backend
def test_existing_history_gains_the_inbox_with_the_cli(project: Project) -> None:
    first = _existing_app(project)
    project.write_models(ACCOUNTS + "inbox = Inbox(metadata)\n")

    out = project.run_ok("sa-inbox", "alembic", "revision", "-m", "add inbox")
    path = Path(re.search(r"Generated (\S+)", out).group(1))  # type: ignore[union-attr]
    text = path.read_text()
    assert f"down_revision: Union[str, Sequence[str], None] = {first!r}" in text
    assert "import sa_inbox.alembic\n" in text
    assert "op.create_inbox_table('inbox_processed_messages', message_id_length=255)" in text
    assert "op.drop_inbox_table('inbox_processed_messages', message_id_length=255)" in text
    assert "op.create_inbox_consumers_table('inbox_consumers', consumer_name_length=255)" in text
    assert "op.drop_inbox_consumers_table('inbox_consumers', consumer_name_length=255)" in text

    project.run_ok("alembic", "upgrade", "head")
    engine = project.engine()
    try:
        assert_inbox_table(engine)
        assert count_rows(engine, "accounts") == 3
        models = project.import_models()
        with engine.begin() as conn:
            assert models.inbox.claim(conn, "m-1", "billing") is True
            assert models.inbox.claim(conn, "m-1", "billing") is False
        assert count_rows(engine, TABLE) == 1
    finally:
        engine.dispose()
    assert "No new upgrade operations detected" in project.run_ok("alembic", "check")

    project.run_ok("alembic", "downgrade", "-1")
    assert project.table_names() == {"alembic_version", "accounts"}
    assert project.version() == [first]
    engine = project.engine()
    try:
        assert count_rows(engine, "accounts") == 3
    finally:
        engine.dispose()


@pytest.mark.parametrize("plugin", [True, False], ids=["plugin", "no-plugin"])
def test_autogenerate_in_a_plain_env_with_the_alembic_plugin(tmp_path: Path, plugin: bool) -> None:
    """A plain env.py that never imports sa_inbox.alembic: the ``sa_inbox.autogenerate``
    plugin (entry point ``alembic.plugins``) renders the sa-inbox op; without it, Alembic's
    own ``create_table`` is rendered."""
    project = Project(tmp_path / "project", f"sqlite:///{tmp_path}/app.db")
    first = _existing_app(project, plugin=plugin)
    assert "import sa_inbox" not in (project.migrations / "env.py").read_text()
    project.write_models(ACCOUNTS + "inbox = Inbox(metadata)\n")
    project.run_ok("alembic", "revision", "--autogenerate", "-m", "add inbox")
    (path,) = [p for p in project.revision_files() if first not in p.name]
    text = path.read_text()
    if not plugin:
        assert "op.create_inbox_table(" not in text
        assert "op.create_table('inbox_processed_messages'" in text
        return
    assert "import sa_inbox.alembic\n" in text
    assert "op.create_inbox_table('inbox_processed_messages', message_id_length=255)" in text
    assert "op.create_table(" not in text and "op.create_index(" not in text
    project.run_ok("alembic", "upgrade", "head")
    engine = project.engine()
    try:
        assert_inbox_table(engine)
    finally:
        engine.dispose()
    assert "No new upgrade operations detected" in project.run_ok("alembic", "check")
    project.run_ok("alembic", "downgrade", "-1")
    assert project.table_names() == {"alembic_version", "accounts"}
