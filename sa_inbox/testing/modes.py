"""The failure modes the exactly-once checks report: each one's name, what the inbox
pattern says about it, and the fix.

Every finding of :func:`sa_inbox.testing.check_exactly_once` names one of these
(:attr:`FailureMode.name`, e.g. ``[check-then-insert]``), quotes the rule it breaks and says
what to change. The rules are the inbox pattern's ("Inbox Pattern in Microservices:
Deduplicating Messages in the Database"): claim the producer's id in the business change's
transaction, insert first, commit, then ack.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ACK_BEFORE_COMMIT",
    "CHECK_THEN_INSERT",
    "CLAIM_COMMITTED_APART",
    "CONCURRENT_ERROR",
    "CONCURRENT_HANG",
    "CRASH_LOST",
    "CRASH_REDELIVERY_APPLIED",
    "DELIVERY_FAILED",
    "DUPLICATE_APPLIED",
    "DUPLICATE_NOT_ACKED",
    "HANDLER_ENDS_TRANSACTION",
    "KEY_CHANGES_PER_DELIVERY",
    "KEY_SHARED",
    "MISSING_KEY",
    "MODES",
    "NOT_ACKED",
    "NO_EFFECT",
    "NO_UNIQUE_CONSTRAINT",
    "OUTBOUND_NOT_CALLED",
    "SIDE_EFFECT_REPEATS",
    "WORK_LEFT_RUNNING",
    "FailureMode",
]


@dataclass(frozen=True)
class FailureMode:
    """One way a consumer breaks exactly-once processing.

    :param name: the short name a finding is tagged with (``check-then-insert``).
    :param title: what it is, in a few words.
    :param rule: the inbox pattern's own words about it.
    :param fix: what to change.
    """

    name: str
    title: str
    rule: str
    fix: str


KEY_CHANGES_PER_DELIVERY = FailureMode(
    "key-changes-per-delivery",
    "a key that changes per delivery",
    "Broker-side identifiers do not work. Delivery attempt counters, receipt handles and "
    "partition offsets describe a delivery, not the message. ... A key built from them "
    "treats each redelivery as new, and the duplicate gets processed.",
    "Key the claim on the producer's id, set once when the event is created (the AMQP "
    "message_id property, a header or stream field the producer sets, a business "
    "idempotency key); never on a delivery tag, redelivered flag, delivery count, receipt "
    "handle, offset, stream entry id or sequence, or the time of receipt.",
)

KEY_SHARED = FailureMode(
    "key-shared-by-messages",
    "one key for different messages",
    "Two producers' IDs collide. A real message is discarded as a duplicate, which is worse "
    "because nothing errors.",
    "Derive the key from the message's own id, unique across all producers (a UUID minted "
    "when the event is created), not from a constant, a type or a time.",
)

MISSING_KEY = FailureMode(
    "missing-key",
    "a message without the key the consumer reads",
    "The dedup key must come from the producer.",
    "Make the producer set the key where the consumer reads it (the adapter's key_header / "
    "key_field, or the message_id property), once, when the event is created; or point the "
    "consumer at where the producer puts it.",
)

DUPLICATE_APPLIED = FailureMode(
    "duplicate-applied",
    "a duplicate applied again",
    "If the message is delivered again, the insert fails on that constraint, the "
    "transaction rolls back or is skipped, and the redelivery does nothing.",
    "Claim (message_id, consumer_name) in the business change's transaction, before the "
    "change (sa_inbox.handle(), a broker adapter, or Inbox.claim() by hand), and skip the "
    "change when the claim finds the id already there.",
)

DUPLICATE_NOT_ACKED = FailureMode(
    "duplicate-not-acked",
    "a duplicate not acknowledged",
    "If the insert raises a unique constraint violation, or INSERT ... ON CONFLICT DO "
    "NOTHING reports zero rows affected, the message was already handled. Roll back, skip "
    "the work and ack.",
    "Ack a duplicate as you ack a processed message: an earlier delivery committed it. A "
    "duplicate nacked or left unsettled comes back again, until the broker dead-letters it.",
)

CHECK_THEN_INSERT = FailureMode(
    "check-then-insert",
    "a check-then-insert dedup",
    "Do not check with a SELECT first. Two consumers that receive the same message at the "
    "same moment can both see no row, both apply the change and both commit.",
    "Insert the claim first (INSERT ... ON CONFLICT DO NOTHING, INSERT IGNORE, or "
    "Inbox.claim()) and treat zero rows inserted as a duplicate: skip the change, then ack.",
)

NO_UNIQUE_CONSTRAINT = FailureMode(
    "no-unique-constraint",
    "a dedup table without a unique constraint",
    "The ID column has a unique constraint. If the message is delivered again, the insert "
    "fails on that constraint.",
    "Make (message_id, consumer_name) the dedup table's primary key (sa_inbox's Inbox table "
    "has it), so a second insert of the id conflicts instead of adding a row.",
)

CONCURRENT_ERROR = FailureMode(
    "concurrent-duplicate-error",
    "a concurrent duplicate failed instead of being skipped",
    "Exactly one should commit. The other should hit the unique violation, roll back and "
    "acknowledge. ... Under stricter isolation levels the loser may get a serialization "
    "failure instead of a conflict. Handle it like any transient error: roll back and retry.",
    "Treat a claim that conflicts as a duplicate (ON CONFLICT DO NOTHING: zero rows, ack) "
    "and retry serialization failures and deadlocks; sa_inbox.handle() and the broker "
    "adapters do both.",
)

CONCURRENT_HANG = FailureMode(
    "concurrent-duplicate-hang",
    "a concurrent duplicate that never finished",
    "With a unique constraint, the second insert waits on the first transaction's "
    "uncommitted row. If the first commits, the second hits the conflict. If the first rolls "
    "back, the second proceeds.",
    "Keep the transaction short, make the claim its first write, and commit on the "
    "connection that claimed: a delivery that waits on a lock its own other connection "
    "holds never ends.",
)

ACK_BEFORE_COMMIT = FailureMode(
    "ack-before-commit",
    "ack before commit",
    "The handler runs one database transaction in a fixed order: begin, insert the message "
    "ID into the inbox table, apply the business change, commit, then ack the broker.",
    "Ack only after the commit has returned (sa_inbox.handle() and the adapters do): a "
    "crash between an early ack and the commit loses the message, which the broker will "
    "never deliver again.",
)

NOT_ACKED = FailureMode(
    "not-acked",
    "a processed message never acknowledged",
    "The handler runs one database transaction in a fixed order: begin, insert the message "
    "ID into the inbox table, apply the business change, commit, then ack the broker.",
    "Ack once the commit has returned: a delivery left unacked comes back, again and again, "
    "until the broker dead-letters it.",
)

HANDLER_ENDS_TRANSACTION = FailureMode(
    "handler-ends-transaction",
    "a handler that commits or rolls back",
    "The consumer inserts the message ID into a processed-messages table inside the same "
    "transaction as the business change.",
    "Remove the handler's commit() / rollback(): the runner commits the claim and the "
    "change together after the handler returns (sa-inbox refuses a handler's commit).",
)

CLAIM_COMMITTED_APART = FailureMode(
    "claim-committed-apart",
    "the claim committed apart from the business change",
    "The consumer inserts the message ID into a processed-messages table inside the same "
    "transaction as the business change.",
    "Claim, change and commit in one transaction, on one connection that does not "
    "autocommit: one commit per delivery.",
)

WORK_LEFT_RUNNING = FailureMode(
    "work-left-running",
    "a handler that leaves work running",
    "Exactly-once processing is achievable when every effect of handling a message lands "
    "in a single database that can commit atomically.",
    "Await every coroutine and task (join every thread) the handler starts before it "
    "returns: work still running at the commit is outside the claim's transaction.",
)

SIDE_EFFECT_REPEATS = FailureMode(
    "side-effect-repeats",
    "a side effect outside the database",
    "It also does nothing for side effects outside the database. An HTTP call, an email, or "
    "a published event happens before the commit. If the transaction rolls back or the "
    "process dies, the redelivered message repeats that side effect.",
    "Give the call sa_inbox.idempotency_key(message_id, consumer_name, effect) (a service "
    "that deduplicates performs it once per key), or record it with "
    "sa_inbox.outbox.Outbox.publish() in the handler's transaction and let the relay send "
    "it after the commit.",
)

OUTBOUND_NOT_CALLED = FailureMode(
    "outbound-not-called",
    "an outbound function never called",
    "It also does nothing for side effects outside the database.",
    "Name the outbound function where the handler looks it up ('myapp.billing:charge' when "
    "myapp.billing did 'from payments import charge'), or leave it out of outbound= if the "
    "handler no longer calls it.",
)

CRASH_REDELIVERY_APPLIED = FailureMode(
    "crash-redelivery-applied",
    "the redelivery after a crash applied again",
    "After commit, before ack: the broker redelivers, the insert conflicts, and the handler "
    "acks without repeating the work.",
    "Claim the producer's id in the change's transaction (sa_inbox.handle() or a broker "
    "adapter): the redelivery of a committed message then finds its claim and is acked as "
    "a duplicate.",
)

CRASH_LOST = FailureMode(
    "crash-lost",
    "a message lost or half-applied by a crash",
    "Before commit: the transaction rolls back, nothing is recorded, the broker redelivers, "
    "and the retry does the work.",
    "Commit the claim and the change in one transaction and ack after it; a redelivery of "
    "an uncommitted message must apply it.",
)

NO_EFFECT = FailureMode(
    "no-effect",
    "a delivery that changed nothing",
    "Each one should assert on business state, such as the number of charge rows or the "
    "stock level, and not only on whether the handler returned successfully.",
    "Make state(session, message) read what the handler changes for that message (its "
    "ledger rows, its account's balance), and check the handler writes through the session "
    "it is given.",
)

DELIVERY_FAILED = FailureMode(
    "delivery-failed",
    "a first delivery that failed",
    "Before commit: the transaction rolls back, nothing is recorded, the broker redelivers, "
    "and the retry does the work.",
    "Fix the error shown: a handler that fails on every delivery is retried until the "
    "broker dead-letters the message, and proves nothing about duplicates.",
)

#: Every mode by name.
MODES: dict[str, FailureMode] = {
    mode.name: mode
    for mode in (
        KEY_CHANGES_PER_DELIVERY,
        KEY_SHARED,
        MISSING_KEY,
        DUPLICATE_APPLIED,
        DUPLICATE_NOT_ACKED,
        CHECK_THEN_INSERT,
        NO_UNIQUE_CONSTRAINT,
        CONCURRENT_ERROR,
        CONCURRENT_HANG,
        ACK_BEFORE_COMMIT,
        NOT_ACKED,
        HANDLER_ENDS_TRANSACTION,
        CLAIM_COMMITTED_APART,
        WORK_LEFT_RUNNING,
        SIDE_EFFECT_REPEATS,
        OUTBOUND_NOT_CALLED,
        CRASH_REDELIVERY_APPLIED,
        CRASH_LOST,
        NO_EFFECT,
        DELIVERY_FAILED,
    )
}
