"""``sa-inbox demo``: at-least-once payment deliveries applied exactly once through the inbox.

A seeded stream of payments (:mod:`.stream`) is published to a simulated broker
(:mod:`.broker`) with producer retries and concurrent copies; worker processes
(:mod:`.worker`) apply it to an accounts/ledger schema (:mod:`.app`), crashing now and then
between commit and ack; :mod:`.report` checks the ledger against the stream.
:func:`run_demo` (:mod:`.run`) ties it together.
"""

from __future__ import annotations

from .report import Verification as Verification
from .report import render as render
from .run import DemoConfig as DemoConfig
from .run import DemoError as DemoError
from .run import run_demo as run_demo

__all__ = ["DemoConfig", "DemoError", "Verification", "render", "run_demo"]
