"""``python -m sa_inbox.cli``: the ``sa-inbox`` command (as the console script)."""

from __future__ import annotations

from . import main

__all__: list[str] = []

if __name__ == "__main__":
    main()
