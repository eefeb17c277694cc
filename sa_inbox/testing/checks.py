"""The checks themselves: the inbox pattern's three tests (sequential duplicate, concurrent
duplicate, crash between commit and ack), a key check before them and a crash before the
commit after them, each asserting on the message's business state read through the user's
own ``state(session, message)``.

The sequential duplicate sets the baseline: the state of a message never delivered
(``before``) and of one delivered once (``once``). Every later check uses a new message and
expects its state to go from ``before`` to ``once`` whatever the deliveries, so
``state(session, message)`` must describe that message's own effect (its ledger rows, the
balance of an account of its own), the same for every message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..exc import InvalidArgument
from .child import ChildReport, can_fork
from .messages import BROKER_FIELDS, BrokerDelivery, Message
from .modes import (
    ACK_BEFORE_COMMIT,
    CHECK_THEN_INSERT,
    CLAIM_COMMITTED_APART,
    CONCURRENT_ERROR,
    CONCURRENT_HANG,
    CRASH_LOST,
    CRASH_REDELIVERY_APPLIED,
    DELIVERY_FAILED,
    DUPLICATE_APPLIED,
    DUPLICATE_NOT_ACKED,
    HANDLER_ENDS_TRANSACTION,
    KEY_CHANGES_PER_DELIVERY,
    KEY_SHARED,
    MISSING_KEY,
    NO_EFFECT,
    NO_UNIQUE_CONSTRAINT,
    NOT_ACKED,
    OUTBOUND_NOT_CALLED,
    SIDE_EFFECT_REPEATS,
    WORK_LEFT_RUNNING,
)
from .observe import Gate
from .report import Report
from .run import NOTHING, Delivered, Run

__all__ = [
    "check_concurrent",
    "check_crash_after_commit",
    "check_crash_before_commit",
    "check_key",
    "check_outbound_seen",
    "check_sequential",
]


def _names(fields: Sequence[str]) -> str:
    return ", ".join(name.replace("_", " ") for name in fields)


def key_fields(run: Run, delivery: BrokerDelivery) -> list[str]:
    """The broker fields whose change alone changes the target's key of ``delivery``."""
    key = run.target.key(delivery)
    return [f for f in BROKER_FIELDS if run.target.key(run.broker.varied(delivery, f)) != key]


# -- key -------------------------------------------------------------------------------------


def check_key(run: Run, report: Report) -> None:
    """The consumer's key of one message, fed deliveries whose broker metadata differ: a
    producer's retry, a redelivery, and each broker field changed alone (no SQL)."""
    if not run.target.knows_key:
        report.skip("key", "a consumer of your own reads its key itself: checked by effect below")
        return
    message = run.new_message()
    first = run.broker.first(message)
    key = run.target.key(first)
    if key is None:
        report.add(
            "key",
            MISSING_KEY,
            f"the consumer found no key in the message the factory made "
            f"(message_id {message.message_id!r}, headers {sorted(message.headers)}): "
            "every delivery of it would be dead-lettered unprocessed",
        )
        return
    others = {
        "a producer's retry": run.target.key(run.broker.producer_retry(message)),
        "the broker's redelivery": run.target.key(run.broker.redelivery(first)),
    }
    changed = key_fields(run, first)
    differing = {what: k for what, k in others.items() if k != key}
    if changed or differing:
        seen = [f"one message was keyed {key!r} on its first delivery"]
        seen += [f"{k!r} on {what}" for what, k in differing.items()]
        report.add(
            "key",
            KEY_CHANGES_PER_DELIVERY,
            ", ".join(seen) + (f"; the key changes with the {_names(changed)}" if changed else ""),
        )
    other = run.target.key(run.broker.first(run.new_message()))
    if other == key:
        report.add(
            "key",
            KEY_SHARED,
            f"two different messages were both keyed {key!r}: the second would be skipped "
            "as a duplicate of the first",
        )


# -- sequential ------------------------------------------------------------------------------


def failed_delivery(report: Report, check: str, delivered: Delivered, what: str) -> bool:
    """Report a delivery that should have applied its message and did not end well
    (refused commit, work left running, an error); True if it did not."""
    error = delivered.settled.error
    name = type(error).__name__ if error is not None else ""
    if name == "HandlerEndedTransaction":
        report.add(check, HANDLER_ENDS_TRANSACTION, f"{what} was {delivered.describe()}")
    elif name == "AsyncHandlerError":
        report.add(check, WORK_LEFT_RUNNING, f"{what} was {delivered.describe()}")
    elif delivered.failed:
        report.add(check, DELIVERY_FAILED, f"{what} was {delivered.describe()}")
    else:
        return False
    return True


