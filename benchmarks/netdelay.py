"""A network round trip between a benchmark and its database server: 1 ms by default.

On loopback a round trip costs some 50-100 µs, so one statement more per transaction hardly
shows; across availability zones it costs 0.5-1 ms. :class:`DelayProxy` adds it: an asyncio
TCP proxy, in a process of its own, that holds every chunk it relays for ``delay_ms`` before
passing it on, in each direction (so a round trip gains twice ``delay_ms``), in order.

The proxy's event loop waits with ``select()`` (microsecond timeouts), not asyncio's default
``epoll_wait``, whose timeouts are whole milliseconds and would hold each chunk a full
millisecond. ``tc netem`` on a veth pair would put the delay in the kernel instead; the
kernel of the machine these figures come from has no ``sch_netem`` ("Specified qdisc kind
is unknown"), hence the proxy. Under load its process is scheduled late at times: both
sides of a comparison cross the same proxy, alternately, so a ratio stays fair, and
:func:`round_trip_us` measures the round trip it really adds.

Run alone::

    python -m benchmarks.netdelay --port 6543 --to 127.0.0.1:5432 --delay-ms 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import selectors
import socket
import subprocess
import sys
import time
from types import TracebackType

import sqlalchemy as sa

__all__ = ["DelayProxy", "round_trip_us"]


class DelayProxy:
    """A proxy process in front of ``url``'s server, each direction delayed by ``delay_ms``.

    :param url: the server's SQLAlchemy URL (host and port).
    :param delay_ms: milliseconds each chunk is held, per direction.

    Example::

        with DelayProxy(url, delay_ms=0.5) as proxy:
            engine = sa.create_engine(proxy.url)   # 1 ms more per round trip
    """

    def __init__(self, url: str | sa.URL, delay_ms: float = 0.5) -> None:
        parsed = sa.make_url(url)
        self.delay_ms = delay_ms
        self.target = (parsed.host or "127.0.0.1", int(parsed.port or 5432))
        self.port = _free_port()
        #: ``url`` pointed at the proxy.
        self.url = parsed.set(host="127.0.0.1", port=self.port).render_as_string(
            hide_password=False
        )
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> DelayProxy:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.netdelay",
                "--port",
                str(self.port),
                "--to",
                f"{self.target[0]}:{self.target[1]}",
                "--delay-ms",
                str(self.delay_ms),
            ],
            cwd=root,
        )
        _wait_listening("127.0.0.1", self.port)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_listening(host: str, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def round_trip_us(engine: sa.Engine, count: int = 200) -> float:
    """The median time of ``SELECT 1`` on one open connection of ``engine``, in µs: one
    round trip plus the driver's and the server's least work."""
    samples: list[float] = []
    with engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        cursor = driver.cursor()
        for _ in range(count):
            t0 = time.perf_counter()
            cursor.execute("SELECT 1")
            cursor.fetchall()
            samples.append(time.perf_counter() - t0)
        cursor.close()
        conn.rollback()
    samples.sort()
    return samples[len(samples) // 2] * 1e6


# -- the proxy process ---------------------------------------------------------------------


async def _forward(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
) -> None:
    """Relay ``reader`` to ``writer``, each chunk ``delay`` seconds after it arrived."""
    loop = asyncio.get_running_loop()
    queue: collections.deque[tuple[float, bytes]] = collections.deque()
    arrived = asyncio.Event()

    async def send() -> None:
        while True:
            while not queue:
                arrived.clear()
                await arrived.wait()
            due, data = queue.popleft()
            if not data:
                return
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(65536)
            queue.append((loop.time() + delay, data))
            arrived.set()
            if not data:
                break
        await sender
    finally:
        sender.cancel()
        writer.close()


async def _serve(port: int, target: tuple[str, int], delay: float) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(*target)
        for side in (writer, server_writer):
            side.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            _forward(reader, server_writer, delay),
            _forward(server_reader, writer, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(relay, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def _run_first() -> None:
    """Ask the kernel to run this process as soon as it wakes (``SCHED_FIFO``, else the
    highest nice priority): on a loaded machine a proxy scheduled late adds milliseconds
    to every round trip. It sleeps between chunks, so it takes little CPU from others."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (AttributeError, PermissionError, OSError):
        with contextlib.suppress(OSError):
            os.nice(-20)


def main() -> None:
    parser = argparse.ArgumentParser(description="a TCP proxy delaying each direction")
    parser.add_argument("--port", type=int, required=True, help="the port it listens on")
    parser.add_argument("--to", required=True, help="the server's host:port")
    parser.add_argument("--delay-ms", type=float, default=0.5, help="per direction")
    args = parser.parse_args()
    host, _, port = args.to.rpartition(":")
    _run_first()
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    try:
        loop.run_until_complete(_serve(args.port, (host, int(port)), args.delay_ms / 1000))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
