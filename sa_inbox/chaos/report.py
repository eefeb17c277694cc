"""The chaos run's result: what happened (tally, kills, rate) and its verification, as a
rich table and as JSON for benchmarks."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..demo.report import count_table, format_cents
from .tally import Tally
from .verify import Verification

__all__ = ["ChaosResult", "render"]


@dataclass(frozen=True)
class ChaosResult:
    """One chaos run.

    :param broker: the broker URL's scheme and host (no credentials).
    :param backend: the database backend name.
    :param name: the queue / stream the run used.
    :param consumers: consumer processes.
    :param kill_every: mean seconds between kills.
    :param seed: the plan's and the killer's seed.
    :param published: messages published (duplicates and poison included).
    :param duplicate_publishes: of those, producer retries of an id published before.
    :param poison: of those, poison messages.
    :param kills: consumers SIGKILLed by the killer.
    :param crashes: consumers that SIGKILLed themselves (``crash_after_commit``,
        ``crash_in_handler``; by kind in ``tally.crashes``).
    :param elapsed_s: seconds from the first publish until nothing was left unsettled.
    :param tally: the consumers' settlements.
    :param verification: the checks.
    """

    broker: str
    backend: str
    name: str
    consumers: int
    kill_every: float
    seed: int
    published: int
    duplicate_publishes: int
    poison: int
    kills: int
    crashes: int
    elapsed_s: float
    tally: Tally
    verification: Verification

    @property
    def ok(self) -> bool:
        """Whether the verification passed."""
        return self.verification.ok

    @property
    def messages_per_s(self) -> float:
        """Unique messages (payments and poison) settled per second."""
        unique = self.verification.unique_payments + self.poison
        return unique / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """Every figure, flat (amounts in cents), the checks and ``ok``."""
        tally, v = self.tally, self.verification
        data = {k: v for k, v in asdict(self).items() if k not in ("tally", "verification")}
        data.update(
            deliveries=tally.deliveries,
            redeliveries=tally.redeliveries,
            processed=tally.processed,
            duplicates_skipped=tally.duplicates,
            retries=tally.retries,
            dead_lettered=len(tally.dead_letters),
            torn_log_lines=tally.torn_lines,
            crashes_after_commit=tally.crashes["after_commit"],
            crashes_in_handler=tally.crashes["in_handler"],
            messages_per_s=round(self.messages_per_s, 1),
            unique_payments=v.unique_payments,
            ledger_rows=v.ledger_rows,
            inbox_rows=v.inbox_rows,
            applied_twice=v.applied_twice,
            unexpected_ids=v.unexpected_ids,
            expected_balance_cents=v.expected_balance_cents,
            actual_balance_cents=v.actual_balance_cents,
            account_mismatches=v.account_mismatches,
            unsettled=v.unsettled,
            poison_ids=v.poison_ids,
            dead_letters=v.dead_letters,
            dead_letters_repeated=v.dead_letters_repeated,
            checks=v.checks,
            ok=self.ok,
        )
        return data


def _mark(ok: bool) -> Text:
    return Text("ok", style="green") if ok else Text("FAIL", style="bold red")


def _run_table(r: ChaosResult) -> Table:
    t = r.tally
    rows = [
        ("published", r.published),
        ("  duplicate publishes (producer retries, same id)", r.duplicate_publishes),
        ("  poison messages (handler always fails)", r.poison),
        ("deliveries settled by a consumer", t.deliveries),
        ("  redeliveries (broker delivery count > 1)", t.redeliveries),
        ("consumers SIGKILLed by the killer", r.kills),
        ("consumers crashed in the handler, before commit", t.crashes["in_handler"]),
        ("consumers crashed after commit, before ack", t.crashes["after_commit"]),
        ("processed (handler committed)", t.processed),
        ("duplicates skipped by the inbox", t.duplicates),
        ("retries (handler failed, handed back)", t.retries),
        ("dead letters (after the delivery limit)", len(t.dead_letters)),
        ("messages/s", f"{r.messages_per_s:.0f}"),
    ]
    return count_table(f"Chaos run on {r.broker} ({r.backend})", rows)


def _verification_table(v: Verification) -> Table:
    checks = v.checks
    table = Table(title="Verification", title_justify="left")
    for column, justify in (("", "left"), ("expected", "right"), ("actual", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    table.add_column("")
    rows = [
        ("ledger rows", v.unique_payments, v.ledger_rows, "ledger_rows"),
        ("ids applied twice", 0, len(v.applied_twice), "no_id_applied_twice"),
        ("ledger ids never published as payments", 0, len(v.unexpected_ids), "only_published_ids"),
        (
            "balance, sum over accounts",
            format_cents(v.expected_balance_cents),
            format_cents(v.actual_balance_cents),
            "balances",
        ),
        ("accounts with a wrong balance", 0, v.account_mismatches, "balances"),
        ("inbox claims", v.unique_payments, v.inbox_rows, "inbox_claims"),
        ("left unsettled on the broker", 0, v.unsettled, "nothing_unsettled"),
        ("dead letters (= poison ids)", len(v.poison_ids), len(set(v.dead_letters)), ""),
    ]
    for label, expected, actual, check in rows:
        mark = _mark(checks[check or "dead_letters_are_poison"])
        table.add_row(label, str(expected), str(actual), mark)
    if v.dead_letters_repeated:
        table.add_row(
            "  dead letters published again (killed between publish and ack)",
            "",
            str(v.dead_letters_repeated),
            "",
        )
    return table


def _verdict(r: ChaosResult) -> Text:
    timing = (
        f"{r.tally.deliveries} deliveries in {r.elapsed_s:.1f} s, {r.kills} kills and "
        f"{r.crashes} self-crashes survived, seed {r.seed}"
    )
    if r.ok:
        poison = ", the poison messages dead-lettered" if r.poison else ""
        return Text.assemble(
            ("PASS", "bold green"),
            f": every payment applied exactly once (0 lost, 0 applied twice){poison}. {timing}.",
        )
    failed = ", ".join(name for name, ok in r.verification.checks.items() if not ok)
    text = Text.assemble(("FAIL", "bold red"), f": {failed}. {timing}.")
    healthy = set(r.verification.dead_letters) - set(r.verification.poison_ids)
    if healthy:
        text.append(
            f"\n{len(healthy)} payments were dead-lettered, not applied: consumers were killed "
            "while holding them until they reached the delivery limit. Raise "
            "--max-deliveries or --kill-every.",
            style="yellow",
        )
    return text


def render(result: ChaosResult) -> Group:
    """The report to print: what happened, the verification table and the verdict."""
    return Group(_run_table(result), _verification_table(result.verification), _verdict(result))
