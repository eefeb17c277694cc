"""The payments test app with an outbox on the same MetaData (service A of the outbox tests)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from sa_inbox.outbox import Outbox
from tests.support.app import App


class OutboxApp(App):
    """:class:`~tests.support.app.App` plus an :class:`Outbox`; ``reset()`` creates all."""

    def __init__(self, engine: sa.Engine, **kw: Any) -> None:
        super().__init__(engine, **kw)
        self.outbox = Outbox(self.metadata)

    def outbox_rows(self, status: str | None = None) -> list[dict[str, Any]]:
        """The outbox's rows (every column), in id order, optionally of one status."""
        t = self.outbox.table
        query = sa.select(t).order_by(t.c.id)
        if status is not None:
            query = query.where(t.c.status == status)
        with self.engine.connect() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]
