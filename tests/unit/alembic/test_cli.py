"""``sa-inbox alembic init`` / ``revision``: what they write, and bad input that writes nothing."""

from __future__ import annotations

from pathlib import Path

import alembic.config
import pytest
from alembic import command
from click.testing import CliRunner

from sa_inbox.cli import main
from tests.support.alembic.project import Project


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def test_init_writes_the_sa_inbox_environment(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["alembic", "init", "migrations"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "migrations").iterdir()) == [
        "README",
        "env.py",
        "script.py.mako",
        "versions",
    ]
    env = (tmp_path / "migrations" / "env.py").read_text()
    assert "sa_inbox.alembic.target_metadata(config)" in env
    ini = (tmp_path / "alembic.ini").read_text()
    assert "script_location = %(here)s/migrations" in ini
    assert "[sa_inbox]\n" in ini and "message_id_length = 255" in ini


def test_init_into_a_non_empty_directory_fails_and_writes_nothing(
    runner: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "migrations").mkdir()
    (tmp_path / "migrations" / "keep.txt").write_text("mine")
    result = runner.invoke(main, ["alembic", "init", "migrations"])
    assert result.exit_code == 3
    assert "already exists and is not empty" in result.output
    assert [p.name for p in (tmp_path / "migrations").iterdir()] == ["keep.txt"]
    assert not (tmp_path / "alembic.ini").exists()


def _plain_project(tmp_path: Path) -> Project:
    project = Project(tmp_path, f"sqlite:///{tmp_path}/app.db")
    command.init(alembic.config.Config(str(project.ini)), str(project.migrations))
    return project


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--message-id-length", "0"], "0 is not in the range x>=1"),
        (["--message-id-length", "x"], "'x' is not a valid integer"),
        (["--table-name", ""], "table_name must be a non-empty str"),
        (["--schema", ""], "schema must be None or a non-empty str"),
        (["-c", "missing.ini"], "no Alembic config file 'missing.ini'"),
    ],
)
def test_revision_bad_input_is_a_usage_error_and_writes_nothing(
    runner: CliRunner, tmp_path: Path, arguments: list[str], message: str
) -> None:
    project = _plain_project(tmp_path)
    result = runner.invoke(main, ["alembic", "revision", *arguments])
    assert result.exit_code == 2
    assert message in result.output
    assert project.revision_files() == []


def test_revision_with_two_heads_needs_head(runner: CliRunner, tmp_path: Path) -> None:
    project = _plain_project(tmp_path)
    config = project.config()
    command.revision(config, "a", rev_id="aaaa")
    command.revision(config, "b", rev_id="bbbb", head="base", splice=True)
    result = runner.invoke(main, ["alembic", "revision", "-m", "add inbox"])
    assert result.exit_code == 3
    assert "Multiple heads" in result.output
    assert len(project.revision_files()) == 2
    result = runner.invoke(main, ["alembic", "revision", "--head", "bbbb", "--rev-id", "cccc"])
    assert result.exit_code == 0, result.output
    (written,) = [p for p in project.revision_files() if p.name.startswith("cccc")]
    text = written.read_text()
    assert "down_revision: Union[str, Sequence[str], None] = 'bbbb'" in text
    assert "op.create_inbox_table('inbox_processed_messages', message_id_length=255)" in text


def test_revision_options_reach_the_operation(runner: CliRunner, tmp_path: Path) -> None:
    project = _plain_project(tmp_path)
    result = runner.invoke(
        main,
        [
            "alembic",
            "revision",
            "--table-name",
            "billing_inbox",
            "--schema",
            "audit",
            "--message-id-length",
            "64",
        ],
    )
    assert result.exit_code == 0, result.output
    (written,) = project.revision_files()
    text = written.read_text()
    assert "op.create_inbox_table('billing_inbox', schema='audit', message_id_length=64)" in text
    assert "op.drop_inbox_table('billing_inbox', schema='audit', message_id_length=64)" in text
