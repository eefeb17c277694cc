"""A replay process for the crash tests:
``python -m tests.backends.brokers.dead_letter_child BROKER URL QUEUE AT``.

It replays QUEUE's dead letters with :func:`sa_inbox.brokers.dead_letters.replay` and, at
the AT-th dead letter, hangs until the parent SIGKILLs it: RabbitMQ and NATS after the
publish to the source was confirmed and before the dead letter is removed (it prints
``PUBLISHED <ref>``); Redis, whose move is one atomic script, after the AT-th move (``MOVED
<ref>``). It prints ``PID <pid>`` first.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from sa_inbox.brokers.dead_letters import replay
from tests.support.child import say

HANG_SECONDS = 120


def hang_at(at: int, word: str) -> Any:
    """A callback counting its calls that says ``<word> <ref>`` and hangs at the ``at``-th."""
    calls = [0]

    def reached(ref: str) -> None:
        calls[0] += 1
        if calls[0] == at:
            say(f"{word} {ref}")
            time.sleep(HANG_SECONDS)

    return reached


def main(broker: str, url: str, queue: str, at: int) -> None:
    if broker == "rabbitmq":
        from sa_inbox.brokers.dead_letters.rabbitmq import RabbitMQDeadLetters

        reached = hang_at(at, "PUBLISHED")
        remove = RabbitMQDeadLetters._remove

        def remove_rabbit(self: Any, method: Any) -> None:
            reached(f"delivery tag {method.delivery_tag}")
            remove(self, method)

        RabbitMQDeadLetters._remove = remove_rabbit  # type: ignore[method-assign]
    elif broker == "nats":
        from sa_inbox.brokers.dead_letters.nats import NatsDeadLetters

        reached = hang_at(at, "PUBLISHED")
        remove_async = NatsDeadLetters._remove

        async def remove_nats(self: Any, letter: Any) -> bool:
            reached(letter.ref)  # blocks the event loop too
            return await remove_async(self, letter)

        NatsDeadLetters._remove = remove_nats  # type: ignore[method-assign]
    else:
        from sa_inbox.brokers.dead_letters.redis import RedisDeadLetters

        reached = hang_at(at, "MOVED")
        move = RedisDeadLetters.move

        def move_redis(self: Any, letter: Any) -> bool:
            moved = move(self, letter)
            reached(letter.ref)
            return moved

        RedisDeadLetters.move = move_redis  # type: ignore[method-assign]
    say(f"PID {os.getpid()}")
    replay(url, queue, dry_run=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
