"""Hooks are a base class with no-op events: a user's class overriding one event keeps
working when sa-inbox reports more events (on SQLite, embedded: real claims and a real
outage gate)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import Inbox, handle
from sa_inbox.hooks import HOOK_METHODS, NOOP, InboxHooks, MultiHooks, as_hooks
from sa_inbox.outage import OutageGate, Verdict


class Claims(InboxHooks):
    """A user's hooks: one event overridden, the others inherited."""

    def __init__(self) -> None:
        self.claims: list[tuple[str, int, int]] = []

    def claimed(
        self, consumer_name: str, *, new: int, duplicates: int, collisions: int, seconds: float
    ) -> None:
        self.claims.append((consumer_name, new, duplicates))


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/hooks.db")
    yield engine
    engine.dispose()


def arguments(name: str) -> tuple[list[object], dict[str, object]]:
    """Arguments of the right names for the event ``name`` (by its signature)."""
    args: list[object] = []
    kwargs: dict[str, object] = {}
    for parameter in list(inspect.signature(getattr(InboxHooks, name)).parameters.values())[1:]:
        value: object = "x" if parameter.annotation in ("str", "SpanName") else 1
        if parameter.default is not inspect.Parameter.empty:
            continue
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[parameter.name] = value
        else:
            args.append(value)
    return args, kwargs


def test_every_event_of_the_base_class_is_a_no_op() -> None:
    assert set(HOOK_METHODS) >= {
        "claimed",
        "handled",
        "retried",
        "purged",
        "database_outage",
        "dead_lettered",
        "span",
    }
    for name in HOOK_METHODS:
        args, kwargs = arguments(name)
        result = getattr(NOOP, name)(*args, **kwargs)
        if name == "span":
            with result:
                pass
        else:
            assert result is None


def test_a_class_overriding_one_event_reports_it_and_ignores_the_others(
    engine: sa.Engine,
) -> None:
    hooks = Claims()
    metadata = sa.MetaData()
    inbox = Inbox(metadata, hooks=hooks, consumers=False)
    metadata.create_all(engine)
    factory = sessionmaker(engine)
    applied: list[str] = []
    for _ in range(2):  # a delivery, then its redelivery
        result = handle(
            factory,
            inbox,
            "m-1",
            "billing",
            lambda session: applied.append("m-1"),
            ack=lambda: None,
            nack=lambda: None,
        )
        assert result.error is None
    assert applied == ["m-1"]
    assert hooks.claims == [("billing", 1, 0), ("billing", 0, 1)]
    with Session(engine) as session:
        assert inbox.is_processed(session, "m-1", "billing")
    for name in HOOK_METHODS:  # every other event reaches the class without an error
        args, kwargs = arguments(name)
        getattr(MultiHooks(hooks), name)(*args, **kwargs)


def test_an_event_added_to_the_base_class_reaches_existing_user_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    told: list[str] = []
    monkeypatch.setattr(
        InboxHooks,
        "lease_expired",
        lambda self, consumer_name: told.append(consumer_name),
        raising=False,
    )
    hooks = Claims()
    hooks.lease_expired("billing")  # type: ignore[attr-defined]
    assert told == ["billing"]


def test_an_outage_ends_on_hooks_that_do_not_override_database_outage() -> None:
    hooks = Claims()
    now = [0.0]

    def sleep(seconds: float) -> bool:
        now[0] += seconds
        return False

    failures = iter([ConnectionResetError(), None])

    def probe() -> None:
        failure = next(failures)
        if failure is not None:
            raise failure

    gate = OutageGate("billing", hooks=hooks, sleep=sleep, clock=lambda: now[0])
    assert gate.wait(ConnectionResetError(), probe) is Verdict.RECOVERED
    assert gate.outages == 1 and hooks.claims == []


class FormerProtocol:
    """Hooks written for the former protocol: no base class, some events missing."""

    def __init__(self) -> None:
        self.retries: list[int] = []

    def retried(self, consumer_name: str, *, attempt: int) -> None:
        self.retries.append(attempt)


def test_hooks_of_the_former_protocol_are_adapted_with_a_deprecation_warning() -> None:
    former = FormerProtocol()
    with pytest.warns(DeprecationWarning, match="subclass InboxHooks"):
        hooks = as_hooks(former)
    assert isinstance(hooks, InboxHooks)
    hooks.retried("billing", attempt=2)
    hooks.database_outage("billing", seconds=1.0)  # missing there: a no-op
    with hooks.span("inbox.process", "billing", "m-1"):
        pass
    assert former.retries == [2]
    with pytest.warns(DeprecationWarning):
        multi = MultiHooks(FormerProtocol())
    multi.dead_lettered("billing", "delivery_limit")


def test_noop_hooks_is_a_deprecated_name_of_the_base_class() -> None:
    import sa_inbox.hooks

    with pytest.warns(DeprecationWarning, match="NoopHooks"):
        alias = sa_inbox.hooks.NoopHooks
    assert alias is InboxHooks
    assert as_hooks(None) is NOOP
