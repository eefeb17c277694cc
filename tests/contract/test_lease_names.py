"""The lease's former names, kept for one release: ``claim()`` of every store and of the
:class:`~sa_inbox.store.InboxStore` itself, the worker's ``on_claim``, and a store of the
protocol's former shape (``claim()`` only). Each still leases the rows, with a
:class:`DeprecationWarning`; the rows are asserted on every store.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from sa_inbox.exc import InvalidArgument
from sa_inbox.store import DONE, PROCESSING, MessageStore, StoredMessage
from sa_inbox.store.protocol import Handler
from sa_inbox.store.worker import Worker

from .stores import DatabaseStore, StoreUnderTest

LEASE = {
    "consumer_name": "default",
    "limit": 10,
    "visibility_timeout": 10,
    "max_attempts": 3,
    "ordered": False,
}


def do_nothing(session: Any, message: StoredMessage) -> None:
    """A handler that changes nothing (a function: a lambda cannot own a consumer name)."""


def test_claim_is_the_deprecated_name_of_lease(sut: StoreUnderTest) -> None:
    sut.receive("m-1", 1)
    sut.receive("m-2", 2)
    with pytest.warns(DeprecationWarning, match=r"claim\(\) is renamed lease\(\)"):
        old = sut.store.claim(claimed_by="w#1", now=sut.clock(), **LEASE)  # type: ignore[attr-defined]
    assert [m.message_id for m in old] == ["m-1", "m-2"]
    assert {sut.row(m).status for m in ("m-1", "m-2")} == {PROCESSING}
    assert {sut.row(m).claimed_by for m in ("m-1", "m-2")} == {"w#1"}
    assert sut.store.lease(claimed_by="w#2", now=sut.clock(), **LEASE) == [], "already leased"


def test_the_unbound_store_keeps_claim_for_a_release(sut: StoreUnderTest) -> None:
    if not isinstance(sut, DatabaseStore):
        pytest.skip("InboxStore.claim(engine, ...) is the database store's")
    sut.receive("m-1", 1)
    with pytest.warns(DeprecationWarning, match=r"InboxStore\.claim\(\) is renamed lease\(\)"):
        (message,) = sut.app.store.claim(sut.app.engine, claimed_by="w#1", now=sut.clock(), **LEASE)
    assert (message.message_id, sut.row("m-1").status) == ("m-1", PROCESSING)


def test_on_claim_is_the_deprecated_name_of_on_lease(sut: StoreUnderTest) -> None:
    sut.receive("m-1", 1)
    leased: list[tuple[str, list[str]]] = []

    def record(token: str, batch: Any) -> None:
        leased.append((token, [m.message_id for m in batch]))

    with pytest.warns(DeprecationWarning, match=r"on_claim=\.\.\.\) is renamed on_lease"):
        worker = Worker(sut.store, do_nothing, clock=sut.clock, on_claim=record)
    worker.run(until_empty=True, handle_signals=False)
    assert [ids for _, ids in leased] == [["m-1"]]
    assert sut.row("m-1").status == DONE
    with pytest.raises(InvalidArgument, match="on_lease only"):
        Worker(sut.store, do_nothing, on_lease=record, on_claim=record)


class FormerShapeStore:
    """A store written against the protocol's former shape: ``claim`` and no ``lease``."""

    def __init__(self, inner: MessageStore) -> None:
        self.inner = inner

    def claim(self, **kw: Any) -> list[StoredMessage]:
        return self.inner.lease(**kw)

    def complete(self, message: StoredMessage, handler: Handler, *, now: datetime.datetime) -> bool:
        return self.inner.complete(message, handler, now=now)

    def __getattr__(self, name: str) -> Any:
        if name == "lease":
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_a_store_with_claim_only_still_runs_with_a_warning(sut: StoreUnderTest) -> None:
    sut.receive("m-1", 1)
    sut.receive("m-2", 2)
    store = FormerShapeStore(sut.store)
    with pytest.warns(DeprecationWarning, match=r"FormerShapeStore\.claim\(\) is renamed lease"):
        worker = Worker(store, do_nothing, clock=sut.clock)  # type: ignore[arg-type]
    summary = worker.run(until_empty=True, handle_signals=False)
    assert summary.processed == 2
    assert {sut.row(m).status for m in ("m-1", "m-2")} == {DONE}