def after_applying(report: Report, check: str, delivered: Delivered, what: str) -> None:
    """What a delivery that applied its message may have done wrong on the way: acked
    before its commit, committed in more than one transaction, left work running."""
    watch = delivered.watch
    if watch.ack_problems:
        report.add(
            check,
            ACK_BEFORE_COMMIT,
            f"when {what} was acked, " + " and ".join(dict.fromkeys(watch.ack_problems)),
        )
    if len(watch.commits) > 1:
        report.add(
            check,
            CLAIM_COMMITTED_APART,
            f"{what} committed its changes in {len(watch.commits)} transactions "
            f"({', '.join(map(str, watch.commits))} rows): a crash between them leaves the "
            "claim without the change, and the redelivery is skipped",
        )
    if delivered.left_running:
        report.add(
            check,
            WORK_LEFT_RUNNING,
            f"{what} returned with {', '.join(delivered.left_running)} still running",
        )


async def check_sequential(run: Run, report: Report) -> bool:
    """Deliver a message, then the producer's retry of it: the state changes once, the
    second delivery is acked without running the handler. Sets ``run.before`` and
    ``run.once``; False if there is no baseline for the other checks."""
    check = "sequential"
    message = run.new_message()
    before = await run.read(message)
    first = run.broker.first(message)
    one = await run.deliver(first, before=before)
    once = await run.read(message)
    if failed_delivery(report, check, one, "the first delivery"):
        return False
    if once == before:
        report.add(
            check,
            NO_EFFECT,
            f"state(session, message) was {before!r} before the first delivery and after "
            f"it, which was {one.describe()} and acked {one.watch.acks} time(s)",
        )
        return False
    run.before, run.once = before, once
    after_applying(report, check, one, "the first delivery")
    if not one.acked:
        report.add(
            check,
            NOT_ACKED,
            f"the first delivery applied the message but was never acked "
            f"({one.describe()}): it comes back",
        )
    retry = run.broker.producer_retry(message)
    two = await run.deliver(retry)
    again = await run.read(message)
    if again != once:
        await diagnose_duplicate(run, report, check, first, retry, two, once, again)
    elif run.target.counts_handler and two.watch.handler_calls:
        report.add(
            check,
            DUPLICATE_APPLIED,
            f"the handler ran {two.watch.handler_calls} time(s) for the second delivery "
            "(its change did not reach state(), but the handler should not run at all)",
        )
    duplicate_settled(report, check, two, "the second delivery")
    return True


def duplicate_settled(report: Report, check: str, delivered: Delivered, what: str) -> None:
    """A delivery of a message already applied must be acked, and make no outbound call."""
    if not delivered.acked:
        report.add(check, DUPLICATE_NOT_ACKED, f"{what} was {delivered.describe()}, not acked")
    calls = [call.text for call in delivered.watch.outbound]
    if calls:
        report.add(
            check,
            SIDE_EFFECT_REPEATS,
            f"{what}, of a message already applied, called {'; '.join(calls)}",
        )


