"""The dialect layer's layout rules (issue 10), read from the source: imports point one way,
and the schema modules never consult a dialect."""

from __future__ import annotations

import ast
from pathlib import Path

import sqlalchemy as sa

from sa_inbox.schema import INSERT_COLUMNS_INFO, claim_columns, insert_columns
from sa_inbox.store import InboxStore
from sa_inbox.store.schema import RECEIVE_COLUMNS

PACKAGE = Path(__file__).resolve().parents[2] / "sa_inbox"
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
