"""The tables the console reads, with rows in every state, on the backend under test.

:class:`ConsoleApp` has the processed-messages table (``inbox_processed_messages``), the
inbox store (``inbox_store``), the outbox (``outbox_messages``) under their default names,
and a business table ``console_effects`` the store's worker writes one row into per message
it processes (the business state the tests assert on).
"""

from __future__ import annotations

import datetime
import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox import Inbox
from sa_inbox.collision import payload_hash
from sa_inbox.outbox import Outbox
from sa_inbox.store import InboxStore, StoredMessage, Worker
from sa_inbox.store.worker import Backoff

#: What the console's pages say when a POST has no valid CSRF token.
CSRF_REFUSED = "CSRF token"
#: The hidden field of every form.
CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_token(html: str) -> str:
    """The CSRF token of the first form of a page."""
    found = CSRF_FIELD.search(html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


class ConsoleApp:
    """The inbox's, store's and outbox's tables and a business table on ``engine``."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.metadata = sa.MetaData()
        self.inbox = Inbox(self.metadata)
        self.store = InboxStore(self.metadata)
        self.outbox = Outbox(self.metadata)
        self.effects = sa.Table(
            "console_effects",
            self.metadata,
            sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
            sa.Column("message_id", sa.String(255), nullable=False),
            sa.Column("amount", sa.Integer, nullable=False),
        )

    def reset(self) -> None:
        self.drop()
        self.metadata.create_all(self.engine)

    def drop(self) -> None:
        self.metadata.drop_all(self.engine, checkfirst=True)

    # -- rows ---------------------------------------------------------------------------

    def receive(
        self,
        message_id: str,
        payload: Any,
        consumer: str = "billing",
        now: datetime.datetime | None = None,
    ) -> int:
        """Store a message for ``consumer`` (received ``now``, default now); its row id."""
        with Session(self.engine) as session, session.begin():
            self.store.receive(session, message_id, payload, consumer_name=consumer, now=now)
        return self.row(message_id, consumer)["id"]  # type: ignore[no-any-return]

    def kill(self, message_id: str, error: str, consumer: str = "billing", **values: Any) -> int:
        """Make the store row of ``message_id`` a dead letter with ``error``; its id."""
        t = self.store.table
        with self.engine.begin() as conn:
            conn.execute(
                t.update()
                .where(t.c.message_id == message_id, t.c.consumer_name == consumer)
                .values(status="dead", attempts=5, last_error=error, **values)
            )
        return self.row(message_id, consumer)["id"]  # type: ignore[no-any-return]

    def claim(self, message_id: str, consumer: str, payload: Any = None) -> None:
        """A processed-messages row: ``consumer`` processed ``message_id``."""
        with Session(self.engine) as session, session.begin():
            digest = None if payload is None else payload_hash(payload)
            self.inbox.claim(session, message_id, consumer, payload_hash=digest)

    def publish(self, message_id: str, destination: str, body: bytes, status: str = "pending",
                error: str | None = None) -> int:  # fmt: skip
        """An outbox row of ``status``; its id."""
        with Session(self.engine) as session, session.begin():
            self.outbox.publish(session, destination, body, message_id=message_id)
        t = self.outbox.table
        with self.engine.begin() as conn:
            conn.execute(
                t.update()
                .where(t.c.message_id == message_id)
                .values(status=status, last_error=error, attempts=3 if status == "dead" else 0)
            )
            return int(
                conn.execute(sa.select(t.c.id).where(t.c.message_id == message_id)).scalar_one()
            )

    def row(self, message_id: str, consumer: str = "billing") -> dict[str, Any]:
        t = self.store.table
        with self.engine.connect() as conn:
            found = (
                conn.execute(
                    sa.select(t).where(t.c.message_id == message_id, t.c.consumer_name == consumer)
                )
                .mappings()
                .one()
            )
        return dict(found)

    def statuses(self) -> dict[str, str]:
        """message_id -> status of every store row."""
        t = self.store.table
        with self.engine.connect() as conn:
            return dict(conn.execute(sa.select(t.c.message_id, t.c.status)).all())  # type: ignore[arg-type]

    def outbox_status(self, message_id: str) -> str:
        t = self.outbox.table
        with self.engine.connect() as conn:
            return str(
                conn.execute(sa.select(t.c.status).where(t.c.message_id == message_id)).scalar_one()
            )

    def effect_ids(self) -> list[str]:
        with self.engine.connect() as conn:
            return sorted(conn.execute(sa.select(self.effects.c.message_id)).scalars())

    def balance(self) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(self.effects.c.amount), 0))
                ).scalar_one()
            )

    # -- the business: a worker ---------------------------------------------------------

    def handle(self, session: Session, message: StoredMessage) -> None:
        """The handler: one ``console_effects`` row per message, with its amount."""
        session.execute(
            self.effects.insert().values(
                message_id=message.message_id, amount=int(message.payload.get("amount", 0))
            )
        )

    def work(self, consumer: str = "billing") -> dict[str, int]:
        """Run a real store Worker on ``consumer`` until nothing is pending; its summary."""
        worker = Worker(
            self.store.bind(self.engine),
            self.handle,
            consumer_name=consumer,
            max_attempts=1,
            backoff=Backoff(base=0.01, maximum=0.01),
            poll_interval=0.01,
        )
        worker.run(until_empty=True, handle_signals=False)
        return worker.summary.as_dict()  # type: ignore[no-any-return]


def ago(**delta: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(**delta)
