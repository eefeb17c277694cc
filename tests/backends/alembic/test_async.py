"""The sa_inbox template's env.py with an async driver URL runs through an AsyncEngine."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from tests.support.alembic.inspection import assert_inbox_table
from tests.support.alembic.project import Project

pytestmark = pytest.mark.backend

ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+psycopg_async"}


@pytest.mark.parametrize("database_url", list(ASYNC_DRIVERS), indirect=True)
def test_round_trip_on_an_async_engine(tmp_path: Path, database_url: str) -> None:
    sync_url = sa.make_url(database_url)
    async_url = sync_url.set(drivername=ASYNC_DRIVERS[sync_url.get_backend_name()])
    assert async_url.get_dialect().is_async
    project = Project(tmp_path / "project", async_url.render_as_string(hide_password=False))
    project.init()
    project.write_models("inbox = Inbox(metadata)\n")
    command.revision(project.config(), "add inbox", autogenerate=True)
    (path,) = project.revision_files()
    assert "op.create_inbox_table('inbox_processed_messages', message_id_length=255)" in (
        path.read_text()
    )
    command.upgrade(project.config(), "head")
    engine = sa.create_engine(sync_url, poolclass=sa.pool.NullPool)
    try:
        assert_inbox_table(engine)
        command.check(project.config())
        command.downgrade(project.config(), "base")
        assert set(sa.inspect(engine).get_table_names()) == {"alembic_version"}
    finally:
        engine.dispose()
