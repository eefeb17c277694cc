"""sa-inbox on asyncio: the same API on ``AsyncSession``, ``AsyncConnection`` and
``AsyncEngine``, in the manner of :mod:`sqlalchemy.ext.asyncio`.

=====================================  ==============================================
sync (:mod:`sa_inbox`)                  asyncio (:mod:`sa_inbox.asyncio`)
=====================================  ==============================================
``inbox.claim(session, …)``             ``await AsyncInbox(inbox).claim(session, …)``
``claim_many``, ``claim_batch``         ``await AsyncInbox(inbox).claim_many(…)``, …
``install(sessionmaker)``               ``install(async_sessionmaker)``
``register_claim(session, …)``          ``register_claim(async_session, …)``
``handle(Session, …)``                  ``await handle(AsyncSession, …)``
``run_in_transaction``                  ``await run_in_transaction``
``store.receive(session, …)``           ``await AsyncInboxStore(store).receive(…)``
``Worker(store.bind(engine), h)``       ``AsyncWorker(AsyncInboxStore(store).bind(e), h)``
``purge(engine, …)``                    ``await purge(async_engine, …)``
``outbox.publish(session, …)``          ``await AsyncOutbox(outbox).publish(…)``
``OutboxRelay(engine, outbox, pub)``    ``AsyncOutboxRelay(async_engine, outbox, pub)``
=====================================  ==============================================

One implementation serves both: the synchronous core (the dialect SQL, the error
classifiers, the transaction guard, the runner's retries, the worker's state machine) runs in
a greenlet on the async driver, as SQLAlchemy's own ``run_sync`` does, and only the edges are
async (the handler, ack/nack, sleeps, the session factory). Needs ``greenlet`` (the
``sa-inbox[asyncio]`` extra) and an async driver: asyncpg or psycopg 3 (PostgreSQL), aiomysql
(MySQL/MariaDB), aiosqlite (SQLite).
"""

from __future__ import annotations

from .._optional import optional_dependencies

with optional_dependencies(__name__, "asyncio", "greenlet"):
    from .claim import AsyncInbox as AsyncInbox
    from .outbox import AsyncOutbox as AsyncOutbox
    from .outbox import AsyncOutboxRelay as AsyncOutboxRelay
    from .retention import purge as purge
    from .retention import purge_store as purge_store
    from .runner import handle as handle
    from .runner import run_in_transaction as run_in_transaction
    from .session import install as install
    from .session import register_claim as register_claim
    from .store import AsyncHandler as AsyncHandler
    from .store import AsyncInboxStore as AsyncInboxStore
    from .store import AsyncWorker as AsyncWorker


__all__ = [
    "AsyncHandler",
    "AsyncInbox",
    "AsyncInboxStore",
    "AsyncOutbox",
    "AsyncOutboxRelay",
    "AsyncWorker",
    "handle",
    "install",
    "purge",
    "purge_store",
    "register_claim",
    "run_in_transaction",
]
