"""A consumer process for the crash tests:
``python -m tests.backends.claim.crash_child URL ID MODE``.

MODE ``crash-after-commit``: processes the message, commits, prints ``COMMITTED`` and hangs in
the ack until the parent kills it. MODE ``crash-before-commit``: applies the change, prints
``APPLIED`` and hangs before the commit. MODE ``deliver``: processes normally and prints the
outcome, then ``ACKED``.
"""

from __future__ import annotations

import sys
import time
from decimal import Decimal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox import handle
from tests.support.app import CONSUMER, App
from tests.support.child import say

AMOUNT = Decimal("42.00")


def main(url: str, message_id: str, mode: str) -> None:
    engine = sa.create_engine(url)
    app = App(engine)

    def handler(session: Session) -> None:
        app.apply_payment(session, message_id, 1, AMOUNT)
        if mode == "crash-before-commit":
            session.flush()
            say("APPLIED")
            time.sleep(120)

    def ack() -> None:
        if mode == "crash-after-commit":
            say("COMMITTED")
            time.sleep(120)  # killed here: committed, never acked
        say("ACKED")

    result = handle(
        app.Session, app.inbox, message_id, CONSUMER, handler, ack=ack, nack=lambda: None
    )
    say(result.outcome.value)


if __name__ == "__main__":
    main(*sys.argv[1:4])