async def diagnose_duplicate(
    run: Run,
    report: Report,
    check: str,
    first: BrokerDelivery,
    again: BrokerDelivery,
    delivered: Delivered,
    once: Any,
    twice: Any,
) -> None:
    """A second delivery applied the message again: a key from the broker's metadata, a
    claim that does not conflict (no unique constraint), or no claim at all."""
    seen = f"the state went from {once!r} to {twice!r} on the second delivery"
    if run.target.knows_key:
        keys = (run.target.key(first), run.target.key(again))
        if keys[0] != keys[1]:
            fields = key_fields(run, first)
            report.add(
                check,
                KEY_CHANGES_PER_DELIVERY,
                f"{seen}: it was keyed {keys[1]!r}, the first {keys[0]!r}"
                + (f" (the key changes with the {_names(fields)})" if fields else ""),
            )
            return
    else:
        # the consumer reads its key itself: deliver the first delivery's very metadata
        # again, then each broker field changed alone, and see which ones apply it again
        same = await run.deliver(first)
        state = await run.read(first.message)
        if state == twice and same.settled.error is None:
            fields = []
            for name in BROKER_FIELDS:
                await run.deliver(run.broker.varied(first, name))
                now = await run.read(first.message)
                if now != state:
                    fields.append(name)
                state = now
            run.key_fields = fields
            report.add(
                check,
                KEY_CHANGES_PER_DELIVERY,
                f"{seen}; the first delivery's exact metadata again was skipped, so the key "
                "comes from the broker's metadata" + (f": the {_names(fields)}" if fields else ""),
            )
            return
    claim = delivered.watch.claim_rows
    if claim is not None and claim > 0:
        report.add(
            check,
            NO_UNIQUE_CONSTRAINT,
            f"{seen}: its claim (its first write) inserted {claim} row(s) for an id the "
            "first delivery had committed, instead of conflicting",
        )
        return
    report.add(check, DUPLICATE_APPLIED, f"{seen}, which was {delivered.describe()}")


def _learnt(run: Run) -> str:
    """What the sequential duplicate found of a consumer's own key."""
    fields = f": the {_names(run.key_fields)}" if run.key_fields else ""
    return f"as the sequential duplicate found, the key comes from the broker's metadata{fields}"


# -- concurrent ------------------------------------------------------------------------------


async def fresh(run: Run, message: Message) -> Any:
    """The state of a new message, checked to be the sequential test's ``before``.

    :raises InvalidArgument: if it differs (state() does not describe the message alone).
    """
    state = await run.read(message)
    if state != run.before:
        raise InvalidArgument(
            f"state(session, message) of a new message was {run.before!r}, and of another "
            f"one {state!r}: it must describe the message's own effect, the same for every "
            "message (the rows carrying its id, the balance of an account of its own)"
        )
    return state


async def check_concurrent(run: Run, report: Report) -> tuple[list[Delivered], Gate]:
    """Deliver one message ``workers`` times at once, each delivery held just before its
    claim until all are there: exactly one applies it, the others skip and ack.

    :returns: the deliveries that ended, and the gate they met at.
    """
    check = "concurrent"
    n = run.workers
    message = run.new_message()
    await fresh(run, message)
    first = run.broker.first(message)
    deliveries = [first, run.broker.redelivery(first)]
    deliveries += [run.broker.producer_retry(message) for _ in range(n - 2)]
    gate = Gate(n, asynchronous=run.target.asynchronous, timeout=run.timeout / 4)
    results, hung = await run.deliver_together(deliveries, gate)
    report.note(check, f"{n} {'tasks' if run.target.asynchronous else 'threads'}")
    if hung:
        report.add(
            check,
            CONCURRENT_HANG,
            f"{hung} of {n} deliveries released together at their claim had not ended "
            f"after {run.timeout:g} s (a deadlock or a lock wait that never ends)",
        )
        return results, gate
    report.note(check, f"{gate.together} held together at the claim")
    end = await run.read(message)
    applied = [r for r in results if r.watch.commits]
    failed = [r for r in results if r.failed]
    checked = any(r.watch.read_before_write for r in results)
    skipped = sum(1 for r in results if r.acked and not r.watch.commits and not r.failed)
    report.note(check, f"{len(applied)} applied, {skipped} skipped and acked")
    if end != run.once and end != run.before:
        seen = (
            f"{len(applied)} of {n} deliveries released together at their claim committed "
            f"a change: the state is {end!r}, one delivery makes it {run.once!r}"
        )
        inserted = [r for r in applied if (r.watch.claim_rows or 0) > 0]
        keys = {run.target.key(d) for d in deliveries} if run.target.knows_key else set()
        if len(keys) > 1:
            report.add(
                check, KEY_CHANGES_PER_DELIVERY, f"{seen}; they were keyed {sorted(map(str, keys))}"
            )
        elif run.key_fields is not None:
            report.add(check, KEY_CHANGES_PER_DELIVERY, f"{seen}; {_learnt(run)}")
        elif checked:
            report.add(
                check,
                CHECK_THEN_INSERT,
                f"{seen}; each read before its first write, and every read found no claim",
            )
            if len(inserted) > 1:
                report.add(
                    check,
                    NO_UNIQUE_CONSTRAINT,
                    f"{len(inserted)} deliveries' claims inserted a row for the same id",
                )
        elif len(inserted) > 1:
            report.add(
                check,
                NO_UNIQUE_CONSTRAINT,
                f"{seen}; {len(inserted)} claims (each one's first write) inserted a row "
                "for the same id",
            )
        else:
            report.add(check, DUPLICATE_APPLIED, seen)
    if failed:
        errors = "; ".join(dict.fromkeys(r.describe() for r in failed))
        seen = f"{len(failed)} of {n} deliveries failed instead of being skipped: {errors}"
        if end == run.before:
            seen += "; none applied the message"
        if checked and CHECK_THEN_INSERT.name in report.modes(check):
            pass
        elif checked:
            report.add(
                check,
                CHECK_THEN_INSERT,
                f"{seen}; each read before its first write and found no claim, so each "
                "went on to insert one, and the unique constraint failed all but the first",
            )
        else:
            report.add(check, CONCURRENT_ERROR, seen)
    for r in results:
        if not r.failed and not r.acked:
            report.add(check, DUPLICATE_NOT_ACKED, f"a delivery was {r.describe()}, not acked")
            break
    winners = [r for r in results if r.watch.handler_calls] if run.target.counts_handler else []
    if end == run.once and run.target.counts_handler and len(winners) > 1 and not failed:
        report.note(check, f"the handler ran in {len(winners)} deliveries, one committed")
    return results, gate


