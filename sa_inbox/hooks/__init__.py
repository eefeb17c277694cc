"""The hook interface: what the runner, the worker, the claim and the purge report.

One small protocol, :class:`InboxHooks`. The default, :data:`NOOP`, does nothing and costs
a method call per event (measured by the repository's ``benchmarks/hooks_cost.py``); the
Prometheus (:mod:`sa_inbox.hooks.prometheus`, extra ``[prometheus]``) and OpenTelemetry
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
event name as ``extra["event"]``): see :data:`EVENTS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Protocol, runtime_checkable

__all__ = [
    "EVENTS",
    "NOOP",
    "InboxHooks",
    "MultiHooks",
    "NoopHooks",
    "SpanName",
]

#: The stable event names of sa-inbox's log records (``extra["event"]``).
EVENTS = {
    "inbox.claim.duplicate": "a delivery met its id already claimed: acked, handler skipped",
    "inbox.claim.collision": "a claim's payload digest differs from the stored one",
    "inbox.claim.failed": "the claim failed (e.g. a collision raised): rolled back, nacked",
    "inbox.handler.failed": "the handler or the database failed: rolled back, nacked",
    "inbox.commit.failed": (
        "the commit failed, e.g. a Galera certification failure (1213) on the last attempt: "
        "rolled back, nacked"
    ),
    "inbox.transaction.retry": "a deadlock or serialization failure: the transaction reruns",
    "inbox.configuration.error": "a configuration error: neither acked nor nacked",
    "inbox.purge.done": "a purge finished (rows deleted, seconds)",
    "inbox.purge.retry": "a purge batch rolled back by a transient error (e.g. Galera 1213) reruns",
    "inbox.database.unavailable": (
        "the database cannot be reached: deliveries held uncounted, the database probed "
        "with back-off (once per outage, WARNING)"
    ),
    "inbox.database.available": "the database answers again: the outage's seconds (INFO)",
    "inbox.connection.invalidated": (
        "a connection left busy or inside a transaction was invalidated instead of going back "
        "to its pool"
    ),
    "inbox.delivery.dead_lettered": (
        "a broker delivery went to the dead-letter queue / stream, unprocessed (reason in "
        'extra["reason"]: a DeadLetterReason value)'
    ),
}

#: Span names of :meth:`InboxHooks.span`: ``inbox.process`` (one delivery, the parent),
#: ``inbox.claim``, ``inbox.handler``, ``inbox.commit`` (per attempt) and ``inbox.ack``.
SpanName = str


@runtime_checkable
class InboxHooks(Protocol):
    """What sa-inbox reports. Every method is called synchronously, on the caller's thread
    (inside its transaction for :meth:`claimed`); none may raise."""

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

    # ``database_outage(consumer_name, *, seconds)``: an outage of the database ended after
    # ``seconds`` (:mod:`sa_inbox.outage`). Optional: hooks without it are not told.

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
        """A context manager around one step of a delivery (see :data:`SpanName`).

        :param headers: the message's headers, for ``inbox.process`` only: where they carry
            a W3C ``traceparent``, the span continues that trace.
        """
        ...


_NULL = nullcontext()


class NoopHooks:
    """Hooks that do nothing: the default."""

    def claimed(
        self, consumer_name: str, *, new: int, duplicates: int, collisions: int, seconds: float
    ) -> None:
        return None

    def handled(self, consumer_name: str, *, seconds: float, failed: bool) -> None:
        return None

    def retried(self, consumer_name: str, *, attempt: int) -> None:
        return None

    def purged(self, table: str, *, rows: int, seconds: float) -> None:
        return None

    def database_outage(self, consumer_name: str, *, seconds: float) -> None:
        return None

    def dead_lettered(self, consumer_name: str, reason: str) -> None:
        return None

    def span(
        self,
        name: SpanName,
        consumer_name: str,
        message_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractContextManager[object]:
        return _NULL


#: The shared no-op hooks.
NOOP = NoopHooks()


class MultiHooks:
    """Several hooks as one: each event goes to each, in order; spans nest in order.

    :param hooks: the hooks, e.g. ``MultiHooks(PrometheusHooks(), OpenTelemetryHooks())``.
    """

    def __init__(self, *hooks: InboxHooks) -> None:
        self.hooks = hooks

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
            outage = getattr(hook, "database_outage", None)
            if outage is not None:
                outage(consumer_name, seconds=seconds)

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
