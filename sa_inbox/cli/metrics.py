"""``--metrics-port`` and ``--metrics-host`` of ``sa-inbox worker`` and ``sa-inbox relay``:
the process's Prometheus metrics served by ``prometheus_client.start_http_server``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ._common import CannotRun

__all__ = ["metrics_options", "serve_metrics"]


def metrics_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--metrics-port`` (none: no metrics served) and ``--metrics-host``."""
    options = [
        click.option(
            "--metrics-port",
            type=click.IntRange(1, 65535),
            default=None,
            help="Serve the metrics for Prometheus on this port, at /metrics (needs the "
            "[prometheus] extra).",
        ),
        click.option(
            "--metrics-host",
            default="127.0.0.1",
            show_default=True,
            help="The address the metrics are served on (0.0.0.0: every interface).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def serve_metrics(port: int | None, host: str, role: str) -> Any:
    """Start serving the default registry on ``host:port``; return what feeds it: the
    worker's :class:`~sa_inbox.hooks.prometheus.PrometheusHooks` (``role`` ``"worker"``) or
    the relay's :meth:`RelayMetrics.observe
    <sa_inbox.hooks.prometheus.RelayMetrics.observe>` (``"relay"``); None without a port.

    :raises MissingExtra: (exit 2) without ``prometheus_client``.
    :raises CannotRun: (exit 3) if the port cannot be bound.
    """
    if port is None:
        return None
    from prometheus_client import start_http_server

    from ..hooks.prometheus import PrometheusHooks, RelayMetrics  # MissingExtra first

    fed = PrometheusHooks() if role == "worker" else RelayMetrics().observe
    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        raise CannotRun(f"cannot serve the metrics on {host}:{port}: {exc}") from exc
    click.echo(f"{role} metrics on http://{host}:{port}/metrics", err=True)
    return fed
