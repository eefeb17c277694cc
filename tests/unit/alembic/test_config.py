"""``[sa_inbox]`` in alembic.ini: which tables env.py's target MetaData gets; bad settings.

The models' table is the one source of its settings: an ini option that disagrees with it
is refused (:class:`~sa_inbox.exc.InboxSettingsConflict`), one that agrees is harmless.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import alembic.config
import pytest
from click.testing import CliRunner

from sa_inbox import ConfigurationError, InboxError
from sa_inbox.alembic import target_metadata
from sa_inbox.alembic.tables import marker
from sa_inbox.cli import main
from sa_inbox.exc import AlembicSetupError, InboxSettingsConflict


def _config(tmp_path: Path, section: str) -> alembic.config.Config:
    ini = tmp_path / "alembic.ini"
    ini.write_text(f"[alembic]\nscript_location = migrations\n\n[sa_inbox]\n{section}\n")
    return alembic.config.Config(str(ini))


def _kinds(config: alembic.config.Config) -> dict[str, str]:
    metadata = target_metadata(config)
    found = {name: marker(table.info) for name, table in metadata.tables.items()}
    return {name: mark[0].name for name, mark in found.items() if mark is not None}


def test_default_is_the_processed_messages_table(tmp_path: Path) -> None:
    """With the consumers table its Inbox claims through."""
    assert _kinds(_config(tmp_path, "")) == {
        "inbox_processed_messages": "processed_messages",
        "inbox_consumers": "consumers",
    }


def test_empty_tables_adds_none(tmp_path: Path) -> None:
    assert _kinds(_config(tmp_path, "tables =")) == {}


def test_store_and_names_and_schema(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        "tables = processed_messages, store\ntable_name = seen\nstore_table_name = queue\n"
        "schema = audit\nmessage_id_length = 64",
    )
    metadata = target_metadata(config)
    assert _kinds(config) == {
        "audit.seen": "processed_messages",
        "audit.queue": "store",
        "audit.inbox_consumers": "consumers",
    }
    assert metadata.tables["audit.queue"].c.message_id.type.length == 64  # type: ignore[attr-defined]
    # the shared consumers table holds at least the default 255 characters
    consumers = metadata.tables["audit.inbox_consumers"]
    assert consumers.c.consumer_name.type.length == 255  # type: ignore[attr-defined]


def test_application_metadata_keeps_its_own_inbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An application that already has Inbox(metadata) under another name gets no second one."""
    (tmp_path / "cfg_app_models.py").write_text(
        "import sqlalchemy as sa\nfrom sa_inbox import Inbox\n"
        "metadata = sa.MetaData()\nInbox(metadata, table_name='my_inbox')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = _config(tmp_path, "target_metadata = cfg_app_models:metadata")
    assert _kinds(config) == {"my_inbox": "processed_messages", "inbox_consumers": "consumers"}


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("tables = outbox", "unknown ['outbox']"),
        ("message_id_length = many", "message_id_length must be an integer"),
        ("target_metadata = no_such_module_xyz:metadata", "No module named 'no_such_module_xyz'"),
        ("target_metadata = just_a_name", "must be 'module:attribute'"),
        ("target_metadata = sa_inbox:Inbox", "is a type, not a MetaData"),
    ],
)
def test_bad_settings_raise_a_typed_error(tmp_path: Path, section: str, message: str) -> None:
    with pytest.raises(AlembicSetupError, match=re.escape(message)) as info:
        target_metadata(_config(tmp_path, section))
    assert isinstance(info.value, InboxError)


def test_revision_with_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(main, ["alembic", "init", "migrations"]).exit_code == 0
    result = CliRunner().invoke(main, ["alembic", "revision", "--store", "--rev-id", "abc"])
    assert result.exit_code == 0, result.output
    text = next((tmp_path / "migrations" / "versions").glob("abc_*.py")).read_text()
    upgrade, downgrade = text.split("def downgrade()")
    assert upgrade.index("op.create_inbox_table(") < upgrade.index("op.create_inbox_store_table(")
    assert "op.create_inbox_store_table('inbox_store', message_id_length=255)" in upgrade
    assert downgrade.index("op.drop_inbox_store_table(") < downgrade.index("op.drop_inbox_table(")


# -- one source of truth: the models' table -------------------------------------------------


def _models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    """A models module on sys.path defining ``metadata`` with ``body``; its spec."""
    name = f"cfg_models_{abs(hash((str(tmp_path), body)))}"
    (tmp_path / f"{name}.py").write_text(
        "import sqlalchemy as sa\nfrom sa_inbox import Inbox\nfrom sa_inbox.store import "
        f"InboxStore\nmetadata = sa.MetaData()\n{body}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"target_metadata = {name}:metadata"


MY_INBOX = "Inbox(metadata, table_name='my_inbox', message_id_length=64)"
#: models, the [sa_inbox] options, and how the error quotes them
CONFLICTS = {
    "table_name": (MY_INBOX, "table_name = inbox_processed_messages", None),
    "message_id_length": (
        MY_INBOX,
        "table_name = my_inbox\nmessage_id_length = 255",
        "table_name = my_inbox, message_id_length = 255",
    ),
    "schema": (MY_INBOX, "schema = audit", None),
    "store_table_name": (
        "InboxStore(metadata, table_name='jobs')",
        "tables = store\nstore_table_name = inbox_store",
        "store_table_name = inbox_store",
    ),
}


@pytest.mark.parametrize("option", list(CONFLICTS))
def test_an_ini_option_that_disagrees_with_the_models_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    body, section, said = CONFLICTS[option]
    spec = _models(tmp_path, monkeypatch, body)
    with pytest.raises(InboxSettingsConflict) as info:
        target_metadata(_config(tmp_path, f"{spec}\n{section}"))
    message = str(info.value)
    assert message.startswith(f"[sa_inbox] {said or section} disagrees with the ")
    assert "remove these options from [sa_inbox]" in message
    assert isinstance(info.value, ConfigurationError) and isinstance(info.value, AlembicSetupError)


def test_conflict_message_names_both_sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _models(tmp_path, monkeypatch, MY_INBOX)
    with pytest.raises(InboxSettingsConflict) as info:
        target_metadata(_config(tmp_path, f"{spec}\nmessage_id_length = 255"))
    assert str(info.value).startswith(
        "[sa_inbox] message_id_length = 255 disagrees with the processed_messages table the "
        "models define (table_name = my_inbox, schema = (none), message_id_length = 64)."
    )


def test_ini_options_that_agree_with_the_models_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _models(tmp_path, monkeypatch, MY_INBOX)
    config = _config(tmp_path, f"{spec}\ntable_name = my_inbox\nschema =\nmessage_id_length = 064")
    assert _kinds(config) == {"my_inbox": "processed_messages", "inbox_consumers": "consumers"}


def test_the_template_sets_no_table_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The models are the source: a new project's alembic.ini gives only what they cannot."""
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(main, ["alembic", "init", "migrations"]).exit_code == 0
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(tmp_path / "alembic.ini")
    assert parser.options("sa_inbox") == ["target_metadata", "tables"]
