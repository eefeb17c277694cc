"""Offline mode (``alembic upgrade head --sql``) through the sa_inbox template.

Golden files (``golden/<dialect>_{upgrade,downgrade}.sql``) pin the exact SQL for
PostgreSQL, MySQL/MariaDB, Oracle and SQLite; Oracle has no server here, so its golden file is
its proof. The PostgreSQL, MariaDB and SQLite scripts are also run on the real database,
after which the schema must be what the online upgrade makes (``alembic check`` clean).
Regenerate the golden files with ``SA_INBOX_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import io
import os
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from sa_inbox.alembic import write_inbox_revision
from tests.support.alembic.inspection import TABLE, assert_inbox_table
from tests.support.alembic.project import Project

GOLDEN = Path(__file__).parent / "golden"
REV = "5a1f0c0ffee5"
OFFLINE_URLS = {
    "postgresql": "postgresql+psycopg://",
    "mysql": "mysql+pymysql://",
    "oracle": "oracle+oracledb://",
    "sqlite": "sqlite://",
}


def _project(root: Path, url: str) -> Project:
    project = Project(root, url)
    project.init()
    project.write_models("")  # the application's MetaData, empty: env.py adds the inbox
    write_inbox_revision(project.config(), "add inbox", rev_id=REV)
    return project


def _offline_sql(project: Project, url: str, *, downgrade: bool = False) -> str:
    buffer = io.StringIO()
    config = project.config(output_buffer=buffer)
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if downgrade:
        command.downgrade(config, f"{REV}:base", sql=True)
    else:
        command.upgrade(config, "head", sql=True)
    return buffer.getvalue()


def _check_golden(texts: dict[str, str]) -> None:
    if os.environ.get("SA_INBOX_UPDATE_GOLDEN"):
        for name, text in texts.items():
            (GOLDEN / name).write_text(text)
        pytest.fail(f"golden files {sorted(texts)} rewritten: review the diff, rerun without it")
    for name, text in texts.items():
        assert text == (GOLDEN / name).read_text(), f"offline SQL differs from golden/{name}"


@pytest.mark.parametrize("dialect", list(OFFLINE_URLS))
def test_offline_sql_matches_golden_file(tmp_path: Path, dialect: str) -> None:
    project = _project(tmp_path / "project", "sqlite://")
    upgrade = _offline_sql(project, OFFLINE_URLS[dialect])
    downgrade = _offline_sql(project, OFFLINE_URLS[dialect], downgrade=True)
    assert f"CREATE TABLE {TABLE}" in upgrade
    assert "CREATE TABLE inbox_consumers" in upgrade
    assert f"DROP TABLE {TABLE}" in downgrade
    assert "DROP TABLE inbox_consumers" in downgrade
    _check_golden({f"{dialect}_upgrade.sql": upgrade, f"{dialect}_downgrade.sql": downgrade})


def test_oracle_golden_has_the_oracle_types() -> None:
    """What Oracle needs, stated outright (the golden file could be regenerated wrongly)."""
    text = (GOLDEN / "oracle_upgrade.sql").read_text()
    assert "message_id VARCHAR2(255 CHAR) NOT NULL" in text
    assert "received_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP NOT NULL" in text
    assert "payload_hash BLOB" in text
    assert "CONSTRAINT pk_inbox_processed_messages PRIMARY KEY (message_id, consumer_name)" in text
    assert "CREATE INDEX ix_inbox_processed_messages_received_at" in text
    assert "CONSTRAINT pk_inbox_consumers PRIMARY KEY (inbox_table, consumer_name)" in text
    assert "\n/\n" in text  # SQL*Plus statement separator


def _run_script(url: str, script: str) -> None:
    if url.startswith("sqlite"):
        connection = sqlite3.connect(sa.make_url(url).database or ":memory:")
        try:
            connection.executescript(script)
        finally:
            connection.close()
        return
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            for statement in script.split(";\n"):
                lines = [line for line in statement.splitlines() if not line.startswith("--")]
                if "\n".join(lines).strip():
                    conn.exec_driver_sql("\n".join(lines))
    finally:
        engine.dispose()


@pytest.mark.backend
def test_offline_script_run_on_the_server_gives_the_online_schema(
    tmp_path: Path, database_url: str
) -> None:
    project = _project(tmp_path / "project", database_url)
    _run_script(database_url, _offline_sql(project, database_url))
    engine = project.engine()
    try:
        assert_inbox_table(engine)
    finally:
        engine.dispose()
    assert project.version() == [REV]
    command.check(project.config())  # the schema the script made is the one the MetaData says
    _run_script(database_url, _offline_sql(project, database_url, downgrade=True))
    assert project.table_names() == {"alembic_version"}
    assert project.version() == []
