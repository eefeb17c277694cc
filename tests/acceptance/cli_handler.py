"""Handlers for ``sa-inbox worker --handler tests.acceptance.cli_handler:…`` in the CLI tests."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from sa_inbox.exc import InvalidSessionFactory
from sa_inbox.store import StoredMessage
from tests.support.store_app import StoreApp

EFFECTS = StoreApp(None).effects  # type: ignore[arg-type]


def record(session: Session, message: StoredMessage) -> None:
    """One effect row per message, in the transaction that marks it done."""
    payload: dict[str, Any] = message.payload
    session.execute(
        EFFECTS.insert().values(
            message_id=message.message_id,
            aggregate_id=message.aggregate_id,
            seq=payload.get("seq"),
            claimed_by=message.claimed_by,
        )
    )


NOT_CALLABLE = 42


def fail(session: Session, message: StoredMessage) -> None:
    """Always raises: every attempt fails, then the message is dead."""
    raise RuntimeError(f"no account for {message.message_id}")


def one_argument(message: StoredMessage) -> None:
    """A handler with the wrong signature (no session): refused at start-up."""


def misconfigured(session: Session, message: StoredMessage) -> None:
    """Raises a configuration error: the worker must stop, not count failed attempts."""
    raise InvalidSessionFactory(
        "the handler was deployed with Session.begin\n(a second line that the CLI leaves out)"
    )


async def record_async(session: Any, message: StoredMessage) -> None:
    """``record`` as an ``async def`` on an AsyncSession: run by the asyncio worker."""
    payload: dict[str, Any] = message.payload
    await session.execute(
        EFFECTS.insert().values(
            message_id=message.message_id,
            aggregate_id=message.aggregate_id,
            seq=payload.get("seq"),
            claimed_by=message.claimed_by,
        )
    )


def record_renamed(session: Session, message: StoredMessage) -> None:
    """``record`` under another name (a handler renamed in a deploy)."""
    record(session, message)


#: The file a slow handler creates once it has started (a test's signal to stop it then).
STARTED = "SA_INBOX_TEST_HANDLER_STARTED"


def _started() -> None:
    path = os.environ.get(STARTED)
    if path:
        Path(path).touch()


def record_slowly(session: Session, message: StoredMessage) -> None:
    """``record``, then 60 s more in the transaction (a handler to stop mid-way); the file
    named by :data:`STARTED` is created once it has started."""
    record(session, message)
    _started()
    time.sleep(60)


async def record_slowly_async(session: Any, message: StoredMessage) -> None:
    """``record_async``, then 60 s more in the transaction, on the event loop (see
    :func:`record_slowly`)."""
    await record_async(session, message)
    _started()
    await asyncio.sleep(60)


def exit_5(session: Session, message: StoredMessage) -> None:
    """``record``, then ``raise SystemExit(5)`` (a handler that ends the process)."""
    record(session, message)
    raise SystemExit(5)


def record_but_3(session: Session, message: StoredMessage) -> None:
    """``record``, then raise for the message whose seq is 3 (its effect rolled back)."""
    record(session, message)
    if message.payload.get("seq") == 3:
        raise RuntimeError(f"{message.message_id} fails")


async def record_async_but_3(session: Any, message: StoredMessage) -> None:
    """``record_async``, then raise for the message whose seq is 3."""
    await record_async(session, message)
    if message.payload.get("seq") == 3:
        raise RuntimeError(f"{message.message_id} fails")


def driver_of(session: Any) -> str:
    """The driver ``session`` runs on and its kind: ``"asyncpg async"``, ``"pymysql sync"``."""
    dialect = session.get_bind().dialect
    return f"{dialect.driver} {'async' if dialect.is_async else 'sync'}"


def record_driver(session: Session, message: StoredMessage) -> None:
    """``record``, with the session's driver in ``aggregate_id`` (a plain ``def``)."""
    session.execute(
        EFFECTS.insert().values(
            message_id=message.message_id,
            aggregate_id=driver_of(session),
            claimed_by=message.claimed_by,
        )
    )


async def record_driver_async(session: Any, message: StoredMessage) -> None:
    """``record_driver`` as an ``async def`` on an AsyncSession."""
    await session.execute(
        EFFECTS.insert().values(
            message_id=message.message_id,
            aggregate_id=driver_of(session.sync_session),
            claimed_by=message.claimed_by,
        )
    )
