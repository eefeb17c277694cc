"""Alembic configuration for sa-inbox: the template folder and the env.py helpers.

``sa-inbox alembic init DIR`` is ``alembic init -t sa_inbox DIR`` with a :class:`Config`
whose :meth:`~Config.get_template_directory` is ``sa_inbox/alembic_templates/`` (Alembic
looks for templates only there). The template's ``env.py`` calls :func:`target_metadata`,
which reads the ``[sa_inbox]`` section of ``alembic.ini``::

    [sa_inbox]
    target_metadata = myapp.models:Base.metadata   # module:attribute; empty for none
    tables = processed_messages                     # and/or: store

One source of truth for a table's settings: the models. The application claims through the
table its ``Inbox(metadata, table_name=..., message_id_length=...)`` defines, so when that
MetaData is the target, its table is what is migrated. ``table_name``, ``store_table_name``,
``schema`` and ``message_id_length`` in ``[sa_inbox]`` are read only for a kind of table the
MetaData lacks (a project without models: the table is added from them, with the consumers
table that the Inbox claims through); set while the models define the table, they must agree
with it, or :class:`~sa_inbox.exc.InboxSettingsConflict` is raised: a disagreement is never settled
silently.
"""

from __future__ import annotations

import importlib
from importlib import resources
from typing import Any

import alembic.config
import sqlalchemy as sa

from ..consumers import shared_consumers_table
from ..exc import AlembicSetupError, InboxSettingsConflict, InvalidArgument, InvalidTable
from ..schema import DEFAULT_MESSAGE_ID_LENGTH, DEFAULT_TABLE_NAME
from ..store import DEFAULT_STORE_TABLE
from .operations import PROCESSED_MESSAGES, STORE
from .tables import InboxTableKind, build_table, marker

__all__ = ["SECTION", "TEMPLATE", "Config", "target_metadata", "template_directory"]

#: Name of the template folder under ``sa_inbox/alembic_templates/``.
TEMPLATE = "sa_inbox"
#: The ``alembic.ini`` section read by :func:`target_metadata`.
SECTION = "sa_inbox"


def template_directory() -> str:
    """Path of ``sa_inbox/alembic_templates/`` (installed as package data)."""
    return str(resources.files("sa_inbox") / "alembic_templates")


class Config(alembic.config.Config):
    """An Alembic :class:`alembic.config.Config` that finds the sa-inbox templates.

    Use it with :mod:`alembic.command` exactly like Alembic's own::

        from alembic import command
        from sa_inbox.alembic import Config

        config = Config("alembic.ini")
        command.init(config, "migrations", template="sa_inbox")
    """

    def get_template_directory(self) -> str:
        return template_directory()


def _import_metadata(spec: str) -> sa.MetaData:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise AlembicSetupError(
            f"[{SECTION}] target_metadata must be 'module:attribute', not {spec!r}"
        )
    try:
        value: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise AlembicSetupError(f"[{SECTION}] target_metadata {spec!r}: {exc}") from exc
    if not isinstance(value, sa.MetaData):
        raise AlembicSetupError(
            f"[{SECTION}] target_metadata {spec!r} is a {type(value).__name__}, not a MetaData"
        )
    return value


#: ``tables =`` values: the kind, and the option naming its table with its default name.
TABLE_OPTIONS: dict[str, tuple[InboxTableKind, str, str]] = {
    "processed_messages": (PROCESSED_MESSAGES, "table_name", DEFAULT_TABLE_NAME),
    "store": (STORE, "store_table_name", DEFAULT_STORE_TABLE),
}


def _model_tables(metadata: sa.MetaData, kind: InboxTableKind) -> list[sa.Table]:
    """The tables of ``kind`` that the models define (``Inbox(metadata)`` and the like)."""
    return [
        table
        for table in metadata.tables.values()
        if (found := marker(table.info)) is not None and found[0] is kind
    ]


def _settings(table: sa.Table, name_option: str) -> dict[str, str]:
    """What the ini options would be for the models' ``table``."""
    found = marker(table.info)
    length = (found[1] if found else {}).get("message_id_length")
    return {
        name_option: table.name,
        "schema": table.schema or "",
        "message_id_length": str(length),
    }


