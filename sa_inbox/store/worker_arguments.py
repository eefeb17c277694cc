"""The checks of :class:`~sa_inbox.store.Worker`'s arguments, before anything is sent, and
the names kept for one release (``on_claim``, a store with ``claim()`` only)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

from ..checks import NEEDS_BIND, is_asyncio_object
from ..exc import InvalidArgument, InvalidObject, SyncAsyncMismatch
from ..validation import positive_int, positive_seconds
from .protocol import MessageStore, StoredMessage
from .waiting import ThreadWaiting, Waiting

__all__ = [
    "BATCH",
    "MESSAGE",
    "TRANSACTION_MODES",
    "check_positive_int",
    "check_positive_seconds",
    "check_store",
    "check_transaction",
    "check_waiting",
    "lease_of",
    "renamed_hook",
]

#: The worker's transaction modes: one transaction per message, or per leased batch.
MESSAGE, BATCH = "message", "batch"
TRANSACTION_MODES = (MESSAGE, BATCH)


def renamed_hook(
    on_lease: Callable[[str, Sequence[StoredMessage]], None] | None,
    on_claim: Callable[[str, Sequence[StoredMessage]], None] | None,
) -> Callable[[str, Sequence[StoredMessage]], None] | None:
    """``on_lease``, or the deprecated ``on_claim`` given instead (with a warning).

    :raises InvalidArgument: if both are given.
    """
    if on_claim is None:
        return on_lease
    if on_lease is not None:
        raise InvalidArgument("give on_lease only (on_claim is its deprecated name)")
    warnings.warn(
        "Worker(on_claim=...) is renamed on_lease=...; on_claim goes in the next release",
        DeprecationWarning,
        stacklevel=3,
    )
    return on_claim


def lease_of(store: MessageStore) -> Callable[..., list[StoredMessage]]:
    """The store's ``lease``; for a store of the protocol's former shape, which has
    ``claim`` only, that method (with a :class:`DeprecationWarning`)."""
    lease = getattr(store, "lease", None)
    if lease is None and callable(getattr(store, "claim", None)):
        warnings.warn(
            f"{type(store).__name__}.claim() is renamed lease() in the MessageStore protocol; "
            "a store with claim() only is refused in the next release",
            DeprecationWarning,
            stacklevel=4,
        )
        return store.claim  # type: ignore[attr-defined, no-any-return]
    return store.lease


def check_store(store: object) -> None:
    """Refuse a store the worker cannot run on, before anything is sent.

    :raises SyncAsyncMismatch: for a store of the asyncio API (bound to an AsyncEngine).
    :raises InvalidObject: for an unbound :class:`~sa_inbox.InboxStore`, or an object
        without a store's ``lease``, ``complete`` and ``fail`` (an ``Inbox``, an Engine, a
        session factory).
    """
    if is_asyncio_object(store):
        raise SyncAsyncMismatch(
            f"Worker() was given {type(store).__name__}, a store of sa-inbox's asyncio API "
            "(bound to an AsyncEngine): run it with sa_inbox.asyncio.AsyncWorker, or bind the "
            "InboxStore to an Engine for this Worker: store.bind(engine)"
        )
    if getattr(type(store), NEEDS_BIND, False):
        raise InvalidObject(
            "Worker() takes the store bound to an engine, store.bind(engine), not the "
            f"{type(store).__name__} itself"
        )
    missing = [name for name in STORE_METHODS if not callable(getattr(store, name, None))]
    if not any(callable(getattr(store, name, None)) for name in ("lease", "claim")):
        missing.insert(0, "lease")
    if missing:
        raise InvalidObject(
            f"Worker() takes a store, InboxStore(metadata).bind(engine) (or a MessageStore of "
            f"your own), not {type(store).__name__}: it has no {', '.join(missing)}"
        )


#: What a store must have besides ``lease`` (:class:`~sa_inbox.store.MessageStore`).
STORE_METHODS = ("complete", "fail")


def check_waiting(waiting: object, store: object) -> Waiting:
    """``waiting`` (default a new :class:`~sa_inbox.store.waiting.ThreadWaiting`) if it has
    what :class:`~sa_inbox.store.waiting.Waiting` lists and suits ``store``.

    :raises InvalidObject: for an object without those members.
    :raises SyncAsyncMismatch: for an event loop's waiting with a store of the synchronous
        API (its waits need the asyncio worker's greenlets: use
        :class:`~sa_inbox.asyncio.AsyncWorker`).
    """
    if waiting is None:
        return ThreadWaiting()
    members = ("is_set", "set", "clear", "wait", "sleep")
    if not all(callable(getattr(waiting, name, None)) for name in members) or not isinstance(
        getattr(waiting, "on_event_loop", None), bool
    ):
        raise InvalidObject(
            f"waiting must be a sa_inbox.store.waiting.Waiting ({', '.join(members)}, "
            f"on_event_loop), not {type(waiting).__name__}"
        )
    if waiting.on_event_loop and not is_asyncio_object(store):  # type: ignore[attr-defined]
        raise SyncAsyncMismatch(
            f"Worker(waiting={type(waiting).__name__}) waits on an event loop, which needs a "
            "store of the asyncio API in sa_inbox.asyncio.AsyncWorker, not "
            f"{type(store).__name__}"
        )
    return waiting  # type: ignore[return-value]


def check_transaction(transaction: object, store: object) -> None:
    """:raises InvalidArgument: unless ``transaction`` is a mode the store supports."""
    if transaction not in TRANSACTION_MODES:
        raise InvalidArgument(
            f"transaction must be one of {', '.join(map(repr, TRANSACTION_MODES))}, "
            f"not {transaction!r}"
        )
    if transaction == BATCH and not callable(getattr(store, "complete_batch", None)):
        raise InvalidArgument(
            f"transaction='batch' needs a store with complete_batch(); "
            f"{type(store).__name__} has none"
        )


def check_positive_int(value: object, label: str) -> None:
    positive_int(value, label, InvalidArgument)


def check_positive_seconds(value: object, label: str) -> None:
    positive_seconds(value, label, InvalidArgument)
