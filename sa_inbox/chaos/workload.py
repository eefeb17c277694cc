"""The chaos run's workload: the payments a producer publishes, and the state they must leave.

The payments are the demo's (:func:`sa_inbox.demo.stream.generate_stream`: random merchant
accounts and amounts, a share republished later with the same ``message_id`` as a producer
retry does), plus ``poison`` messages whose handler always fails. Each message body is JSON;
the expected balances and ledger rows come from this plan only, never from the database.

The business schema is the demo's (:class:`sa_inbox.demo.app.DemoSchema`) under the
``chaos_`` prefix: ``chaos_accounts``, ``chaos_ledger``, ``chaos_inbox_processed_messages``.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from ..brokers import Delivery
from ..demo.app import DemoSchema
from ..demo.stream import generate_stream

__all__ = [
    "CONSUMER",
    "PREFIX",
    "ChaosPlan",
    "PoisonMessage",
    "decode",
    "encode",
    "make_plan",
    "payment_handler",
]

#: The consumer name every chaos consumer process claims under (one logical consumer).
CONSUMER = "chaos-payments"
#: The chaos run's table prefix.
PREFIX = "chaos_"


class PoisonMessage(Exception):
    """Raised by the handler for a poison message, on every delivery."""


@dataclass(frozen=True)
class ChaosPlan:
    """What the producer publishes, and what the database must hold afterwards.

    :param publishes: every ``(message_id, body)`` in publish order (originals, producer
        retries with the same id, poison messages).
    :param payments: ``message_id -> (account_id, amount_cents)`` of each unique payment.
    :param poison_ids: the poison messages' ids (never applied, dead-lettered).
    :param accounts: every account id, sorted (all opened at a balance of 0).
    :param seed: the seed that generated the plan.
    """

    publishes: list[tuple[str, bytes]]
    payments: dict[str, tuple[str, int]]
    poison_ids: frozenset[str]
    accounts: list[str]
    seed: int

    @property
    def duplicate_publishes(self) -> int:
        """Publishes beyond the first of each message id (producer retries)."""
        return len(self.publishes) - len(self.payments) - len(self.poison_ids)

    def expected_balances(self) -> dict[str, int]:
        """Balance in cents per account once every payment is applied exactly once."""
        balances = dict.fromkeys(self.accounts, 0)
        for account, cents in self.payments.values():
            balances[account] += cents
        return balances


def encode(account_id: str, cents: int, *, poison: bool = False) -> bytes:
    """A message body: ``{"account_id": ..., "amount_cents": ..., "poison": ...}``."""
    return json.dumps(
        {"account_id": account_id, "amount_cents": cents, "poison": poison}, sort_keys=True
    ).encode()


def decode(body: bytes) -> tuple[str, int, bool]:
    """``(account_id, amount_cents, poison)`` of a body made by :func:`encode`.

    :raises ValueError: if ``body`` is not such a JSON object.
    """
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError("a payment body is a JSON object")
    return str(data["account_id"]), int(data["amount_cents"]), bool(data.get("poison"))


def make_plan(
    messages: int,
    *,
    seed: int,
    duplicates: float = 0.1,
    poison: int = 0,
    accounts: int = 50,
) -> ChaosPlan:
    """Plan ``messages`` unique payments, their producer retries and ``poison`` messages.

    :param messages: unique payments, >= 1.
    :param seed: the same seed gives the same plan.
    :param duplicates: probability in [0, 1] that a payment is published again, with the
        same ``message_id``, 2 to 40 messages later.
    :param poison: poison messages (>= 0), inserted at random positions.
    :param accounts: merchant accounts, >= 1.
    :raises ValueError: for a count < 1, ``poison`` < 0 or ``duplicates`` outside [0, 1].
    """
    if poison < 0:
        raise ValueError("poison must be >= 0")
    stream = generate_stream(
        messages,
        seed=seed,
        accounts=accounts,
        duplicate_rate=duplicates,
        concurrent_rate=0.0,
        crash_rate=0.0,
    )
    publishes = [
        (d.payment.message_id, encode(d.payment.account_id, d.payment.amount_cents))
        for d in stream.deliveries
    ]
    rng = random.Random(seed + 1)
    poison_ids = []
    for _ in range(poison):
        message_id = f"poison-{uuid.UUID(int=rng.getrandbits(128), version=4)}"
        body = encode(rng.choice(stream.accounts), 100, poison=True)
        publishes.insert(rng.randint(0, len(publishes)), (message_id, body))
        poison_ids.append(message_id)
    return ChaosPlan(
        publishes=publishes,
        payments={p.message_id: (p.account_id, p.amount_cents) for p in stream.payments},
        poison_ids=frozenset(poison_ids),
        accounts=stream.accounts,
        seed=seed,
    )


def payment_handler(schema: DemoSchema) -> Callable[[Session, Delivery], None]:
    """The consumers' handler: apply the payment (ledger row + balance) in the session.

    :raises PoisonMessage: for a poison message (every time).
    :raises ValueError: for a body that is not a payment.
    """

    def apply_payment(session: Session, delivery: Delivery) -> None:
        account_id, cents, poison = decode(delivery.body)
        if poison:
            raise PoisonMessage(f"poison message {delivery.message_id}: the handler always fails")
        assert delivery.message_id is not None  # process() dead-letters unkeyed deliveries
        schema.apply(session, delivery.message_id, account_id, cents)

    return apply_payment
