"""The asyncio worker process for the store tests:
``python -m tests.backends.asyncio.store_child ASYNC_URL MODE LOG [KEY=VALUE…]``.

:mod:`tests.backends.store.child` with an :class:`~sa_inbox.asyncio.AsyncWorker` on an
AsyncEngine: the same barrier, batch log, options and modes (``drain``, ``serve``, ``hang``,
``slow``), an ``async def`` handler writing the effect row on its AsyncSession. One more
option: ``hang_at=SEQ`` processes every message but hangs in the handler of the one whose
seq is SEQ (printing ``HANDLING <message_id>``), so that a kill lands mid-batch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from sa_inbox.asyncio import AsyncInboxStore, AsyncWorker
from sa_inbox.store import StoredMessage
from tests.backends.store.child import (
    batch_log,
    credited_account,
    fails_first,
    say,
    worker_options,
)
from tests.support.store_app import StoreApp, make_async_engine


async def main(url: str, mode: str, log_path: str, options: dict[str, str]) -> None:
    logging.basicConfig(level=options.get("log", "WARNING"), stream=sys.stderr)
    engine = make_async_engine(url)
    app = StoreApp(engine.sync_engine)  # its tables; every statement below is awaited
    hang_at = int(options["hang_at"]) if "hang_at" in options else None

    async def handler(session: AsyncSession, message: StoredMessage) -> None:
        payload: dict[str, Any] = message.payload
        if mode in ("hang", "slow") or payload.get("seq") == hang_at:
            say(f"HANDLING {message.message_id}")
            await asyncio.sleep(600 if mode != "slow" else 1.0)
        if fails_first(options, message):
            raise RuntimeError(f"first attempt of {message.message_id} fails")
        await app.apply_async(session, message)
        account = credited_account(options, message)
        if account is not None:
            await session.execute(app.credit(account))

    worker = AsyncWorker(
        AsyncInboxStore(app.store).bind(engine),
        handler,
        on_lease=batch_log(log_path),
        **worker_options(options),
    )
    async with engine.connect():
        pass
    say("READY")
    sys.stdin.readline()
    await worker.run(until_empty=mode == "drain")
    say(json.dumps(dict(worker.stats)))
    await engine.dispose()


if __name__ == "__main__":
    asyncio.run(
        main(sys.argv[1], sys.argv[2], sys.argv[3], dict(a.split("=", 1) for a in sys.argv[4:]))
    )
