"""``sa-inbox demo --broker URL``: the demo's payment stream through a live broker.

The stream is the demo's (same seed, same payments, the same share of producer retries);
instead of the in-process simulated broker (:mod:`.broker`), it is published to and
consumed from RabbitMQ, Redis Streams or NATS JetStream through the chaos run's drivers
(:mod:`sa_inbox.chaos.drivers`), by ``workers`` consumer processes. The demo's crashes are
real: a consumer SIGKILLs itself after the commit of a share ``crash_rate`` of the
messages (on their first delivery), before the ack, and the broker redelivers to another
consumer. The tables are the demo's
(``demo_*``); the report and the verification are the chaos run's (:mod:`sa_inbox.chaos`).
"""

from __future__ import annotations

import uuid

from ..chaos.run import ChaosConfig
from .run import DemoConfig

__all__ = ["TABLE_PREFIX", "live_config"]

#: The demo's table prefix, on a live broker as in process.
TABLE_PREFIX = "demo_"


def live_config(config: DemoConfig, broker: str, url: str) -> ChaosConfig:
    """The chaos run that plays the demo ``config`` on the live ``broker``.

    :param config: the demo's options, with a seed (:meth:`DemoConfig.with_seed`);
        ``concurrent_rate`` does not apply (the live broker decides what runs concurrently)
        and ``use_inbox`` must be True.
    :param broker: the broker URL (``amqp://``, ``redis://``, ``nats://``).
    :param url: the database URL (sync driver).
    :raises ValueError: for a config without a seed or without the inbox.
    """
    if config.seed is None:
        raise ValueError("live_config needs a seed: use config.with_seed()")
    if not config.use_inbox:
        raise ValueError("the demo runs without the inbox only on the in-process broker")
    return ChaosConfig(
        broker=broker,
        url=url,
        messages=config.messages,
        consumers=config.workers,
        kill_every=0.0,
        duplicates=config.duplicate_rate,
        poison=0,
        seed=config.seed,
        crash_after_commit=config.crash_rate,
        name=f"sa-inbox-demo-{uuid.uuid4().hex[:12]}",
        prefix=TABLE_PREFIX,
    )
