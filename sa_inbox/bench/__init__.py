"""The sa-inbox benchmark suite, run by ``sa-inbox bench``.

One module per scenario; each module's docstring (first line) is its label, and each
measured function's docstring is the label of its figures:

* :mod:`.claim_overhead`: the business transaction with and without the claim (ORM, Core,
  raw DBAPI, and one async layer per installed async driver, :mod:`.async_layer`, also
  against a hand-written async insert-or-skip), at 1 … W concurrent worker processes;
* :mod:`.batch_claim`: :meth:`~sa_inbox.Inbox.claim_many` at batch sizes 1 … 1000;
* :mod:`.index_hotspots`: message-id key formats and primary-key column orders under
  concurrent writers: throughput, index size, leaf density, waits;
* :mod:`.growth`: bytes per row at 1 M rows, and the retention calculator;
* :mod:`.purge`: the batched purge of the expired half of 1 M rows: rows deleted per
  second and the longest batch;
* :mod:`.store_drain`: the inbox store: messages received per second, drained per second by
  1 … W worker processes, and one receive against one claim;
* :mod:`.outbox` (run only when named: its relay part needs a RabbitMQ URL): the cost of
  ``outbox.publish()`` in the handler's transaction, and relay throughput with confirms.

Each scenario prints a table and writes JSON; :mod:`.report` turns the JSON into Markdown
tables and PNG plots. The published figures are in the repository's
``benchmarks/RESULTS.md``; the comparisons with other libraries and the one-off studies are
scripts in its ``benchmarks/``, outside the package. Scenario modules are imported only when
asked for, so that ``sa-inbox --help`` stays fast.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["OPTIONAL_SCENARIOS", "SCENARIOS", "scenario"]

#: Scenario names, in the order ``sa-inbox bench`` runs them by default.
SCENARIOS = ("claim_overhead", "batch_claim", "index_hotspots", "growth", "purge", "store_drain")
#: Scenarios run only when named (``sa-inbox bench outbox --broker amqp://…``).
OPTIONAL_SCENARIOS = ("outbox",)


def scenario(name: str) -> ModuleType:
    """The module of scenario ``name`` (one of :data:`SCENARIOS`).

    :raises ValueError: for an unknown name.
    """
    known = (*SCENARIOS, *OPTIONAL_SCENARIOS)
    if name not in known:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(known)}")
    return importlib.import_module(f"{__name__}.{name}")
