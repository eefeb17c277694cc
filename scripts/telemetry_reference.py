"""Write docs/reference/telemetry.md, the log events, spans and metrics of
sa_inbox.hooks.names (tests/unit/hooks/test_names.py checks that it is current).

    .venv/bin/python scripts/telemetry_reference.py
"""

from __future__ import annotations

from pathlib import Path

from sa_inbox.hooks.names import reference

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "telemetry.md"


def main() -> None:
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(reference())
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
