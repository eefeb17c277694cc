"""A Celery task decorator: a late-acked task whose body runs exactly once in effect.

:func:`inbox_task` registers a task that runs its body through
:func:`sa_inbox.brokers.process`: the claim ``(key, consumer_name)`` is inserted in the same
transaction as the body's change, the transaction commits, and the task returns, after which
the worker acks the message (``acks_late``). A redelivery of a committed task returns without
running the body::

    from celery import Celery
    from sa_inbox.brokers.celery import inbox_task

    app = Celery("billing", broker="amqp://...")

    @inbox_task(app, session_factory=sessionmaker(engine), inbox=inbox, consumer_name="billing")
    def pay(session: Session, account: int, amount: str, idempotency_key: str) -> None:
        session.execute(...)  # committed with the claim; the message is acked after

    # the producer sets the key: a re-sent payment carries the same key
    pay.apply_async(kwargs={"account": 1, "amount": "10.00", "idempotency_key": payment_id})

**The task owns its consumer name** by the task's name (``task.name``: unique in its app,
``module.function`` unless ``name=`` is given; :mod:`sa_inbox.consumers`), whatever the
body's own name: two tasks under one ``consumer_name`` are refused with
:class:`~sa_inbox.exc.ConsumerNameTaken`, and a task renamed in a new release takes the
name over with ``inbox.consumers.hand_over(engine, consumer_name, new_task.name)``.

**The key is a keyword argument the producer sets** (``options.key_source``,
``"idempotency_key"`` by default), passed on to the body with the others; a body without
that parameter (a misspelled key) is refused when it is decorated, so a keyless task is its
producer's, not the consumer's misspelling: each is rejected at once (the other adapters
count a run of keyless deliveries and stop at ``max_keyless``, :mod:`sa_inbox.brokers.keys`;
a task has no way to stop its worker's consumer short of a broadcast control command).
Celery's task id is never the key: a task sent again (the producer retrying ``apply_async``
after a timeout) gets a new id. A message without the key is rejected with ``Reject(reason,
requeue=False)`` (Celery docs, "Tasks" → "Reject"), which RabbitMQ routes to the queue's
dead-letter exchange when the queue has one (``x-dead-letter-exchange``, RabbitMQ docs "Dead
Letter Exchanges"); nothing is processed.

**A database outage costs no retry.** While the database cannot be reached the task waits
in the worker (the message unacked, ``request.retries`` unchanged) while the task's
:class:`~sa_inbox.outage.OutageGate` probes the database with back-off, one WARNING and
one INFO per outage, then runs again (:mod:`sa_inbox.outage`); the worker takes no other
message meanwhile beyond its prefetch. A warm shutdown waits for that task, so for the
database; a cold one leaves the message to the broker. The broker connection is Celery's to
make again (``broker_connection_retry``, kombu's reconnect).

The task is always ``acks_late=True`` (the message is acked after the task returns, so after
the commit; Celery docs, "Tasks" → ``Task.acks_late``, and the FAQ "Should I use retry or
acks_late?") and ``reject_on_worker_lost=True``. Even with ``acks_late``, "the worker will
acknowledge the message if the child process executing the task is terminated (either by
the task calling sys.exit(), or by signal)" (Celery docs, "Tasks", the note under
``acks_late``; the ``task_reject_on_worker_lost`` setting): a pool process SIGKILLed (or
OOM-killed) before the commit would lose the payment. With ``reject_on_worker_lost`` the
message is requeued: a crash after the commit brings it back as a duplicate (acked, the body
not run), a crash before the commit brings it back to be processed. (Checked on Celery 5.7.0
and RabbitMQ 3.10.8: without it, the message of a SIGKILLed prefork pool process is acked and
never runs again; with it, it runs again in the new pool process.) A SIGKILL of the whole
worker needs neither: the broker requeues what the dead connection left unacked. Passing
``acks_late=False`` or ``reject_on_worker_lost=False`` raises
:class:`~sa_inbox.ConfigurationError`.

A failing body is rolled back and the task is retried with :meth:`celery.Task.retry` (a new
message with the same arguments, so the same key), after ``options.retry_delay`` seconds
(1, 2, 4, … up to 60 by default), until ``options.max_deliveries``, then rejected
without requeue. **A rejected message is dropped unless its queue has a dead-letter exchange**
(``x-dead-letter-exchange``, RabbitMQ docs "Dead Letter Exchanges"; Celery's default queues
have none): declare your task queues with one, or rejected tasks (no key, or past the
limit) are lost, though never applied. The delivery count is Celery's ``request.retries``
+ 1, plus 1 if the broker flagged the message ``redelivered`` (AMQP's ``redelivered``;
Celery keeps no other count).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from .._optional import optional_dependencies
from ..backoff import Backoff
from ..claim import Inbox
from ..consumers import owned_as
from ..exc import ConfigurationError, InvalidArgument, InvalidHandler, InvalidObject
from ..handlers import check_handler, is_async_callable
from ..validation import shown
from .delivery import DeadLetterReason, Delivery, Disposition, Settlement
from .keys import read_key
from .options import DeliveryOptions, RetryDelay, options_of
from .process import Options, process
from .startup import NO_HANDLER, check_consumer

with optional_dependencies(__name__, "celery", "celery"):
    from celery import Celery, Task
    from celery.exceptions import Reject

__all__ = [
    "DEFAULT_KEY_KWARG",
    "DEFAULT_RETRY_DELAY",
    "FORMER_KEYWORDS",
    "REQUIRED_OPTIONS",
    "delivery_of",
    "inbox_task",
]

#: The keyword argument carrying the producer's idempotency key, unless
#: ``options.key_source`` names another.
DEFAULT_KEY_KWARG = "idempotency_key"

#: Seconds before the retry of a failed task, from its delivery count: 1 s doubling to 60 s.
DEFAULT_RETRY_DELAY: RetryDelay = Backoff(base=1.0, maximum=60.0).delay

#: The keywords :func:`inbox_task` took before :class:`~sa_inbox.brokers.DeliveryOptions`,
#: each with its place now: refused in ``task_options``, which Celery would take silently.
FORMER_KEYWORDS = {
    "key_kwarg": "key_source",
    "max_deliveries": "max_deliveries",
    "on_settled": "on_settled",
    "retry_backoff": "retry_delay",
    "retry_backoff_max": "retry_delay",
}
#: The fields of :class:`~sa_inbox.brokers.DeliveryOptions`: refused in ``task_options``.
OPTION_FIELDS = frozenset(field.name for field in dataclasses.fields(DeliveryOptions))
#: Why a task refuses ``DeliveryOptions.dead_letter``: ``Reject(requeue=False)`` goes where
#: the task's queue routes it (RabbitMQ, "Dead Letter Exchanges").
NO_DEAD_LETTER = "a rejected task goes to its queue's own dead-letter exchange"
#: Why a task refuses a run of keyless tasks: a task cannot stop its worker's consumer.
NO_KEYLESS_RUN = "a keyless task is rejected at once (a task cannot stop its worker)"

#: The task options :func:`inbox_task` requires (and sets).
REQUIRED_OPTIONS = {"acks_late": True, "reject_on_worker_lost": True}


def inbox_task(
    app: Celery,
    *,
    session_factory: Callable[[], Session],
    inbox: Inbox,
    consumer_name: str,
    options: DeliveryOptions | None = None,
    **task_options: Any,
) -> Callable[[Callable[..., Any]], Task]:
    """Registers ``body(session, *args, **kwargs)`` as a Celery task processed exactly once.

    :param app: the Celery app.
    :param session_factory: a ``sessionmaker``.
    :param inbox: the inbox to claim in.
    :param consumer_name: this consumer's name (``str``; the claim is per consumer).
    :param options: the settings every consumer shares
        (:class:`~sa_inbox.brokers.DeliveryOptions`). ``key_source``: the keyword argument
        holding the producer's key (default ``idempotency_key``). ``max_deliveries``:
        deliveries allowed (see the module's docstring for how they are counted) before the
        task is rejected. ``retry_delay``: ``delay(retries + 1) -> seconds``, the retry's
        ``countdown`` (default 1 s doubling to 60 s, as Celery's own ``retry_backoff``), so
        that a failure that passes (a database restarting) does not spend every delivery in a
        moment. ``on_settled``. ``dead_letter`` is refused (a rejected task goes to its
        queue's dead-letter exchange), and ``max_keyless`` other than its default or None
        (a keyless task is rejected at once).
    :param task_options: passed to ``app.task`` (``name``, ``queue``, ...); ``bind`` is set.
    :returns: a decorator; the body gets the transaction's Session first, then the task's
        arguments (the key included); it must not commit. The task returns the body's result
        (None for a duplicate).
    :raises ConfigurationError: at once, for an ``app`` that is no Celery app
        (:class:`~sa_inbox.exc.InvalidObject`), if ``task_options`` turn ``acks_late`` or
        ``reject_on_worker_lost`` off; for a session factory of the asyncio half or
        ``Session.begin`` (:class:`~sa_inbox.exc.InvalidSessionFactory`), an AsyncInbox
        (:class:`~sa_inbox.exc.SyncAsyncMismatch`), ``options`` that are not a
        DeliveryOptions or set what a task cannot serve, a former keyword of this function or
        a DeliveryOptions field in ``task_options`` (:class:`~sa_inbox.exc.InvalidArgument`);
        when the body is decorated, for a body without the ``key_source`` parameter (and no
        ``**kwargs``: a misspelled key) or an ``async def`` one.

    The registered task has ``task.check()``: the readiness check (the inbox table exists,
    the session factory makes Sessions, the engine is not autocommit; returns None or
    raises :class:`~sa_inbox.ConfigurationError`), for the worker's start-up (e.g. a
    ``celery.signals.worker_init`` handler) or a health endpoint.

    When the task runs it raises :class:`celery.exceptions.Reject` (``requeue=False``) for a
    message without a valid key or past ``max_deliveries``, :class:`celery.exceptions.Retry`
    (from :meth:`celery.Task.retry`) when the body failed, and the runner's configuration
    errors (see :func:`sa_inbox.handle`) unsettled.
    """
    for option, required in REQUIRED_OPTIONS.items():
        if task_options.get(option, required) is not required:
            raise ConfigurationError(
                f"inbox_task requires {option}=True: without it a message is acked before "
                "the commit or when the worker dies, and is lost"
            )
    entry = "inbox_task()"
    if not callable(getattr(app, "task", None)):
        raise InvalidObject(f"{entry} takes a Celery app first, not {shown(app)}")
    misplaced = sorted((FORMER_KEYWORDS.keys() | OPTION_FIELDS) & task_options.keys())
    if misplaced:
        fields = dict.fromkeys(f"{FORMER_KEYWORDS.get(name, name)}=..." for name in misplaced)
        verb = (
            "is not a Celery task option" if len(misplaced) == 1 else "are not Celery task options"
        )
        raise InvalidArgument(
            f"{entry}: {', '.join(misplaced)} {verb}: pass "
            f"options=DeliveryOptions({', '.join(fields)})"
        )
    shared = options_of(
        options,
        entry,
        refused=[("dead_letter", NO_DEAD_LETTER), ("max_keyless", NO_KEYLESS_RUN)],
    )
    readiness = check_consumer(
        entry,
        session_factory=session_factory,
        inbox=inbox,
        handler=NO_HANDLER,
        consumer_name=consumer_name,
        max_deliveries=shared.limit(),
        asynchronous=False,
    )
    config = _Config(
        Options.of(
            session_factory, readiness.inbox, consumer_name, shared.limit(), shared.on_settled
        ),
        key_kwarg=shared.key(DEFAULT_KEY_KWARG),
        retry_delay=shared.delay(DEFAULT_RETRY_DELAY),
    )

    def decorator(body: Callable[..., Any]) -> Task:
        _check_body(body, config.key_kwarg)

        def run(task: Task, *args: Any, **kwargs: Any) -> Any:
            return _run(task, config, body, args, kwargs)

        run.__name__, run.__qualname__ = body.__name__, body.__qualname__
        run.__module__, run.__doc__ = body.__module__, body.__doc__
        registered: Task = app.task(bind=True, **{**task_options, **REQUIRED_OPTIONS})(run)
        registered.check = readiness.check
        return registered

    return decorator


def _check_body(body: Callable[..., Any], key_kwarg: str) -> None:
    """Refuse a body that cannot take ``(session, ...)`` or the key keyword argument: a
    misspelled ``key_kwarg`` is found when the task is registered, not at every message.

    :raises InvalidHandler: if ``body`` is not callable or cannot take a session first.
    :raises AsyncHandlerError: if it is ``async def``.
    :raises InvalidArgument: if it has no parameter ``key_kwarg`` and no ``**kwargs``.
    """
    if not callable(body) or is_async_callable(body):
        check_handler(body, ("session",))  # raises: not callable, or async def
    try:
        signature = inspect.signature(body)
    except (TypeError, ValueError):
        return
    try:
        signature.bind_partial(None)  # the session, first
    except TypeError as exc:
        raise InvalidHandler(
            f"inbox_task(): the task's function {body.__qualname__}{signature} cannot take the "
            f"session as its first argument ({exc})"
        ) from exc
    parameters = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return
    names = [p.name for p in parameters if p.kind is not p.POSITIONAL_ONLY]
    if key_kwarg not in names:
        raise InvalidArgument(
            f"inbox_task(): the task's function {body.__qualname__} takes no keyword argument "
            f"{key_kwarg!r} (options.key_source), only {', '.join(map(repr, names))}: every task "
            "would be rejected for a missing key; name the body's key parameter in "
            "options.key_source"
        )


@dataclass(frozen=True)
class _Config:
    process: Options
    key_kwarg: str
    retry_delay: RetryDelay


def delivery_of(task: Task, kwargs: dict[str, Any], key_kwarg: str) -> Delivery:
    """The :class:`Delivery` of the task's current message.

    :param task: the bound task (its ``request`` is the current message's).
    :param kwargs: the task's keyword arguments.
    :param key_kwarg: the one holding the producer's key; absent or None gives a Delivery
        without a key (dead-lettered by :func:`~sa_inbox.brokers.process`).
    :returns: the key (a ``str`` argument, or ``bytes`` decoded as UTF-8; another type,
        an ``int`` from JSON, is no key: a :attr:`~sa_inbox.brokers.Delivery.key_error`),
        the delivery count (``request.retries``
        + 1, + 1 if the broker flagged the message ``redelivered``), the kwargs as headers,
        the task id as ``broker_ref`` (for logs only). Raises nothing.
    """
    request = task.request
    key, key_error = read_key(kwargs.get(key_kwarg))
    redelivered = bool((request.delivery_info or {}).get("redelivered"))
    return Delivery(
        message_id=key,
        key_error=key_error,
        body=b"",
        delivery_count=int(request.retries or 0) + 1 + int(redelivered),
        headers=dict(kwargs),
        broker_ref=f"task_id={request.id}",
    )


class _Decision:
    """A settler that records the decision; the task acts on it after :func:`process`
    returned (Celery settles by how the task returns or what it raises)."""

    def __init__(self) -> None:
        self.dead_letter_detail: str | None = None

    def ack(self) -> None:
        """Nothing yet: the worker acks when the task returns (``acks_late``)."""

    def retry(self) -> None:
        """Nothing yet: the task raises :meth:`celery.Task.retry` after."""

    def dead_letter(self, reason: DeadLetterReason, detail: str) -> None:
        self.dead_letter_detail = detail


def _run(
    task: Task,
    config: _Config,
    body: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    returned: list[Any] = []

    def call(session: Session, delivery: Delivery) -> None:
        returned[:] = [body(session, *args, **kwargs)]

    # the task owns the consumer name by the task's name: unique in its app, the same in
    # every release (sa_inbox.consumers), whatever the body's own name
    handler = owned_as(task.name, call)
    decision = _Decision()
    delivery = delivery_of(task, kwargs, config.key_kwarg)
    settlement = process(delivery, decision, handler=handler, **config.process.kwargs())
    return _settle(task, settlement, decision, returned, config)


def _settle(
    task: Task,
    settlement: Settlement,
    decision: _Decision,
    returned: list[Any],
    config: _Config,
) -> Any:
    """Returns (the worker acks), rejects without requeue, or retries."""
    if settlement.disposition is Disposition.PROCESSED:
        return returned[0]
    if settlement.disposition is Disposition.DUPLICATE:
        return None
    if settlement.disposition is Disposition.DEAD_LETTERED:
        raise Reject(decision.dead_letter_detail, requeue=False)
    error = settlement.error if isinstance(settlement.error, Exception) else None
    # max_retries=None would mean the task's own (3 by default): past it Celery fails the task
    # and acks it, so a poison message would skip the dead-letter path; the inbox counts.
    retries = int(task.request.retries or 0)
    countdown = config.retry_delay(retries + 1)
    raise task.retry(exc=error, countdown=countdown, max_retries=config.process.max_deliveries)
