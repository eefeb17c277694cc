"""Which drivers send the claim with ``BEGIN``: synchronous psycopg 3 on PostgreSQL only;
every other driver, CockroachDB and the savepoint strategy keep today's statement."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg, PGDialectAsync_psycopg
from sqlalchemy.dialects.postgresql.psycopg2 import PGDialect_psycopg2
from sqlalchemy.sql.expression import Executable

from sa_inbox import Inbox
from sa_inbox.dialects import claim_dialect_for
from sa_inbox.dialects.with_begin import WithBegin


def _statement(name: str) -> Executable:
    """An Inbox's single-row insert-or-skip on backend ``name``."""
    table = Inbox(sa.MetaData(), consumers=False).table
    return claim_dialect_for(name).insert_or_skip(table)


def _psycopg() -> sa.Dialect:
    """SQLAlchemy's synchronous psycopg 3 dialect (no connection needed)."""
    return PGDialect_psycopg()  # type: ignore[no-untyped-call]


KEYS = ("message_id", "consumer_name")


def test_synchronous_psycopg_gets_the_pipelined_form() -> None:
    statement = _statement("postgresql")
    form = claim_dialect_for("postgresql").with_begin(statement, _psycopg(), KEYS)
    assert isinstance(form, WithBegin)
    # libpq's placeholders, one per key, in the statement's text
    assert "$1" in form.driver_sql.sql and "$2" in form.driver_sql.sql
    assert "%(" not in form.driver_sql.sql


@pytest.mark.parametrize(
    "dialect", [PGDialectAsync_psycopg, PGDialect_psycopg2, PGDialect_asyncpg], ids=repr
)
def test_other_postgresql_drivers_keep_the_usual_claim(dialect: type[sa.Dialect]) -> None:
    statement = _statement("postgresql")
    assert claim_dialect_for("postgresql").with_begin(statement, dialect(), KEYS) is None


@pytest.mark.parametrize("name", ["cockroachdb", "mysql", "sqlite", "oracle"])
def test_other_backends_keep_the_usual_claim(name: str) -> None:
    statement = _statement(name)
    assert claim_dialect_for(name).with_begin(statement, _psycopg(), KEYS) is None


def test_the_savepoint_strategy_keeps_the_usual_claim() -> None:
    statement = _statement("postgresql")
    claim = claim_dialect_for("postgresql", "savepoint")
    assert claim.with_begin(statement, _psycopg(), KEYS) is None