# -- crashes ---------------------------------------------------------------------------------


def _forked(report: Report, check: str, child: ChildReport, point: str) -> bool:
    """Report a child that did not die at its crash point; True if it did."""
    if child.timed_out:
        report.add(
            check,
            CONCURRENT_HANG if point == "ack" else DELIVERY_FAILED,
            f"the delivery in a child process never reached its {point} (killed after the timeout)",
        )
        return False
    if child.killed and child.last("at") is not None:
        return True
    ended = child.last("settled") or child.last("error") or {}
    if point == "ack" and ended.get("settled") in ("processed", "returned"):
        report.add(
            check,
            DUPLICATE_NOT_ACKED,
            f"the delivery in a child process ended {ended.get('settled')} without an ack",
        )
    else:
        report.add(
            check,
            DELIVERY_FAILED,
            f"the delivery in a child process ended before its {point}: "
            f"{ended.get('error') or ended.get('settled') or child.lines}",
        )
    return False


class _Crash(NamedTuple):
    """A new message's first delivery, run in a child process killed at a point."""

    message: Message
    before: Any
    first: BrokerDelivery
    child: ChildReport


async def _crash(run: Run, report: Report, check: str, point: str) -> _Crash | None:
    """Deliver a new message in a child process SIGKILLed at ``point`` (``"ack"``,
    ``"commit"``: :meth:`Run.fork`); ``None``, with ``check`` skipped, where nothing can
    fork (no :func:`os.fork`).

    :raises InvalidArgument: from :func:`fresh`.
    """
    if not can_fork():
        report.skip(check, "needs os.fork and SIGKILL (POSIX)")
        return None
    message = run.new_message()
    before = await fresh(run, message)
    first = run.broker.first(message)
    return _Crash(message, before, first, await run.fork(first, crash=point, before=before))


