"""The verification of a chaos run: the database and the broker against the plan.

Expected values come from the :class:`~.workload.ChaosPlan` only (what the producer
published); actual values from the database (ledger, balances, inbox claims) and the
broker (what is left unsettled, what was dead-lettered) after the run. Every check of
:attr:`Verification.checks` must hold:

* ``ledger_rows``: one ledger row per unique payment (poison messages excluded);
* ``no_id_applied_twice``: ``GROUP BY message_id HAVING count(*) > 1`` on the ledger is empty;
* ``only_published_ids``: every ledger row is a published payment (no poison applied);
* ``balances``: every account's balance equals the sum of its payments;
* ``inbox_claims``: one claim per unique payment (a poison message's claim rolled back);
* ``nothing_unsettled``: the broker holds nothing neither acked nor dead-lettered;
* ``dead_letters_are_poison``: the dead-letter queue / stream holds the poison ids and no
  other. A poison id may be there twice: the dead letter is a publish, then an ack of the
  original, and a consumer killed between the two publishes it again on the redelivery
  (:attr:`Verification.dead_letters_repeated` counts those).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from ..demo.app import DemoSchema
from .workload import ChaosPlan

__all__ = ["DatabaseState", "Verification", "read_state", "verify"]


@dataclass(frozen=True)
class DatabaseState:
    """The business state after a run.

    :param ledger_rows: rows in the ledger.
    :param inbox_rows: claims in the inbox table.
    :param balances: balance in cents per account id.
    :param applied_twice: message ids with more than one ledger row.
    :param ledger_ids: the distinct message ids in the ledger.
    """

    ledger_rows: int
    inbox_rows: int
    balances: dict[str, int]
    applied_twice: list[str]
    ledger_ids: frozenset[str]


def read_state(engine: sa.Engine, schema: DemoSchema) -> DatabaseState:
    """Read the ledger, the balances and the inbox claims of ``schema`` on ``engine``."""
    state = schema.read_state(engine)
    ledger = schema.ledger
    with engine.connect() as conn:
        twice = conn.execute(
            sa.select(ledger.c.message_id)
            .group_by(ledger.c.message_id)
            .having(sa.func.count() > 1)
            .order_by(ledger.c.message_id)
        ).scalars()
        applied_twice = list(twice)
        ids = frozenset(conn.execute(sa.select(ledger.c.message_id).distinct()).scalars())
    return DatabaseState(
        ledger_rows=state.ledger_rows,
        inbox_rows=state.inbox_rows,
        balances=state.balances,
        applied_twice=applied_twice,
        ledger_ids=ids,
    )


@dataclass(frozen=True)
class Verification:
    """Expected against actual, for one run.

    :param unique_payments: unique non-poison message ids published (expected ledger rows
        and claims).
    :param ledger_rows: ledger rows found.
    :param inbox_rows: inbox claims found.
    :param applied_twice: ids with more than one ledger row (expected: none).
    :param unexpected_ids: ledger ids that are not published payments (expected: none).
    :param expected_balance_cents: sum of the expected balances.
    :param actual_balance_cents: sum of the balances found.
    :param account_mismatches: accounts whose balance differs from the expected one.
    :param unsettled: messages the broker still holds unsettled (expected: 0).
    :param poison_ids: the poison messages published, sorted.
    :param dead_letters: the ids in the broker's dead-letter queue / stream, sorted.
    """

    unique_payments: int
    ledger_rows: int
    inbox_rows: int
    applied_twice: list[str]
    unexpected_ids: list[str]
    expected_balance_cents: int
    actual_balance_cents: int
    account_mismatches: int
    unsettled: int
    poison_ids: list[str]
    dead_letters: list[str]

    @property
    def checks(self) -> dict[str, bool]:
        """Each check by name (see the module's list); all must hold for :attr:`ok`."""
        return {
            "ledger_rows": self.ledger_rows == self.unique_payments,
            "no_id_applied_twice": not self.applied_twice,
            "only_published_ids": not self.unexpected_ids,
            "balances": self.account_mismatches == 0,
            "inbox_claims": self.inbox_rows == self.unique_payments,
            "nothing_unsettled": self.unsettled == 0,
            "dead_letters_are_poison": sorted(set(self.dead_letters)) == self.poison_ids,
        }

    @property
    def dead_letters_repeated(self) -> int:
        """Dead letters published again for an id already dead-lettered (a consumer killed
        between the dead-letter publish and the ack)."""
        return len(self.dead_letters) - len(set(self.dead_letters))

    @property
    def ok(self) -> bool:
        """Whether every check holds."""
        return all(self.checks.values())


def verify(
    plan: ChaosPlan, state: DatabaseState, *, unsettled: int, dead_letters: Iterable[str]
) -> Verification:
    """Compare the state after a run with the plan.

    :param plan: what was published.
    :param state: the database after the run (:func:`read_state`).
    :param unsettled: ``driver.unsettled(name)`` after the consumers stopped.
    :param dead_letters: ``driver.dead_letters(name)``.
    """
    expected = plan.expected_balances()
    mismatches = sum(
        1
        for account in set(expected) | set(state.balances)
        if state.balances.get(account, 0) != expected.get(account, 0)
    )
    return Verification(
        unique_payments=len(plan.payments),
        ledger_rows=state.ledger_rows,
        inbox_rows=state.inbox_rows,
        applied_twice=state.applied_twice,
        unexpected_ids=sorted(state.ledger_ids - plan.payments.keys()),
        expected_balance_cents=sum(expected.values()),
        actual_balance_cents=sum(state.balances.values()),
        account_mismatches=mismatches,
        unsettled=unsettled,
        poison_ids=sorted(plan.poison_ids),
        dead_letters=sorted(dead_letters),
    )
