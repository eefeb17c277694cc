"""Moved to :mod:`sa_inbox.store.worker`; this alias stays for one release (0.2) and is
removed in 0.3. It raises no DeprecationWarning, so test suites run with
``filterwarnings = error`` keep working."""

from __future__ import annotations

from .store.worker import *  # noqa: F403
from .store.worker import __all__ as __all__
