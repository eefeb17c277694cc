"""``sa-inbox chaos``: payments through a live broker, consumers SIGKILLed at random, verified.

The command parses its options and calls :func:`sa_inbox.chaos.run.run_chaos`, imported
only when it runs. Exit codes (:mod:`._common`): 0 every payment applied exactly once and
every check passed, 1 a check failed, 2 usage error, 3 the run could not finish (broker or
database unreachable, a consumer failed, timeout), 130 interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..brokers.schemes import BROKERS
from ..exc import MissingExtra
from ._common import (
    POSITIVE,
    SHARE,
    WAIT,
    CannotRun,
    FiniteRange,
    check_url,
    finish,
    json_option,
    setting,
    stop_on_interrupt,
    url_option,
)

if TYPE_CHECKING:
    from ..chaos.run import ChaosConfig

__all__ = ["BROKER_EXTRAS", "chaos", "check_broker", "database_url", "run_and_report"]

#: The ``pip install 'sa-inbox[extra]'`` extra of each broker URL scheme's client library.
BROKER_EXTRAS = BROKERS


def _missing_client(broker: str, exc: ImportError) -> str:
    """The message for a broker client (or, for NATS, an async database driver) that
    cannot be imported, naming the extra to install."""
    scheme = broker.split("://", 1)[0].lower()
    text = f"a library the {scheme}:// driver needs is not installed ({exc}): "
    text += f"pip install 'sa-inbox[{BROKER_EXTRAS.get(scheme, scheme)}]'"
    if scheme == "nats":
        text += " (nats-py is asyncio only: the database's async driver too, e.g. [aiosqlite])"
    return text


def check_broker(ctx: click.Context, param: click.Parameter, url: str | None) -> str | None:
    """A ``--broker`` option's callback: the URL's scheme must have a chaos driver.

    :raises click.BadParameter: (exit 2) for another scheme.
    """
    from ..chaos.drivers import SCHEMES

    if url is None:
        return None
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise click.BadParameter(
            "expected a broker URL: " + ", ".join(f"{scheme}://..." for scheme in sorted(SCHEMES)),
            ctx=ctx,
            param=param,
        )
    return url


def database_url(url: str) -> str:
    """The ``--url`` checked, as a string with its password (the consumer processes connect
    with it).

    :raises click.ClickException: as :func:`._common.check_url` (exit 2 for an async
        driver's URL: the consumers run on the synchronous core; 3).
    """
    sync_only = (
        "the chaos consumers run on the synchronous core (the NATS ones make their async "
        "engine from its URL)"
    )
    return check_url(url, sync_only=sync_only).render_as_string(hide_password=False)


@click.command("chaos")
@click.option(
    "--broker",
    required=True,
    callback=check_broker,
    help="Broker URL: amqp://..., redis://..., nats://..., kafka://..., sqs://...",
)
@url_option("Database URL; the run drops and creates its own chaos_* tables there.")
@setting("--messages", 1000, POSITIVE, "Unique payment messages.")
@setting("--consumers", 3, POSITIVE, "Consumer processes.")
@setting(
    "--kill-every",
    1.0,
    WAIT,
    "Mean seconds between two SIGKILLs of a random consumer (exponential); 0: none.",
)
@click.option(
    "--max-kills",
    default=None,
    type=click.IntRange(min=0),
    help="Stop killing after this many SIGKILLs (default: no limit). A healthy message's "
    "deliveries end by a kill at most this often (and by a --crash-* at most as often as "
    "messages crash): a --max-deliveries above the two keeps every one from the dead letters.",
)
@setting(
    "--duplicates",
    0.1,
    SHARE,
    "Share of payments published again with the same message_id (producer retries).",
)
@setting(
    "--poison",
    0,
    click.IntRange(min=0),
    "Poison messages, whose handler always fails (they must be dead-lettered).",
)
@setting(
    "--max-deliveries",
    5,
    POSITIVE,
    "Deliveries of a message before it goes to the dead-letter queue / stream.",
)
@setting(
    "--crash-after-commit",
    0.0,
    SHARE,
    "Share of messages whose first delivery SIGKILLs its consumer after the commit, "
    "before the ack (on top of the killer's random kills).",
)
@setting(
    "--crash-in-handler",
    0.0,
    SHARE,
    "Share of messages whose first delivery SIGKILLs its consumer in the handler, "
    "after its writes, before the commit.",
)
@click.option("--seed", type=int, default=None, help="Seed of the plan and the killer.")
@click.option(
    "--timeout",
    default=None,
    type=FiniteRange(min=1),
    help="Seconds the run may take; past it the run fails (exit 3). "
    "Default: 300 s + 50 ms per message.",
)
@click.option(
    "--name",
    default=None,
    help="Queue / stream name (default: sa-inbox-chaos-<random>); any earlier one of "
    "that name is deleted.",
)
@click.option(
    "--log-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the consumers' settlement logs (JSON lines) and stderr in this directory.",
)
@json_option("Also write every figure and check to this JSON file.")
def chaos(
    broker: str,
    url: str,
    messages: int,
    consumers: int,
    kill_every: float,
    max_kills: int | None,
    duplicates: float,
    poison: int,
    max_deliveries: int,
    crash_after_commit: float,
    crash_in_handler: float,
    seed: int | None,
    timeout: float | None,
    name: str | None,
    log_dir: Path | None,
    json_path: Path | None,
) -> None:
    """Publish payments to a live broker, SIGKILL consumers at random, verify the ledger.

    A producer publishes the payments (some twice with the same message_id, some poison);
    consumer processes apply them through sa-inbox while a killer SIGKILLs one at random
    intervals and restarts it. Exit code 0 if every payment was applied exactly once,
    nothing is left unsettled and the dead letters are the poison messages; 1 if not.
    """
    from ..chaos.run import ChaosConfig

    if crash_in_handler > 0 and broker.startswith("kafka://"):
        raise click.BadParameter(
            "Kafka keeps no delivery count: a record whose handler kills its process comes "
            "back as a first delivery every time, so it would crash its consumer forever",
            param_hint="--crash-in-handler",
        )
    config = ChaosConfig(
        broker=broker,
        url=database_url(url),
        messages=messages,
        consumers=consumers,
        kill_every=kill_every,
        max_kills=max_kills,
        duplicates=duplicates,
        poison=poison,
        max_deliveries=max_deliveries,
        crash_after_commit=crash_after_commit,
        crash_in_handler=crash_in_handler,
        seed=seed,
        timeout=timeout if timeout is not None else 300.0 + 0.05 * messages,
        name=name,
        log_dir=log_dir,
    ).with_seed()
    run_and_report(config, json_path)


def run_and_report(
    config: ChaosConfig, json_path: Path | None, *, title: str = "sa-inbox chaos"
) -> None:
    """Run the chaos run of ``config``, print its report, write its JSON.

    :param config: with a seed and a name (:meth:`ChaosConfig.with_seed`).
    :param title: the first word(s) of the header line.
    :param json_path: where to write :meth:`ChaosResult.to_json`, or None.
    :raises CannotRun: (exit 3) if the run could not finish: no driver for the broker's
        scheme, the broker or the database unreachable, a consumer failed, the timeout.
    :raises MissingExtra: (exit 2) if the broker's extra is not installed.
    :raises SystemExit: 1 if the verification failed, 130 on Ctrl-C.
    """
    from rich.console import Console

    from ..chaos.report import render
    from ..chaos.run import run_chaos

    console = Console()
    console.print(
        f"{title}: {config.messages} payments, {config.consumers} consumers, "
        f"a kill every ~{config.kill_every:g} s, seed {config.seed}, queue {config.name}"
    )
    try:
        with stop_on_interrupt(console, "consumers"):
            result = run_chaos(config, console=Console(stderr=True))
    except MissingExtra:
        raise  # exit 2 (._common.Group): the broker's extra is not installed
    except ImportError as exc:
        raise CannotRun(_missing_client(config.broker, exc)) from exc
    except Exception as exc:  # the broker's, the database's, a consumer's: one line, exit 3
        raise CannotRun(f"the chaos run could not finish: {type(exc).__name__}: {exc}") from exc
    finish(console, render(result), result, json_path)
