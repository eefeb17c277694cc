"""The message stream of the demo: payments with producer-assigned ids, and their deliveries.

A *payment* is one business message (one unique ``message_id``). A *delivery* is one copy
of it handed to a consumer; at-least-once delivery means a payment can arrive several times.
:func:`generate_stream` plans, from a seed, which copies the broker starts with:

* the original of every payment;
* **producer retries**: a copy published again a few messages later, as a producer does
  when its publish timed out although the broker had stored the first copy;
* **concurrent copies**: a copy published right after the original, as a broker does when
  a visibility timeout expires while a slow consumer still holds the message. The original
  is marked slow (:data:`SLOW_STEP_S` of work before its transaction, like a call to a
  fraud-check service), so while one worker holds it, the adjacent copy is taken by
  another worker process: the same message is in flight in two processes at once.

It also flags some deliveries to crash their worker after the commit and before the ack,
so that the broker redelivers them (see :mod:`sa_inbox.demo.worker`). Everything is
deterministic for a given seed. The expected balances come from the unique payments only,
never from the database.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

__all__ = [
    "SLOW_STEP_S",
    "Delivery",
    "Payment",
    "Reason",
    "Stream",
    "generate_stream",
]

#: Why a delivery exists: the first publish, a producer retry, or a concurrent copy.
Reason = Literal["original", "producer-retry", "concurrent"]

#: A producer retry is published this many messages after the original, at most.
RETRY_WINDOW = 40
#: Seconds of simulated slow work before the transaction, for an original that has a
#: concurrent copy (long enough for another worker to take the copy meanwhile).
SLOW_STEP_S = 0.03
#: Share of payments that are refunds (negative amounts).
REFUND_RATE = 0.1
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Payment:
    """One payment message, as the producer publishes it.

    :param message_id: producer-assigned id, ``"pay-"`` + a UUID4 (40 characters).
    :param message_type: ``"payment.captured"`` or ``"payment.refunded"``.
    :param account_id: the merchant account credited (or debited), e.g. ``"acct-0007"``.
    :param amount: signed amount in currency units, exact to the cent (a refund is < 0).
    """

    message_id: str
    message_type: str
    account_id: str
    amount: Decimal

    @property
    def amount_cents(self) -> int:
        """The amount as an integer number of cents (what the ledger stores)."""
        return int(self.amount * 100)


@dataclass(frozen=True)
class Delivery:
    """One copy of a payment travelling through the simulated broker.

    :param tag: the broker's delivery tag, unique per copy published (a redelivery keeps
        the tag of the copy it redelivers).
    :param payment: the message.
    :param reason: why this copy was published.
    :param crash_before_ack: the worker that gets this copy commits, then crashes before
        acking it; the broker clears the flag when it redelivers.
    :param slow_s: seconds the worker spends on this copy before its transaction begins.
    :param redelivered: set by the broker on a redelivery (as AMQP's ``redelivered``).
    :param attempt: 1 for the first delivery of this copy, then 2, 3, ...
    """

    tag: int
    payment: Payment
    reason: Reason
    crash_before_ack: bool = False
    slow_s: float = 0.0
    redelivered: bool = False
    attempt: int = 1


@dataclass(frozen=True)
class Stream:
    """A generated stream: the unique payments and the deliveries the broker starts with.

    :param payments: the unique payments, in publish order of their originals.
    :param deliveries: every copy published, in queue order.
    :param accounts: the account ids, sorted.
    :param seed: the seed that generated it.
    :param reasons: copies published per :data:`Reason`.
    """

    payments: list[Payment]
    deliveries: list[Delivery]
    accounts: list[str]
    seed: int
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def crashes_planned(self) -> int:
        """Deliveries flagged to crash after the commit (each is redelivered once)."""
        return sum(1 for delivery in self.deliveries if delivery.crash_before_ack)

    def expected_balances(self) -> dict[str, int]:
        """Per-account balance in cents if every unique payment is applied exactly once."""
        balances = dict.fromkeys(self.accounts, 0)
        for payment in self.payments:
            balances[payment.account_id] += payment.amount_cents
        return balances


def _payment(rng: random.Random, accounts: list[str]) -> Payment:
    message_id = f"pay-{uuid.UUID(int=rng.getrandbits(128), version=4)}"
    amount = (Decimal(rng.randint(100, 250_000)) * CENT).quantize(CENT)
    if rng.random() < REFUND_RATE:
        return Payment(message_id, "payment.refunded", rng.choice(accounts), -amount)
    return Payment(message_id, "payment.captured", rng.choice(accounts), amount)


def generate_stream(
    messages: int,
    *,
    seed: int,
    accounts: int = 50,
    duplicate_rate: float = 0.1,
    concurrent_rate: float = 0.05,
    crash_rate: float = 0.02,
) -> Stream:
    """Plan ``messages`` unique payments and their at-least-once deliveries.

    :param messages: unique payments, >= 1.
    :param seed: seed of the stream; the same seed gives the same stream.
    :param accounts: number of merchant accounts the payments are spread over.
    :param duplicate_rate: probability in [0, 1] that a payment is published again by a
        producer retry, 2 to :data:`RETRY_WINDOW` messages later.
    :param concurrent_rate: probability in [0, 1] that a payment gets a concurrent copy,
        right after the original in the queue.
    :param crash_rate: probability in [0, 1] that a delivery crashes its worker after the
        commit and before the ack.
    :raises ValueError: for a non-positive count or a rate outside [0, 1].
    """
    if messages < 1 or accounts < 1:
        raise ValueError("messages and accounts must be >= 1")
    for name, rate in (
        ("duplicate_rate", duplicate_rate),
        ("concurrent_rate", concurrent_rate),
        ("crash_rate", crash_rate),
    ):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], not {rate}")
    rng = random.Random(seed)
    account_ids = [f"acct-{number:04d}" for number in range(1, accounts + 1)]
    payments = [_payment(rng, account_ids) for _ in range(messages)]
    # Sort keys: the original of payment i at i, its concurrent copy at i + 0.5 (adjacent),
    # a producer retry at i + k + 0.25 with k >= 2 (later, after other messages).
    planned: list[tuple[float, Reason, Payment, float]] = []
    for position, payment in enumerate(payments):
        concurrent = rng.random() < concurrent_rate
        planned.append((position, "original", payment, SLOW_STEP_S if concurrent else 0.0))
        if concurrent:
            planned.append((position + 0.5, "concurrent", payment, 0.0))
        if rng.random() < duplicate_rate:
            offset = rng.randint(2, RETRY_WINDOW)
            planned.append((position + offset + 0.25, "producer-retry", payment, 0.0))
    planned.sort(key=lambda item: item[0])
    deliveries = [
        Delivery(tag, payment, reason, crash_before_ack=rng.random() < crash_rate, slow_s=slow)
        for tag, (_, reason, payment, slow) in enumerate(planned, start=1)
    ]
    reasons: Counter[str] = Counter(delivery.reason for delivery in deliveries)
    return Stream(payments, deliveries, account_ids, seed, reasons)
