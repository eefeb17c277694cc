"""The chaos run: a live broker, consumer processes killed at random, and the proof that every
payment was applied exactly once (``sa-inbox chaos``).

============================  ============================================================
module                        concern
============================  ============================================================
:mod:`.workload`              the payments plan, its expected state, the handler
:mod:`.consumer`              the consumer process (``python -m sa_inbox.chaos.consumer``)
:mod:`.supervisor`            the killer: start, SIGKILL at random, restart
:mod:`.tally`                 the consumers' settlement logs, counted
:mod:`.verify`                the database and the broker against the plan
:mod:`.report`                the result: rich tables and JSON
:mod:`.run`                   the orchestration, :func:`.run.run_chaos`
:mod:`.drivers`               one :class:`~.drivers.ChaosDriver` per broker, by URL scheme
============================  ============================================================

The database failover run (PostgreSQL primary + standby) is ``benchmarks/failover.py`` in
the repository, outside the package. Nothing is imported here, so that a consumer process
imports only what it runs.
"""

from __future__ import annotations

__all__: list[str] = []
