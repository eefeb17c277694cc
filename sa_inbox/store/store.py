"""The inbox store: receive a message durably (deduplicated), process it later.

The store-then-process half of the inbox pattern. A consumer only *receives*: it stores the
raw message with the same insert-or-skip as :meth:`sa_inbox.Inbox.claim` (so a redelivery
is skipped), commits, and acks at once. Workers (:mod:`sa_inbox.store.worker`) later *lease*
stored rows in short transactions, run the handler with the business change and mark the row
``done`` in one transaction.

Row states::

    pending ──lease──▶ processing ──handler commits──▶ done
       ▲                 │  │
       │   error, retry  │  └── error after max_attempts ──▶ dead
       └─────────────────┘          (replay: dead/done ──▶ pending)

The table is defined in :mod:`sa_inbox.store.schema`, the worker's view of a store in
:mod:`sa_inbox.store.protocol`, the worker in :mod:`sa_inbox.store.worker`.

The class is composed of one part per role, each a module of this package:
:mod:`~sa_inbox.store.receive` (the receive), :mod:`~sa_inbox.store.transitions` (lease,
complete, fail, release, reap), :mod:`~sa_inbox.store.admin` (replay, counts), on the
state of :mod:`~sa_inbox.store.base`; the statements on leased rows are those of
:mod:`~sa_inbox.store.leases`, shared with the outbox relay; :class:`BoundStore` is in
:mod:`~sa_inbox.store.bound`.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from ..checks import check_session_factory, require
from .admin import StoreAdmin
from .bound import BoundStore
from .receive import StoreReceive, receive_insert
from .transitions import StoreTransitions

__all__ = ["BoundStore", "InboxStore", "receive_insert"]


class InboxStore(StoreReceive, StoreTransitions, StoreAdmin):
    """The inbox store, defined on the caller's :class:`~sqlalchemy.MetaData`.

    :param metadata: the MetaData the table joins (see :func:`inbox_store_table`).
    :param table_name: the table's name.
    :param schema: the table's schema, or ``None``.
    :param message_id_length: length in characters of ``message_id`` and ``consumer_name``.
    :param on_collision: what a receive given a ``payload_hash`` does when the id is already
        stored with a different payload (see :class:`~sa_inbox.Inbox`): ``"raise"``
        (default) or ``"record"``.
    :param consumers: record which handler owns each consumer name in the consumers table
        (``inbox_consumers``, on the same MetaData; :mod:`sa_inbox.consumers`): a worker
        whose handler is not the owner is refused before it leases anything. ``False``: no
        such check.
    :param json_serializer: turns a received payload into its JSON text, as
        ``create_engine(json_serializer=...)`` does (e.g. ``functools.partial(json.dumps,
        default=str)`` to store ``Decimal`` amounts as strings); it may return text or UTF-8
        bytes. Default :func:`json.dumps` (NaN and Infinity refused). The worker reads
        payloads through the engine's JSON type: give the engine a ``json_deserializer`` to
        read them back as other types.
    :raises InvalidTable: for a ``consumers`` that is not a bool (as for
        :class:`~sa_inbox.Inbox`).
    :raises InvalidArgument: for a ``json_serializer`` that is not callable.

    Example::

        store = InboxStore(Base.metadata)
        with Session.begin() as session:          # the consumer: store, commit, ack
            store.receive(session, msg.id, msg.body, aggregate_id=msg.key)
        ack(msg)

        Worker(store.bind(engine), handle_payment).run()    # the worker, elsewhere

    Receive runs in the caller's transaction; every other operation (lease, complete, fail,
    release, reap, replay) runs in its own short transaction on an engine.
    """

    __sa_inbox_needs_bind__ = True

    def bind(
        self, engine: sa.Engine, session_factory: Callable[[], Session] | None = None
    ) -> BoundStore:
        """This store on ``engine``, as the :class:`MessageStore` a worker uses.

        :param session_factory: makes the Session handed to the handler (default
            ``sessionmaker(engine)``); it must be bound to ``engine``'s database.
        :raises SyncAsyncMismatch: for an ``AsyncEngine`` (use
            ``AsyncInboxStore(store).bind(async_engine)`` and the
            :class:`~sa_inbox.asyncio.AsyncWorker`).
        :raises InvalidSessionFactory: for a factory the worker cannot use (an
            ``async_sessionmaker``, ``sessionmaker.begin``).
        """
        engine = require(
            engine,
            sa.Engine,
            "engine",
            entry="InboxStore.bind()",
            instead="for an AsyncEngine, AsyncInboxStore(store).bind(async_engine) runs with the "
            "AsyncWorker",
        )
        if session_factory is not None:
            check_session_factory(session_factory, entry="InboxStore.bind()", asynchronous=False)
        return BoundStore(self, engine, session_factory or sessionmaker(engine))
