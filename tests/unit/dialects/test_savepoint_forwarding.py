"""SavepointClaim takes every piece of backend knowledge from the native dialect: each public
method of ClaimDialect is either the claim's flow (the savepoint's own) or forwarded, by
construction, so a method added to ClaimDialect cannot be forgotten."""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.sql.expression import Executable

from sa_inbox.dialects import ClaimDialect, MySQLClaim, PostgreSQLClaim, claim_dialect_for
from sa_inbox.dialects.generic import FORWARDED, SavepointClaim
from sa_inbox.dialects.mysql import CausalSelect


def public_methods(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}


class Recording(ClaimDialect):
    """A native dialect that records which of its methods were called."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def insert_or_skip(self, table: sa.Table) -> Executable:
        return sa.insert(table)


def _recorder(name: str) -> Any:
    def record(self: Recording, *args: Any, **kwargs: Any) -> str:
        self.calls.append(name)
        return f"native {name}"

    return record


for _name in FORWARDED:
    setattr(Recording, _name, _recorder(_name))


def placeholders(name: str) -> list[object]:
    """One placeholder per positional parameter of ``ClaimDialect.<name>`` (the native
    recorder ignores them)."""
    parameters = list(inspect.signature(getattr(ClaimDialect, name)).parameters.values())[1:]
    return [None for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]


def test_every_method_is_the_flow_or_forwarded() -> None:
    methods = public_methods(ClaimDialect)
    assert methods >= ClaimDialect.FLOW, ClaimDialect.FLOW - methods
    assert set(FORWARDED) == methods - ClaimDialect.FLOW
    assert {"causal_select", "is_autocommit", "json_text", "read_driver_state"} <= set(FORWARDED)


@pytest.mark.parametrize("name", FORWARDED)
def test_each_forwarded_method_reaches_the_native_dialect(name: str) -> None:
    native = Recording()
    result = getattr(SavepointClaim(native), name)(*placeholders(name))
    assert native.calls == [name] and result == f"native {name}"


def test_without_a_native_dialect_the_defaults_answer() -> None:
    claim = SavepointClaim(None)
    assert claim.check_table(None, None) is True  # type: ignore[arg-type]
    assert claim.driver_autocommit(object()) is False
    assert claim.read_driver_state(object()) is None
    text = sa.bindparam("payload", type_=sa.Text())
    assert claim.json_text(text, sa.Column("payload", sa.JSON())) is text


def test_the_mariadb_causal_read_and_the_postgresql_json_cast_are_the_native_ones() -> None:
    savepoint = claim_dialect_for("mysql", "savepoint")
    assert isinstance(savepoint, SavepointClaim) and isinstance(savepoint.native, MySQLClaim)
    mariadb = mysql.dialect()
    mariadb.is_mariadb = True
    conn: Any = SimpleNamespace(dialect=mariadb)  # causal_select reads the dialect only
    assert isinstance(savepoint.causal_select(conn, sa.literal(1)), CausalSelect)
    assert not isinstance(SavepointClaim(None).causal_select(conn, sa.literal(1)), CausalSelect)
    postgresql = SavepointClaim(PostgreSQLClaim())
    text = sa.bindparam("payload", type_=sa.Text())
    column = sa.Column("payload", sa.JSON())
    assert str(postgresql.json_text(text, column)) == str(PostgreSQLClaim().json_text(text, column))
    assert str(postgresql.json_text(text, column)) != str(text)


def test_the_flow_stays_the_savepoint_s_own() -> None:
    native = Recording()
    claim = SavepointClaim(native)
    table = sa.Table("t", sa.MetaData(), sa.Column("message_id", sa.String))
    assert claim.supports_returning(None) is False  # type: ignore[arg-type]
    assert str(claim.insert_or_skip(table)).startswith("INSERT INTO t")
    assert native.calls == []
