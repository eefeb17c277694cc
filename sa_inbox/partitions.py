"""Moved to :mod:`sa_inbox.retention.partitions`; this alias stays for one release (0.2) and
is removed in 0.3. It raises no DeprecationWarning, so test suites run with
``filterwarnings = error`` keep working."""

from __future__ import annotations

from .retention.partitions import *  # noqa: F403
from .retention.partitions import __all__ as __all__
