"""The dialect layer's layout rules: one registry of backends, imports that point
one way (read from the source), schema modules that never consult a dialect, and private
SQLAlchemy names nowhere but sa_inbox/_compat.py."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox.dialects import (
    Backend,
    MySQLClaim,
    MySQLPurge,
    OracleClaim,
    OraclePurge,
    PostgreSQLClaim,
    PostgreSQLPurge,
    PurgeDialect,
    SavepointClaim,
    SQLiteClaim,
    SQLitePurge,
    backend_for,
    claim_dialect_for,
    purge_dialect_for,
)
from sa_inbox.dialects.mysql import MySQLStoreClaim
from sa_inbox.dialects.oracle import OracleStoreClaim
from sa_inbox.dialects.postgresql import PostgreSQLStoreClaim
from sa_inbox.dialects.sqlite import SQLiteStoreClaim
from sa_inbox.exc import UnsupportedBackend
from sa_inbox.schema import INSERT_COLUMNS_INFO, claim_columns, insert_columns
from sa_inbox.store import InboxStore
from sa_inbox.store.schema import RECEIVE_COLUMNS

PACKAGE = Path(__file__).resolve().parents[3] / "sa_inbox"
#: What the dialect layer may import from the rest of sa-inbox.
DIALECT_IMPORTS = {"exc", "schema", "_compat", "validation"}


def sa_inbox_imports(path: Path) -> set[str]:
    """The sa-inbox modules ``path`` imports, as dotted names relative to ``sa_inbox``."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                parts = [*base, *(node.module or "").split(".")] if node.module else base
                names = (
                    [".".join(parts)]
                    if node.module
                    else [".".join([*base, a.name]) for a in node.names]
                )
            else:
                names = [node.module or ""]
            found.update(n for n in names if n.startswith("sa_inbox"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("sa_inbox"))
    return {name.removeprefix("sa_inbox").lstrip(".") for name in found}


def test_dialects_import_only_the_neutral_modules() -> None:
    for path in sorted((PACKAGE / "dialects").glob("*.py")):
        outside = {m for m in sa_inbox_imports(path) if not m.startswith("dialects")}
        assert outside <= DIALECT_IMPORTS, (
            f"{path.name} imports {sorted(outside - DIALECT_IMPORTS)}"
        )


def test_schemas_do_not_consult_the_dialects() -> None:
    for path in (PACKAGE / "schema.py", PACKAGE / "store" / "schema.py"):
        assert not {m for m in sa_inbox_imports(path) if m.startswith("dialects")}, path


def test_the_import_scanner_sees_relative_imports() -> None:
    assert "dialects" in sa_inbox_imports(PACKAGE / "claim.py")
    assert {"exc", "schema"} <= sa_inbox_imports(PACKAGE / "dialects" / "oracle.py")


def test_tables_say_which_columns_an_insert_writes() -> None:
    store = InboxStore(sa.MetaData())
    assert store.table.info[INSERT_COLUMNS_INFO] == list(RECEIVE_COLUMNS)
    assert insert_columns(store.table) == list(RECEIVE_COLUMNS)
    processed = sa.Table(
        "p",
        sa.MetaData(),
        sa.Column("message_id", sa.String(9), primary_key=True),
        sa.Column("consumer_name", sa.String(9), primary_key=True),
        sa.Column("received_at", sa.DateTime),
        sa.Column("payload_hash", sa.LargeBinary),
    )
    assert insert_columns(processed) == claim_columns(processed)
    assert insert_columns(processed) == ["message_id", "consumer_name", "payload_hash"]


# -- the registry --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "claim", "purge", "store_claim"),
    [
        ("postgresql", PostgreSQLClaim, PostgreSQLPurge, PostgreSQLStoreClaim),
        ("mysql", MySQLClaim, MySQLPurge, MySQLStoreClaim),
        ("mariadb", MySQLClaim, MySQLPurge, MySQLStoreClaim),
        ("oracle", OracleClaim, OraclePurge, OracleStoreClaim),
        ("sqlite", SQLiteClaim, SQLitePurge, SQLiteStoreClaim),
    ],
)
def test_backend_for_each_dialect_name(
    name: str, claim: type, purge: type, store_claim: type
) -> None:
    backend = backend_for(name)
    assert name in backend.names
    assert type(backend.claim) is claim
    assert type(backend.purge) is purge
    assert type(backend.store_claim) is store_claim
    # The former lookups are thin functions over the one registry.
    assert claim_dialect_for(name) is backend.claim
    assert purge_dialect_for(name) is backend.purge


def test_each_backend_module_registers_its_backend_once() -> None:
    modules = sorted(p.stem for p in (PACKAGE / "dialects").glob("*.py"))
    registered = []
    for stem in modules:
        module = importlib.import_module(f"sa_inbox.dialects.{stem}")
        backend = getattr(module, "BACKEND", None)
        if backend is not None:
            registered.append(stem)
            if stem in VARIANTS:  # speaks another backend's dialect: found by backend_of
                assert backend_for(backend.names[0]) is not backend
                continue
            assert all(backend_for(name) is backend for name in backend.names)
    assert registered == ["cockroachdb", "mysql", "oracle", "postgresql", "sqlite", "yugabytedb"]
    assert backend_for("mysql") is backend_for("mariadb")


