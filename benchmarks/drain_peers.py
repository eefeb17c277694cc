"""Other libraries' drains as contenders of the ``store_drain`` scenario
(:mod:`sa_inbox.bench.store_drain`): a peer is a module, named by its import path, with the
attributes of :class:`Peer`; :class:`WithPeers` is the scenario with them in its no-op cells.

::

    scenario = WithPeers(load_peers(["benchmarks.pactix_peer"]))
    run_scenario(scenario, config, console=console, progress=progress)

writes ``<out>/store_drain-<backend>.json``, as ``sa-inbox bench store_drain`` does, with a
``batch / <peer>`` column per peer (``benchmarks/peer_pactix_drain.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from rich.progress import Progress
from rich.table import Table

from sa_inbox.bench import store_drain
from sa_inbox.bench.runner import BenchConfig
from sa_inbox.bench.workers import BenchError, WorkerPool

__all__ = ["Peer", "WithPeers", "load_peers"]


class Peer(Protocol):
    """Another library's drain: a module importable in the worker processes too, with these
    and a :data:`~sa_inbox.bench.workers.WorkerFunction` ``drain_worker`` (params: ``url``)
    that drains what :meth:`receive` stored and returns its ``done`` and ``errors``."""

    __name__: str
    #: The contender's name in the results (``x_<NAME>``: batch over this peer).
    NAME: str

    def available(self, url: str) -> bool:
        """Whether this peer runs on ``url``'s backend here (its library importable)."""
        ...

    def receive(self, url: str, messages: int) -> float:
        """Store ``messages`` pending messages in the peer's own table; the seconds taken."""
        ...

    def check(self, url: str, messages: int) -> None:
        """:raises BenchError: unless every message was processed; then drop the table."""
        ...


def load_peers(paths: Sequence[str]) -> dict[str, Peer]:
    """The :class:`Peer` modules at ``paths`` (import paths), by their ``NAME``.

    :raises BenchError: if a name is one of sa-inbox's own contenders or given twice.
    """
    peers: dict[str, Peer] = {}
    for path in paths:
        peer = cast(Peer, importlib.import_module(path))
        if peer.NAME in (*store_drain.OWN, *peers):
            raise BenchError(f"peer {path}: contender name {peer.NAME!r} is already taken")
        peers[peer.NAME] = peer
    return peers


def _drain(peer: Peer) -> store_drain.OtherDrain:
    """``peer`` as a contender of one no-op cell: receive, drain, check."""

    def drain(
        pool: WorkerPool, url: str, messages: int, workers: int
    ) -> tuple[float, list[dict[str, Any]]]:
        receive_seconds = peer.receive(url, messages)
        results = pool.run(f"{peer.__name__}:drain_worker", {"url": url}, workers)
        peer.check(url, messages)
        return receive_seconds, results

    return drain


class WithPeers:
    """The ``store_drain`` scenario (a :class:`~sa_inbox.bench.runner.Scenario`) with
    ``peers`` in its no-op cells, each where it runs on the backend (``Peer.available``).

    :param peers: by contender name, as :func:`load_peers` gives them.
    """

    def __init__(self, peers: Mapping[str, Peer]) -> None:
        #: The scenario's name and label: its JSON and report section are store_drain's.
        self.__name__ = store_drain.__name__
        self.__doc__ = store_drain.__doc__
        self.peers = dict(peers)

    def run(self, config: BenchConfig, progress: Progress) -> dict[str, Any]:
        """:func:`sa_inbox.bench.store_drain.run` with the peers that run on
        ``config.url``."""
        others = {n: _drain(p) for n, p in self.peers.items() if p.available(config.url)}
        return store_drain.run(config, progress, others)

    def table(self, results: Mapping[str, Any]) -> Table:
        """:func:`sa_inbox.bench.store_drain.table`: a ``batch / <peer>`` column per peer."""
        return store_drain.table(results)