def _check_agrees(
    section: dict[str, str], name_option: str, kind: InboxTableKind, models: list[sa.Table]
) -> None:
    """Raise :class:`InboxSettingsConflict` unless a table of ``models`` has every setting
    that ``section`` gives (a setting absent or empty is not given)."""
    given = {
        key: value.strip()
        for key in (name_option, "schema", "message_id_length")
        if (value := section.get(key) or "").strip()
    }
    if "message_id_length" in given:  # already checked to be an integer
        given["message_id_length"] = str(int(given["message_id_length"]))
    for table in models:
        settings = _settings(table, name_option)
        if all(settings[key] == value for key, value in given.items()):
            return
    said = ", ".join(f"{key} = {value}" for key, value in given.items())
    found = "; ".join(
        ", ".join(f"{key} = {value or '(none)'}" for key, value in settings.items())
        for settings in (_settings(table, name_option) for table in models)
    )
    raise InboxSettingsConflict(
        f"[{SECTION}] {said} disagrees with the {kind.name} table the models define "
        f"({found}). The application claims through the models' table, so that is the one "
        f"migrated: remove these options from [{SECTION}] (they are read only when "
        f"target_metadata has no {kind.name} table), or change the models."
    )


def target_metadata(config: alembic.config.Config) -> sa.MetaData:
    """The MetaData for ``env.py``: the application's, plus the inbox tables it lacks.

    Reads the ``[sa_inbox]`` section of the config file (every option may be absent):
    ``target_metadata`` (``module:attribute`` of the application's MetaData, imported
    with ``prepend_sys_path`` in effect; absent or empty: a new MetaData), ``tables``
    (comma-separated: ``processed_messages`` (default), ``store``; empty: none), ``table_name``,
    ``store_table_name``, ``schema``, ``message_id_length`` (characters). Each table is
    added unless the MetaData already holds a table of that name or an sa-inbox table of
    that kind (built by ``Inbox(metadata)`` / ``InboxStore(metadata)``); in that case the
    models' table is the one source of its settings, and the ini options must agree with it.
    A table added here brings the consumers table of its schema (:mod:`sa_inbox.consumers`)
    with it, which an ``Inbox`` or ``InboxStore`` built with the default ``consumers=True``
    claims through; the models' tables bring their own (or none, with ``consumers=False``).

    :raises AlembicSetupError: if ``target_metadata`` cannot be imported or is not a
        MetaData, ``tables`` names an unknown table, or ``message_id_length`` is not an
        integer.
    :raises InboxSettingsConflict: if ``table_name`` / ``store_table_name``, ``schema`` or
        ``message_id_length`` is set and no table of that kind in the models has it.
    :raises sa_inbox.exc.InvalidArgument: if the table options are invalid, or the
        MetaData has a table named as the consumers table that is not one.
    """

    section = config.get_section(SECTION, {})

    def option(name: str, default: str = "") -> str:
        """The option's value; ``default`` when absent or empty."""
        return (section.get(name) or default).strip()

    spec = option("target_metadata")
    metadata = _import_metadata(spec) if spec else sa.MetaData()
    tables = section.get("tables")  # absent: the default; empty: no sa-inbox table
    tables = "processed_messages" if tables is None else tables
    names = [name.strip() for name in tables.split(",")]
    unknown = [name for name in names if name and name not in TABLE_OPTIONS]
    if unknown:
        raise AlembicSetupError(
            f"[{SECTION}] tables: unknown {unknown}; known: {sorted(TABLE_OPTIONS)}"
        )
    schema = option("schema") or None
    length_text = option("message_id_length", str(DEFAULT_MESSAGE_ID_LENGTH))
    try:
        length = int(length_text)
    except ValueError as exc:
        raise AlembicSetupError(
            f"[{SECTION}] message_id_length must be an integer, not {length_text!r}"
        ) from exc
    for name in filter(None, names):
        kind, name_option, default_name = TABLE_OPTIONS[name]
        models = _model_tables(metadata, kind)
        if models:
            _check_agrees(section, name_option, kind, models)
            continue
        table_name = option(name_option, default_name)
        key = table_name if schema is None else f"{schema}.{table_name}"
        if key not in metadata.tables:  # a table of the application's own by that name
            table = build_table(kind, table_name, schema, {"message_id_length": length}, metadata)
            _add_consumers_table(table, length)
    return metadata


def _add_consumers_table(table: sa.Table, length: int) -> None:
    """The consumers table that an ``Inbox`` / ``InboxStore`` on ``table`` claims with
    (``consumers=True``, the default), added next to it.

    :raises sa_inbox.exc.InvalidArgument: if the MetaData has a table of that
        name that is not a consumers table.
    """
    try:
        shared_consumers_table(table, length)
    except InvalidTable as exc:
        raise InvalidArgument(f"[{SECTION}]: {exc}") from exc
