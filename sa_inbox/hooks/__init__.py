"""The hook interface: what the runner, the worker, the claim and the purge report.

:class:`InboxHooks` is a base class whose every method does nothing: subclass it and
override the events you want; an event added in a later release is a no-op for your class
until you override it. :data:`NOOP` is the default. The Prometheus
(:mod:`sa_inbox.hooks.prometheus`, extra ``[prometheus]``) and OpenTelemetry
(:mod:`sa_inbox.hooks.opentelemetry`, extra ``[opentelemetry]``) implementations count and
time, and the latter traces. Pass one as ``Inbox(..., hooks=...)`` (the claim, the session
extension and :func:`sa_inbox.handle` use the inbox's), ``Worker(..., hooks=...)`` and
``purge(..., hooks=...)``; combine several with :class:`MultiHooks`.

The broker adapters report each dead letter (:meth:`InboxHooks.dead_lettered`), from the
one place every adapter settles through (:func:`sa_inbox.brokers.process`), with the inbox's
hooks.

A hook must not raise: it runs inside the caller's transaction (an exception would roll the
business change back). The implementations here never do.

Structured log events (logger ``sa_inbox.*``, the id in the text and in ``extra``, with the
event name as ``extra["event"]``): see :data:`EVENTS`. Every event, span and metric name is
in one table, :mod:`sa_inbox.hooks.names`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Any

from ..exc import InvalidObject
from . import names

__all__ = [
    "EVENTS",
    "HOOK_METHODS",
    "NOOP",
    "InboxHooks",
    "MultiHooks",
    "SpanName",
    "as_hooks",
]

#: The stable event names of sa-inbox's log records (``extra["event"]``) and what each means
#: (the events of :data:`sa_inbox.hooks.names.NAMES`).
EVENTS = {event.name: event.description for event in names.EVENTS}

#: Span names of :meth:`InboxHooks.span`: ``inbox.process`` (one delivery, the parent),
#: ``inbox.claim``, ``inbox.handler``, ``inbox.commit`` (per attempt) and ``inbox.ack``.
SpanName = str

_NULL = nullcontext()


class InboxHooks:
    """What sa-inbox reports; every method here does nothing.

    Subclass it and override the events you want::

        class Failures(InboxHooks):
            def handled(self, consumer_name, *, seconds, failed):
                if failed:
                    alert(consumer_name)

    Every method is called synchronously, on the caller's thread (inside its transaction
    for :meth:`claimed`); none may raise.
    """

    def claimed(
        self, consumer_name: str, *, new: int, duplicates: int, collisions: int, seconds: float
    ) -> None:
        """A claim (one id) or batch claim finished.

        :param consumer_name: the consumer.
        :param new: ids newly claimed.
        :param duplicates: ids already claimed (redeliveries), collisions excluded.
        :param collisions: ids that collided (raised or recorded).
        :param seconds: the claim's wall time, in seconds.
        """

    def handled(self, consumer_name: str, *, seconds: float, failed: bool) -> None:
        """A handler ran (runner or worker): its wall time in seconds; ``failed`` if it (or
        its transaction) raised and was rolled back."""

    def retried(self, consumer_name: str, *, attempt: int) -> None:
        """A transaction is run again after a transient error; ``attempt`` is the one that
        failed (1-based)."""

    def purged(self, table: str, *, rows: int, seconds: float) -> None:
        """A purge of ``table`` deleted ``rows`` rows in ``seconds`` seconds."""

    def database_outage(self, consumer_name: str, *, seconds: float) -> None:
        """An outage of the database ended after ``seconds`` seconds (:mod:`sa_inbox.outage`)."""

    def dead_lettered(self, consumer_name: str, reason: str) -> None:
        """A broker delivery was dead-lettered: the adapter published it to the dead-letter
        queue / stream (or rejected it to the broker's) and settled it, unprocessed.

        :param consumer_name: the consumer.
        :param reason: why, a :class:`~sa_inbox.brokers.DeadLetterReason` value
            (``missing_message_id``, ``invalid_message_id``, ``delivery_limit``).
        """

    def span(
        self,
        name: SpanName,
        consumer_name: str,
        message_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractContextManager[object]:
        """A context manager around one step of a delivery (see :data:`SpanName`); here one
        that does nothing.

        :param headers: the message's headers, for ``inbox.process`` only: where they carry
            a W3C ``traceparent``, the span continues that trace.
        """
        return _NULL


#: The events of :class:`InboxHooks`: its public methods, in definition order.
HOOK_METHODS = tuple(name for name in vars(InboxHooks) if not name.startswith("_"))

#: The shared no-op hooks: the default.
NOOP = InboxHooks()


def as_hooks(hooks: object) -> InboxHooks:
    """``hooks`` as :class:`InboxHooks`: :data:`NOOP` for ``None``, an instance as it is.

    An object of another class (hooks written for the former protocol) is adapted once,
    with a :class:`DeprecationWarning`: the methods it has are called, the others are the
    base class's no-ops. Such objects are refused in the next release: subclass
    :class:`InboxHooks`.

    :raises InvalidObject: for a class (``PrometheusHooks`` for ``PrometheusHooks()``) and
        for an object with none of the events (an Inbox, a RelayMetrics...): hooks that
        would never be called.
    """
    if hooks is None:
        return NOOP
    if isinstance(hooks, InboxHooks):
        return hooks
    if isinstance(hooks, type):
        raise InvalidObject(
            f"hooks= takes an instance, not the class {hooks.__name__}: pass {hooks.__name__}()"
        )
    if not any(callable(getattr(hooks, name, None)) for name in HOOK_METHODS):
        raise InvalidObject(
            f"hooks= takes an InboxHooks, not {type(hooks).__name__}, which has none of its "
            f"events ({', '.join(HOOK_METHODS)}): subclass sa_inbox.hooks.InboxHooks"
        )
    warnings.warn(
        f"{type(hooks).__name__} does not subclass sa_inbox.hooks.InboxHooks: its missing "
        "events are taken as no-ops for now, and such hooks are refused in the next "
        "release; subclass InboxHooks",
        DeprecationWarning,
        stacklevel=3,
    )
    return _Adapted(hooks)


class _Adapted(InboxHooks):
    """An object of the former hook protocol, its missing events the base class's."""

    def __init__(self, hooks: object) -> None:
        self.hooks = hooks
        for name in HOOK_METHODS:
            own = getattr(hooks, name, None)
            if callable(own):
                setattr(self, name, own)


class MultiHooks(InboxHooks):
    """Several hooks as one: each event goes to each, in order; spans nest in order.

    :param hooks: the hooks, e.g. ``MultiHooks(PrometheusHooks(), OpenTelemetryHooks())``.
    """

    def __init__(self, *hooks: InboxHooks) -> None:
        self.hooks = tuple(as_hooks(hook) for hook in hooks)

    def claimed(
        self, consumer_name: str, *, new: int, duplicates: int, collisions: int, seconds: float
    ) -> None:
        for hook in self.hooks:
            hook.claimed(
                consumer_name,
                new=new,
                duplicates=duplicates,
                collisions=collisions,
                seconds=seconds,
            )

    def handled(self, consumer_name: str, *, seconds: float, failed: bool) -> None:
        for hook in self.hooks:
            hook.handled(consumer_name, seconds=seconds, failed=failed)

    def retried(self, consumer_name: str, *, attempt: int) -> None:
        for hook in self.hooks:
            hook.retried(consumer_name, attempt=attempt)

    def purged(self, table: str, *, rows: int, seconds: float) -> None:
        for hook in self.hooks:
            hook.purged(table, rows=rows, seconds=seconds)

    def database_outage(self, consumer_name: str, *, seconds: float) -> None:
        for hook in self.hooks:
            hook.database_outage(consumer_name, seconds=seconds)

    def dead_lettered(self, consumer_name: str, reason: str) -> None:
        for hook in self.hooks:
            hook.dead_lettered(consumer_name, reason)

    def span(
        self,
        name: SpanName,
        consumer_name: str,
        message_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractContextManager[object]:
        stack = ExitStack()
        for hook in self.hooks:
            stack.enter_context(hook.span(name, consumer_name, message_id, headers))
        return stack


def __getattr__(name: str) -> Any:
    if name == "NoopHooks":
        warnings.warn(
            "sa_inbox.hooks.NoopHooks is InboxHooks, whose methods do nothing: subclass "
            "InboxHooks; NoopHooks goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return InboxHooks
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
