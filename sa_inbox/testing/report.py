"""The report of the exactly-once checks: each test's verdict and each finding, with the
failure mode it names, what was seen, the rule and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field

from .modes import FailureMode

__all__ = ["CHECKS", "Finding", "Report", "Verdict"]

#: The checks in the order they run and are shown: (name, title).
CHECKS = (
    ("key", "key stability"),
    ("sequential", "sequential duplicate"),
    ("concurrent", "concurrent duplicate"),
    ("crash_after_commit", "crash between commit and ack"),
    ("crash_before_commit", "crash before commit"),
)


@dataclass(frozen=True)
class Finding:
    """One thing wrong.

    :param check: the check that found it (a name of :data:`CHECKS`).
    :param mode: the failure mode.
    :param seen: what happened, in a sentence or two (figures from the database).
    """

    check: str
    mode: FailureMode
    seen: str

    def render(self) -> str:
        """Four lines: the mode and check, what was seen, the rule, the fix (unwrapped: a
        terminal wraps them, and each stays one line to search)."""
        title = dict(CHECKS)[self.check]
        return "\n".join(
            [
                f"[{self.mode.name}] {self.mode.title} ({title})",
                f"  seen: {self.seen}",
                f'  the rule: "{self.mode.rule}"',
                f"  fix: {self.mode.fix}",
            ]
        )


@dataclass
class Verdict:
    """One check's result: ``"passed"``, ``"failed"`` or ``"not run"`` (with why)."""

    status: str = "passed"
    note: str = ""


@dataclass
class Report:
    """What :func:`~sa_inbox.testing.check_exactly_once` found.

    :param subject: the consumer checked and where (for the headline).
    """

    subject: str
    verdicts: dict[str, Verdict] = field(
        default_factory=lambda: {name: Verdict() for name, _ in CHECKS}
    )
    findings: list[Finding] = field(default_factory=list)

    def add(self, check: str, mode: FailureMode, seen: str) -> None:
        """Record a finding; its check has failed."""
        self.findings.append(Finding(check, mode, seen))
        self.verdicts[check].status = "failed"

    def skip(self, check: str, why: str) -> None:
        """Mark ``check`` as not run, with the reason."""
        self.verdicts[check] = Verdict("not run", why)

    def note(self, check: str, text: str) -> None:
        """Add a remark to a check's line."""
        verdict = self.verdicts[check]
        verdict.note = f"{verdict.note}; {text}" if verdict.note else text

    def modes(self, check: str | None = None) -> list[str]:
        """The failure modes' names found (by ``check``, if given), in order."""
        return [f.mode.name for f in self.findings if check is None or f.check == check]

    @property
    def passed(self) -> bool:
        return not self.findings

    def render(self) -> str:
        failed = sum(v.status == "failed" for v in self.verdicts.values())
        run = sum(v.status != "not run" for v in self.verdicts.values())
        headline = f"exactly once: {self.subject}: " + (
            "every check passed" if not failed else f"{failed} of {run} checks failed"
        )
        lines = [headline, ""]
        for name, title in CHECKS:
            verdict = self.verdicts[name]
            tags = " ".join(f"[{mode}]" for mode in dict.fromkeys(self.modes(name)))
            status = verdict.status.upper() if verdict.status == "failed" else verdict.status
            line = f"  {title:<36} {status}"
            if tags:
                line += f"  {tags}"
            if verdict.note:
                line += f"  ({verdict.note})"
            lines.append(line)
        for finding in self.findings:
            lines += ["", finding.render()]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()
