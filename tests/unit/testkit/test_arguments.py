"""What check_exactly_once refuses, with a typed error and before any SQL reaches the
database (every statement of every engine is counted)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox
from sa_inbox.exc import (
    InvalidArgument,
    InvalidHandler,
    InvalidObject,
    InvalidSessionFactory,
    SyncAsyncMismatch,
)
from sa_inbox.testing import Message, check_exactly_once, check_exactly_once_async

INBOX = Inbox(sa.MetaData())


def handler(session: Any, delivery: Any) -> None:
    raise AssertionError("never delivered to")


def consumer(delivery: Any, ack: Any) -> None:
    raise AssertionError("never delivered to")


async def async_consumer(delivery: Any, ack: Any) -> None:
    raise AssertionError("never delivered to")


def state(session: Any, message: Message) -> int:
    raise AssertionError("never read")


def message(message_id: str) -> Message:
    return Message(message_id, b"{}")


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """Every statement any engine sends while the test runs."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    yield sent
    event.remove(Engine, "before_cursor_execute", record)


@pytest.fixture
def Session(tmp_path: Path) -> Iterator[sessionmaker[Any]]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/kit.db")
    yield sessionmaker(engine)
    engine.dispose()


HANDLER = {"inbox": INBOX, "consumer_name": "billing", "message": message, "state": state}


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ({"consumer": consumer}, InvalidArgument, "not both"),
        ({"workers": 1}, InvalidArgument, "workers must be an int >= 2"),
        ({"workers": True}, InvalidArgument, "workers must be an int >= 2"),
        ({"timeout": 0}, InvalidArgument, "timeout must be"),
        ({"message": "payment"}, InvalidArgument, "message must be a factory"),
        ({"state": lambda session: 0}, InvalidHandler, "state"),
        ({"inbox": None}, InvalidArgument, "a handler needs inbox"),
        ({"consumer_name": None}, InvalidArgument, "a handler needs consumer_name"),
        ({"key": "message_id"}, InvalidArgument, "key must be a function"),
        ({"outbound": "myapp:charge"}, InvalidArgument, "outbound is a list"),
        ({"outbound": ["no_such_module_x:charge"]}, InvalidArgument, "does not import"),
        ({"outbound": ["json:no_such_function"]}, InvalidArgument, "no function"),
        ({"outbound": ["json.loads"]}, InvalidArgument, "'module:function'"),
        ({"inbox": object()}, InvalidObject, "Inbox"),
    ],
)
def test_a_handler_check_refuses_bad_arguments_before_any_sql(
    Session: Any, statements: list[str], arguments: dict[str, Any], error: type, words: str
) -> None:
    with pytest.raises(error, match=words):
        check_exactly_once(handler, **{**HANDLER, "session_factory": Session, **arguments})
    assert statements == []


def test_a_check_of_nothing_is_refused(Session: Any, statements: list[str]) -> None:
    with pytest.raises(InvalidArgument, match="not neither"):
        check_exactly_once(session_factory=Session, message=message, state=state)
    assert statements == []


@pytest.mark.parametrize(
    ("factory", "words"),
    [
        (lambda message_id: 42, "returned int"),
        (lambda message_id: Message("always-the-same"), "returned the id 'always-the-same' twice"),
    ],
)
def test_a_message_factory_that_is_no_producer_is_refused_before_any_sql(
    Session: Any, statements: list[str], factory: Any, words: str
) -> None:
    with pytest.raises(InvalidArgument, match=words):
        check_exactly_once(handler, **{**HANDLER, "session_factory": Session, "message": factory})
    assert statements == []


def test_a_handler_that_cannot_take_session_and_delivery_is_refused(
    Session: Any, statements: list[str]
) -> None:
    with pytest.raises(InvalidHandler):
        check_exactly_once(lambda session: None, session_factory=Session, **HANDLER)
    assert statements == []


def test_a_consumer_with_a_session_factory_of_the_other_half_is_refused(
    Session: Any, tmp_path: Path, statements: list[str]
) -> None:
    with pytest.raises(InvalidSessionFactory, match="other half"):
        check_exactly_once(
            consumer=async_consumer, session_factory=Session, message=message, state=state
        )
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/kit.db")
    with pytest.raises(InvalidSessionFactory, match="other half"):
        check_exactly_once(
            consumer=consumer,
            session_factory=async_sessionmaker(engine),
            message=message,
            state=state,
        )
    assert statements == []


def test_a_consumer_takes_no_handler_settings(Session: Any, statements: list[str]) -> None:
    with pytest.raises(InvalidArgument, match="a consumer of your own claims and keys"):
        check_exactly_once(consumer=consumer, session_factory=Session, **HANDLER)
    with pytest.raises(InvalidArgument, match="needs session_factory"):
        check_exactly_once(consumer=consumer, message=message, state=state)
    assert statements == []


def test_an_async_state_needs_an_async_session_factory(Session: Any, statements: list[str]) -> None:
    async def async_state(session: Any, message: Message) -> int:
        return 0

    with pytest.raises(SyncAsyncMismatch, match="async def state needs an async_sessionmaker"):
        check_exactly_once(handler, session_factory=Session, **{**HANDLER, "state": async_state})
    assert statements == []


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_sqlite_database_is_refused(url: str, statements: list[str]) -> None:
    engine = sa.create_engine(url)
    with pytest.raises(InvalidArgument, match="in-memory SQLite"):
        check_exactly_once(handler, session_factory=sessionmaker(engine), **HANDLER)
    assert statements == []


def test_a_handler_given_by_a_path_that_does_not_import_is_refused(
    Session: Any, statements: list[str]
) -> None:
    with pytest.raises(InvalidArgument, match="does not import"):
        check_exactly_once("no_such_app_x:apply", session_factory=Session, **HANDLER)
    assert statements == []


def test_the_sync_call_inside_an_event_loop_names_the_async_one(
    Session: Any, statements: list[str]
) -> None:
    async def inside() -> None:
        check_exactly_once(handler, session_factory=Session, **HANDLER)

    with pytest.raises(InvalidArgument, match="check_exactly_once_async"):
        asyncio.run(inside())
    assert statements == []


def test_the_async_call_refuses_as_the_sync_one(Session: Any, statements: list[str]) -> None:
    with pytest.raises(InvalidArgument, match="workers must be"):
        asyncio.run(
            check_exactly_once_async(handler, session_factory=Session, workers=0, **HANDLER)
        )
    assert statements == []
