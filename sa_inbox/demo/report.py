"""The demo's verification: business state against the stream, as a table and as JSON.

Expected values come from the generated stream only (its unique payments), never from
the database; actual values come from the database after the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .app import LedgerState
from .stream import Stream

__all__ = ["RunStats", "Verification", "count_table", "format_cents", "render", "verify"]


@dataclass(frozen=True)
class RunStats:
    """What the workers reported.

    :param deliveries: copies handed to a worker (originals, duplicates, redeliveries).
    :param processed: deliveries whose business change committed.
    :param duplicates_skipped: deliveries the inbox recognised and skipped.
    :param failed: deliveries rolled back and nacked.
    :param crashes: workers crashed between commit and ack.
    :param redeliveries: copies the broker put back (crashes and nacks).
    :param nacks: deliveries nacked.
    :param dead_letters: copies the broker gave up on after too many failed deliveries.
    :param transient_retries: transactions rolled back and retried (SQLITE_BUSY, deadlock).
    :param concurrent_overlaps: messages in flight in two worker processes at once.
    :param elapsed_s: wall-clock seconds from the first delivery to the last exit.
    """

    deliveries: int
    processed: int
    duplicates_skipped: int
    failed: int
    crashes: int
    redeliveries: int
    nacks: int
    dead_letters: int
    transient_retries: int
    concurrent_overlaps: int
    elapsed_s: float


@dataclass(frozen=True)
class Verification:
    """The verification of one run; ``ok`` if the ledger shows each payment exactly once.

    :param mode: ``"inbox"`` or ``"no-inbox"``.
    :param backend: the database backend name (``"sqlite"``, ``"postgresql"``, ...).
    :param workers: worker processes.
    :param seed: the stream's seed.
    :param unique_messages: unique payments in the stream.
    :param published: copies the producer and broker published (before redeliveries).
    :param producer_retries: of those, producer retries.
    :param concurrent_copies: of those, concurrent copies.
    :param accounts: merchant accounts.
    :param stats: what the workers reported.
    :param ledger_rows: rows in the ledger after the run.
    :param ledger_messages: distinct message ids in the ledger.
    :param inbox_rows: rows in the inbox table (0 without the inbox).
    :param expected_balance_cents: sum of the unique payments, in cents.
    :param actual_balance_cents: sum of the account balances in the database, in cents.
    :param account_mismatches: accounts whose balance differs from the expected one.
    :param account_error_cents: sum over accounts of ``|actual - expected|``, in cents.
    """

    mode: str
    backend: str
    workers: int
    seed: int
    unique_messages: int
    published: int
    producer_retries: int
    concurrent_copies: int
    accounts: int
    stats: RunStats
    ledger_rows: int
    ledger_messages: int
    inbox_rows: int
    expected_balance_cents: int
    actual_balance_cents: int
    account_mismatches: int
    account_error_cents: int

    @property
    def use_inbox(self) -> bool:
        return self.mode == "inbox"

    @property
    def expected_duplicates(self) -> int:
        """Deliveries beyond the first successful one of each message."""
        return self.stats.deliveries - self.stats.failed - self.unique_messages

    @property
    def checks(self) -> dict[str, bool]:
        """Each check by name; all must hold for ``ok``."""
        checks = {
            "ledger_rows": self.ledger_rows == self.unique_messages,
            "ledger_messages": self.ledger_messages == self.unique_messages,
            "balance_total": self.actual_balance_cents == self.expected_balance_cents,
            "account_balances": self.account_mismatches == 0,
        }
        if self.use_inbox:
            checks["inbox_rows"] = self.inbox_rows == self.unique_messages
            checks["processed"] = self.stats.processed == self.unique_messages
            checks["duplicates_skipped"] = self.stats.duplicates_skipped == self.expected_duplicates
        return checks

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    def to_json(self) -> dict[str, Any]:
        """Every number, flat, for ``--json`` (amounts in cents, as integers)."""
        data = asdict(self)
        data.update(data.pop("stats"))
        data["extra_cents"] = self.actual_balance_cents - self.expected_balance_cents
        data["checks"] = self.checks
        data["ok"] = self.ok
        return data


def verify(
    stream: Stream,
    stats: RunStats,
    state: LedgerState,
    *,
    backend: str,
    workers: int,
    use_inbox: bool,
) -> Verification:
    """Compare the database after a run with the stream that was delivered."""
    expected = stream.expected_balances()
    errors = [abs(state.balances.get(account, 0) - cents) for account, cents in expected.items()]
    return Verification(
        mode="inbox" if use_inbox else "no-inbox",
        backend=backend,
        workers=workers,
        seed=stream.seed,
        unique_messages=len(stream.payments),
        published=len(stream.deliveries),
        producer_retries=stream.reasons["producer-retry"],
        concurrent_copies=stream.reasons["concurrent"],
        accounts=len(expected),
        stats=stats,
        ledger_rows=state.ledger_rows,
        ledger_messages=state.ledger_messages,
        inbox_rows=state.inbox_rows,
        expected_balance_cents=sum(expected.values()),
        actual_balance_cents=sum(state.balances.values()),
        account_mismatches=sum(1 for error in errors if error),
        account_error_cents=sum(errors),
    )


def format_cents(cents: int) -> str:
    """``123456`` -> ``"1,234.56"``."""
    return f"{Decimal(cents).scaleb(-2):,.2f}"


def _mark(ok: bool) -> Text:
    return Text("ok", style="green") if ok else Text("MISMATCH", style="bold red")


def count_table(title: str, rows: Sequence[tuple[str, object]]) -> Table:
    """A table of ``(what happened, count)`` rows under ``title``."""
    table = Table(title=title, title_justify="left")
    table.add_column("what happened")
    table.add_column("count", justify="right")
    for label, value in rows:
        table.add_row(label, str(value))
    return table


def _delivery_table(v: Verification) -> Table:
    s = v.stats
    rows = [
        ("unique payments in the stream", v.unique_messages),
        ("copies published (originals + duplicates)", v.published),
        ("  producer retries (same id resent later)", v.producer_retries),
        ("  concurrent copies (adjacent in the queue)", v.concurrent_copies),
        ("crashes after commit, before ack", s.crashes),
        ("failures rolled back and nacked", s.nacks),
        ("redeliveries by the broker (crashes + nacks)", s.redeliveries),
        ("dead-lettered (failed on every delivery)", s.dead_letters),
        ("messages in flight in 2 processes at once", s.concurrent_overlaps),
        ("transactions retried (busy / deadlock)", s.transient_retries),
        ("deliveries handled", s.deliveries),
    ]
    return count_table("At-least-once delivery", rows)


def _verification_table(v: Verification) -> Table:
    checks = v.checks
    table = Table(title=f"Verification ({v.mode}, {v.backend})", title_justify="left")
    for name, justify in (("", "left"), ("expected", "right"), ("actual", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("")
    for label, expected, actual, check, inbox_only in _verification_rows(v):
        if v.use_inbox or not inbox_only:
            table.add_row(label, expected, actual, "" if check is None else _mark(checks[check]))
    return table


def _verification_rows(v: Verification) -> list[tuple[str, str, str, str | None, bool]]:
    """The verification table's rows: ``(what, expected, actual, the check of
    :attr:`Verification.checks` or None, whether the row is shown only with the inbox)``."""
    s, unique = v.stats, str(v.unique_messages)
    return [
        ("deliveries", "", str(s.deliveries), None, False),
        (
            "duplicates skipped",
            str(v.expected_duplicates),
            str(s.duplicates_skipped),
            "duplicates_skipped",
            True,
        ),
        ("unique messages", unique, "", None, False),
        ("processed (handler committed)", unique, str(s.processed), "processed", True),
        ("ledger rows", unique, str(v.ledger_rows), "ledger_rows", False),
        ("inbox rows", unique, str(v.inbox_rows), "inbox_rows", True),
        (
            "balance, sum over accounts",
            format_cents(v.expected_balance_cents),
            format_cents(v.actual_balance_cents),
            "balance_total",
            False,
        ),
        (
            "accounts with a wrong balance",
            "0",
            f"{v.account_mismatches} of {v.accounts}",
            "account_balances",
            False,
        ),
    ]


def _discrepancy(v: Verification) -> str:
    """What is wrong with the ledger, in words: extra or missing rows and money."""
    rows = v.ledger_rows - v.unique_messages
    money = v.actual_balance_cents - v.expected_balance_cents
    parts = []
    if rows:
        parts.append(f"{abs(rows)} ledger rows {'too many' if rows > 0 else 'missing'}")
    if money:
        parts.append(f"{format_cents(abs(money))} {'extra' if money > 0 else 'missing'} in total")
    parts.append(
        f"{v.account_mismatches} accounts off by {format_cents(v.account_error_cents)} altogether"
    )
    if v.stats.dead_letters:
        parts.append(f"{v.stats.dead_letters} copies dead-lettered after repeated failures")
    return "; ".join(parts)


def _verdict(v: Verification) -> Text:
    s = v.stats
    rate = s.deliveries / s.elapsed_s if s.elapsed_s > 0 else 0.0
    timing = f"{s.deliveries} deliveries in {s.elapsed_s:.1f} s ({rate:.0f}/s), seed {v.seed}"
    if v.ok:
        return Text.assemble(
            ("PASS", "bold green"),
            f": every payment applied exactly once; {s.duplicates_skipped} duplicates "
            f"skipped. {timing}.",
        )
    text = Text.assemble(("FAIL", "bold red"), f": {_discrepancy(v)}. {timing}.")
    if not v.use_inbox:
        text.append(
            "\nThis failure is the expected demonstration: without the inbox, every duplicate "
            "delivery was applied again. Run without --no-inbox to see the inbox prevent it.",
            style="yellow",
        )
    return text


def render(verification: Verification) -> Group:
    """The report to print: the delivery counts, the verification table and the verdict."""
    return Group(
        _delivery_table(verification), _verification_table(verification), _verdict(verification)
    )