#: Backend modules whose servers speak another backend's SQLAlchemy dialect.
VARIANTS = {"yugabytedb"}


def test_unknown_backend_gets_the_portable_defaults() -> None:
    backend = backend_for("mssql")
    assert backend.names == ("mssql",)
    assert isinstance(backend.claim, SavepointClaim) and backend.claim.native is None
    assert type(backend.purge) is PurgeDialect
    with pytest.raises(UnsupportedBackend, match="'mssql'"):
        _ = backend.store_claim


def test_savepoint_strategy_wraps_the_registered_claim() -> None:
    forced = claim_dialect_for("oracle", "savepoint")
    assert isinstance(forced, SavepointClaim) and forced.native is backend_for("oracle").claim
    unknown = claim_dialect_for("mssql", "savepoint")
    assert isinstance(unknown, SavepointClaim) and unknown.native is None


def test_sqlite_store_claim_shares_the_claims_probe() -> None:
    backend = backend_for("sqlite")
    assert isinstance(backend.store_claim, SQLiteStoreClaim)
    assert backend.store_claim.claim_dialect is backend.claim


def test_backend_is_frozen() -> None:
    backend = backend_for("sqlite")
    assert isinstance(backend, Backend)
    with pytest.raises(dataclasses.FrozenInstanceError):
        backend.claim = SQLiteClaim()  # type: ignore[misc]


# -- private SQLAlchemy names --------------------------------------------------------------

#: SQLAlchemy's private hooks that a construct or a check might reach for.
SQLALCHEMY_PRIVATE = (
    "_traverse_internals",
    "_cache_key_traversal",
    "_generate_cache_key",
    "_is_autocommit_isolation",
    "_on_connect_isolation_level",
    "_execution_options",
    "_execute_mutex",
)
#: Undocumented SQLAlchemy API without an underscore: ``sqlalchemy.util`` (its
#: ``OrderedSet``) and the execution context of a result.
SQLALCHEMY_UNDOCUMENTED = ("sqlalchemy.util", "OrderedSet", "context.cursor", "root_connection")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_names(trees: list[ast.AST]) -> set[str]:
    """Every name sa-inbox defines itself: functions, classes, attributes, arguments."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
    return names


#: Names with a leading underscore that are documented public API outside SQLAlchemy:
#: ``os._exit`` (Python docs, "os", "Process Management"); librdkafka's local error codes
#: on ``confluent_kafka.KafkaError`` (confluent-kafka docs, "KafkaError": "error codes
#: ... prefixed with an underscore are local, generated by the client").
PUBLIC = frozenset(
    {
        "_exit",
        "_ALL_BROKERS_DOWN",
        "_ASSIGNMENT_LOST",
        "_MSG_TIMED_OUT",
        "_PARTITION_EOF",
        "_RESOLVE",
        "_TIMED_OUT",
        "_TRANSPORT",
    }
)


def _private_uses(tree: ast.AST) -> set[str]:
    """Private names read off objects (``x._y``, ``getattr(x, "_y")``) or imported from
    SQLAlchemy."""
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in PUBLIC:
            used.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            used.add(node.args[1].value)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            used.update(a.name for a in node.names if _private(a.name))
            used.update(p for p in (node.module or "").split(".") if _private(p))
    return used


def test_private_sqlalchemy_names_only_in_compat() -> None:
    sources = {
        path: ast.parse(path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "_compat.py"
    }
    ours = _defined_names(list(sources.values())) - set(SQLALCHEMY_PRIVATE)
    for path, tree in sources.items():
        foreign = _private_uses(tree) - ours
        assert not foreign, f"{path.relative_to(PACKAGE)} uses {sorted(foreign)}"
        text = path.read_text()
        markers = [n for n in (*SQLALCHEMY_PRIVATE, *SQLALCHEMY_UNDOCUMENTED) if _mentions(text, n)]
        assert not markers, f"{path.relative_to(PACKAGE)} mentions {markers}"


def test_sessionmaker_options_are_read_only_in_compat() -> None:
    """``sessionmaker.kw`` (undocumented) is read through ``_compat.session_options``."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_compat.py":
            continue
        tree = ast.parse(path.read_text())
        uses = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "kw"]
        assert not uses, f"{path.relative_to(PACKAGE)} reads .kw at lines {uses}"


def _mentions(text: str, name: str) -> bool:
    """``name`` in ``text``, not as the tail of a longer identifier (the public
    ``get_execution_options`` is not the private ``_execution_options``)."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(name)}", text) is not None


def test_the_marker_search_tells_public_names_from_private_ones() -> None:
    assert _mentions("conn._execution_options", "_execution_options")
    assert not _mentions("conn.get_execution_options()", "_execution_options")
    assert _mentions("from sqlalchemy.util import x", "sqlalchemy.util")


def test_the_private_name_scanner_finds_them() -> None:
    compat = ast.parse((PACKAGE / "_compat.py").read_text())
    assert {"_is_autocommit_isolation", "_traverse_internals"} <= _private_uses(compat)
    snippet = ast.parse("from sqlalchemy.util._collections import OrderedSet\nr.context._x")
    assert _private_uses(snippet) == {"_collections", "_x"}
