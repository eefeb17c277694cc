"""``json_serializer`` on the inbox store and the outbox: Decimal money stored with the
caller's encoder on every backend, processed by a real worker and recorded exactly; the
default (``json.dumps``) still refuses it before any SQL."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox.exc import InvalidArgument, InvalidOutboxMessage
from sa_inbox.outbox import Outbox
from sa_inbox.store import DONE, InboxStore, StoredMessage, Worker

pytestmark = pytest.mark.backend

AMOUNT = Decimal("12.50")


def decimal_as_text(value: object) -> str:
    """A ``default=`` for :func:`json.dumps`: a Decimal as its exact text."""
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


#: Decimals as JSON strings: ``{"amount": "12.50"}``.
AS_STRINGS = functools.partial(json.dumps, default=decimal_as_text)


def as_numbers(value: Any) -> bytes:
    """Decimals as exact JSON numbers, ``{"amount": 12.50}``, returned as UTF-8 bytes (as
    ``orjson.dumps`` returns)."""
    marked = json.dumps(value, default=lambda d: f"\x00{decimal_as_text(d)}\x00")
    return re.sub(r'"\\u0000([^"\\]*)\\u0000"', r"\1", marked).encode()


class Schema:
    def __init__(self, engine: sa.Engine, serializer: Any) -> None:
        self.engine = engine
        self.serializer = serializer
        self.metadata = sa.MetaData()
        self.store = InboxStore(
            self.metadata, table_name="json_ser_store", consumers=False, json_serializer=serializer
        )
        self.outbox = Outbox(
            self.metadata, table_name="json_ser_outbox", json_serializer=serializer
        )
        self.ledger = sa.Table(
            "json_ser_ledger",
            self.metadata,
            sa.Column("message_id", sa.String(255), primary_key=True),
            sa.Column("amount", sa.Numeric(14, 2), nullable=False),
        )
        self.metadata.drop_all(engine, checkfirst=True)
        self.metadata.create_all(engine)

    def rows(self, table: sa.Table) -> list[sa.RowMapping]:
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(table)).mappings())


@pytest.fixture
def schema(request: pytest.FixtureRequest, url: str) -> Iterator[Schema]:
    serializer, deserializer = request.param
    options: dict[str, Any] = {"json_deserializer": deserializer} if deserializer else {}
    engine = sa.create_engine(url, **options)
    schema = Schema(engine, serializer)
    yield schema
    schema.metadata.drop_all(engine, checkfirst=True)
    engine.dispose()


ENCODINGS = [
    pytest.param((AS_STRINGS, None), id="strings"),
    pytest.param((as_numbers, functools.partial(json.loads, parse_float=Decimal)), id="numbers"),
]


@pytest.mark.parametrize("schema", ENCODINGS, indirect=True)
def test_decimal_money_through_the_store_and_its_worker(schema: Schema) -> None:
    with Session(schema.engine) as session, session.begin():
        assert schema.store.receive(session, "pay-1", {"account": 7, "amount": AMOUNT})
        assert not schema.store.receive(session, "pay-1", {"account": 7, "amount": AMOUNT})
    seen: list[Any] = []

    def handler(session: Session, message: StoredMessage) -> None:
        seen.append(message.payload["amount"])
        amount = Decimal(message.payload["amount"])
        session.execute(schema.ledger.insert().values(message_id=message.message_id, amount=amount))

    bound = schema.store.bind(schema.engine, sessionmaker(schema.engine))
    summary = Worker(bound, handler, poll_interval=0.05).run(until_empty=True, handle_signals=False)
    assert summary.processed == 1
    # as strings the amount comes back as its text; as numbers, through the engine's
    # json_deserializer, as the exact Decimal
    assert seen == (["12.50"] if schema.serializer is AS_STRINGS else [AMOUNT])
    assert type(seen[0]) is (str if schema.serializer is AS_STRINGS else Decimal)
    assert [(r["message_id"], r["amount"]) for r in schema.rows(schema.ledger)] == [
        ("pay-1", AMOUNT)
    ]
    (row,) = schema.rows(schema.store.table)
    assert row["status"] == DONE


@pytest.mark.parametrize("schema", ENCODINGS, indirect=True)
def test_decimal_money_through_the_outbox(schema: Schema) -> None:
    with Session(schema.engine) as session, session.begin():
        message_id = schema.outbox.publish(session, "payments", {"amount": AMOUNT})
    (row,) = schema.rows(schema.outbox.table)
    assert row["message_id"] == message_id
    body = json.loads(bytes(row["payload"]), parse_float=Decimal)
    assert Decimal(body["amount"]) == AMOUNT and str(body["amount"]) == "12.50"


@pytest.mark.parametrize("schema", [pytest.param((None, None), id="default")], indirect=True)
def test_the_default_still_refuses_decimal_before_any_sql(schema: Schema) -> None:
    with Session(schema.engine) as session, session.begin():
        with pytest.raises(InvalidArgument, match="JSON"):
            schema.store.receive(session, "pay-1", {"amount": AMOUNT})
        with pytest.raises(InvalidOutboxMessage, match="JSON"):
            schema.outbox.publish(session, "payments", {"amount": AMOUNT})
    assert schema.rows(schema.store.table) == [] and schema.rows(schema.outbox.table) == []


def test_a_serializer_that_is_not_callable_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="json_serializer"):
        InboxStore(sa.MetaData(), json_serializer="json.dumps")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="json_serializer"):
        Outbox(sa.MetaData(), json_serializer=42)  # type: ignore[arg-type]


@pytest.mark.parametrize("schema", [pytest.param((lambda v: 42, None), id="bad")], indirect=True)
def test_a_serializer_returning_no_text_is_refused_before_any_sql(schema: Schema) -> None:
    with Session(schema.engine) as session, session.begin():
        with pytest.raises(InvalidArgument, match="not str or bytes"):
            schema.store.receive(session, "pay-1", {"amount": 1})
        with pytest.raises(InvalidOutboxMessage, match="not str or bytes"):
            schema.outbox.publish(session, "payments", {"amount": 1})
    assert schema.rows(schema.store.table) == [] and schema.rows(schema.outbox.table) == []