async def check_crash_after_commit(run: Run, report: Report) -> None:
    """A child process applies a message and is SIGKILLed at its ack, after the commit;
    the broker's redelivery must change nothing and be acked."""
    check = "crash_after_commit"
    crash = await _crash(run, report, check, "ack")
    if crash is None:
        return
    message, before, first, child = crash
    if not _forked(report, check, child, "ack"):
        return
    at = child.last("at") or {}
    crashed = await run.read(message)
    report.note(check, "a child process SIGKILLed at its ack")
    if at.get("ack_problems"):
        where = "in the database" if crashed == run.once else "not in the database"
        report.add(
            check,
            ACK_BEFORE_COMMIT,
            "a process killed at its ack: " + " and ".join(at["ack_problems"]) + f"; after the "
            f"kill the change was {where}",
        )
    redelivery = run.broker.redelivery(first)
    again = await run.deliver(redelivery, before=before if crashed == run.before else NOTHING)
    final = await run.read(message)
    if crashed == run.once and final != run.once:
        seen = (
            f"the change committed before the kill ({crashed!r}), and the redelivery made it "
            f"{final!r}"
        )
        if run.target.knows_key and run.target.key(first) != run.target.key(redelivery):
            report.add(check, KEY_CHANGES_PER_DELIVERY, f"{seen}: the redelivery was keyed apart")
        elif run.key_fields is not None:
            report.add(check, KEY_CHANGES_PER_DELIVERY, f"{seen}; {_learnt(run)}")
        elif (again.watch.claim_rows or 0) > 0:
            report.add(
                check,
                NO_UNIQUE_CONSTRAINT,
                f"{seen}: its claim (its first write) inserted {again.watch.claim_rows} row(s) "
                "for an id already committed, instead of conflicting",
            )
        else:
            report.add(check, CRASH_REDELIVERY_APPLIED, f"{seen} ({again.describe()})")
    elif final != run.once:
        report.add(
            check,
            CRASH_LOST,
            f"after the kill the state was {crashed!r} and after the redelivery {final!r}; "
            f"one delivery makes it {run.once!r}",
        )
    if crashed == run.once:
        if run.target.counts_handler and again.watch.handler_calls and final == run.once:
            report.add(
                check,
                CRASH_REDELIVERY_APPLIED,
                f"the handler ran {again.watch.handler_calls} time(s) for the redelivery of "
                "a committed message",
            )
        duplicate_settled(report, check, again, "the redelivery")


async def check_crash_before_commit(run: Run, report: Report, outbound: bool) -> None:
    """A child process runs a delivery and is SIGKILLed at its commit, before it reaches the
    database: nothing of it may survive, the redelivery applies it once, and an outbound
    call made twice must carry the same idempotency key both times."""
    check = "crash_before_commit"
    crash = await _crash(run, report, check, "commit")
    if crash is None:
        return
    message, before, first, child = crash
    crashed = await run.read(message)
    at = child.last("at")
    for line in child.lines:
        run.called.update(call["name"] for call in line.get("outbound", []))
    if at is None:
        ended = child.last("settled") or child.last("error") or {}
        if crashed != before:
            report.add(
                check,
                CLAIM_COMMITTED_APART,
                f"the delivery changed the state to {crashed!r} without committing a "
                "transaction of its own (an autocommit connection, or writes through "
                "another session's transaction)",
            )
        else:
            report.add(
                check,
                DELIVERY_FAILED,
                f"the delivery in a child process never committed a change: "
                f"{ended.get('error') or ended.get('settled') or child.lines}",
            )
        return
    report.note(check, "a child process SIGKILLed at its commit")
    if crashed != before:
        report.add(
            check,
            CLAIM_COMMITTED_APART,
            f"a process killed at the commit of the delivery's changes left the state "
            f"{crashed!r} (before: {before!r}): part of it was committed earlier",
        )
    redelivery = run.broker.redelivery(first)
    again = await run.deliver(redelivery, before=before)
    final = await run.read(message)
    if final != run.once:
        report.add(
            check,
            CRASH_LOST,
            f"after a crash before the commit, the redelivery ({again.describe()}) left the "
            f"state {final!r}; one delivery makes it {run.once!r}",
        )
    if outbound:
        _repeated_calls(report, check, at.get("outbound", []), again)


def _repeated_calls(
    report: Report, check: str, crashed: list[dict[str, Any]], again: Delivered
) -> None:
    """Each outbound function called in the killed delivery and again in the redelivery
    must carry the same idempotency key both times."""
    for name in dict.fromkeys(call["name"] for call in crashed):
        before = [c for c in crashed if c["name"] == name]
        after = [c for c in again.watch.outbound if c.name == name]
        if not after:
            continue
        shared = {k for c in before for k in c["keys"]} & {k for c in after for k in c.keys}
        if not shared:
            report.add(
                check,
                SIDE_EFFECT_REPEATS,
                f"{before[0]['text']} ran in the delivery killed before its commit, and "
                f"{after[0].text} again in the redelivery, with no idempotency key in common",
            )


def check_outbound_seen(run: Run, report: Report, paths: Sequence[str]) -> None:
    """Each named outbound function was called at least once."""
    for path in paths:
        if path not in run.called:
            report.add(
                "crash_before_commit",
                OUTBOUND_NOT_CALLED,
                f"{path} was never called during the checks' deliveries",
            )
