"""Chaos on the live Galera cluster (small): store workers on the three nodes drain a store
while one node is SIGKILLed and restarted (IST rejoin); every message is applied exactly
once on every node. The bigger runs are ``benchmarks/galera_chaos.py`` (RESULTS.md)."""

from __future__ import annotations

import pytest

from tests.support.galera_chaos import run_galera_chaos

pytestmark = [pytest.mark.backend, pytest.mark.slow]


def test_a_node_killed_and_restarted_mid_run_every_message_applied_once(
    galera_urls: list[str], galera_dir: str
) -> None:
    figures = run_galera_chaos(galera_urls, galera_dir, messages=600, kills=1, seed=16)
    print(figures.as_dict())
    assert figures.kills == 1 and figures.rejoined_by == ["IST"]
    assert figures.exactly_once, figures.as_dict()
    assert figures.reasons == ["empty"] * 3, figures.as_dict()
