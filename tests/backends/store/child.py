"""A worker process for the store tests:
``python -m tests.backends.store.child URL MODE LOG [KEY=VALUE…]``.

Prints ``READY`` once connected and waits for a line on stdin (the barrier), then runs a
:class:`~sa_inbox.store.worker.Worker` whose handler writes one effect row per message. Every
claimed batch is appended to LOG as a JSON line ``{"token", "ids", "pid"}``, flushed before
any message of it is processed.

MODE ``drain``: run until nothing is claimable. ``serve``: run until SIGTERM/SIGINT.
``hang``: print ``HANDLING <message_id>`` in the first message's handler and sleep there
(the test kills the process). ``slow``: print ``HANDLING <message_id>`` and take 1 s per
message (for the graceful-stop test). Options (KEY=VALUE): batch, visibility, attempts,
ordered (0/1), concurrency, fail_first (fail every message whose seq is a multiple of this
on its first attempt), transaction (message/batch), hang_at=SEQ (process every message
but hang in the handler of the one whose seq is SEQ, printing ``HANDLING <message_id>``, so
that a kill lands mid-batch), accounts=N (the handler also credits account ``seq * 7 % N``
after its effect row: business rows that workers' batches lock in crossing orders).
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.orm import Session

from sa_inbox.store import StoredMessage
from sa_inbox.store.worker import Backoff, Worker
from tests.support.child import say
from tests.support.store_app import StoreApp, make_engine


def batch_log(log_path: str) -> Callable[[str, Sequence[StoredMessage]], None]:
    """The worker's ``on_lease``: each claimed batch appended to LOG, synced before use."""
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 (lives as long as the process)

    def on_lease(token: str, batch: Sequence[StoredMessage]) -> None:
        log.write(json.dumps({"token": token, "ids": [m.id for m in batch], "pid": os.getpid()}))
        log.write("\n")
        log.flush()
        os.fsync(log.fileno())

    return on_lease


def worker_options(options: dict[str, str]) -> dict[str, Any]:
    """The Worker's keywords from the KEY=VALUE options."""
    return {
        "batch_size": int(options.get("batch", "10")),
        "concurrency": int(options.get("concurrency", "1")),
        "visibility_timeout": float(options.get("visibility", "30")),
        "max_attempts": int(options.get("attempts", "5")),
        "ordered": options.get("ordered", "0") == "1",
        "backoff": Backoff(base=0.05, maximum=0.2),
        "poll_interval": 0.05,
        "transaction": options.get("transaction", "message"),
    }


def fails_first(options: dict[str, str], message: StoredMessage) -> bool:
    """Whether ``message`` is one whose first attempt fails (option ``fail_first``)."""
    fail_first = int(options.get("fail_first", "0"))
    payload: dict[str, Any] = message.payload
    return bool(fail_first) and payload.get("seq", 1) % fail_first == 0 and message.attempts == 1


def credited_account(options: dict[str, str], message: StoredMessage) -> int | None:
    """The account the handler credits (option ``accounts``), or ``None``."""
    accounts = int(options.get("accounts", "0"))
    payload: dict[str, Any] = message.payload
    return payload.get("seq", 0) * 7 % accounts if accounts else None


def main(url: str, mode: str, log_path: str, options: dict[str, str]) -> None:
    logging.basicConfig(level=options.get("log", "WARNING"), stream=sys.stderr)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung child's stacks
    engine = make_engine(url)
    app = StoreApp(engine)
    hang_at = int(options["hang_at"]) if "hang_at" in options else None

    def handler(session: Session, message: StoredMessage) -> None:
        payload: dict[str, Any] = message.payload
        if mode in ("hang", "slow") or payload.get("seq") == hang_at:
            say(f"HANDLING {message.message_id}")
            time.sleep(1.0 if mode == "slow" else 600)
        if fails_first(options, message):
            raise RuntimeError(f"first attempt of {message.message_id} fails")
        app.apply(session, message)
        account = credited_account(options, message)
        if account is not None:
            session.execute(app.credit(account))

    worker = Worker(
        app.store.bind(engine), handler, on_lease=batch_log(log_path), **worker_options(options)
    )
    with engine.connect():
        pass
    say("READY")
    sys.stdin.readline()
    worker.run(until_empty=mode == "drain")
    say(json.dumps(dict(worker.stats)))
    engine.dispose()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], dict(a.split("=", 1) for a in sys.argv[4:]))
