"""A TCP proxy in front of a database server, to take the database away for N seconds in an
integration test.

Point the consumers at :attr:`DatabaseProxy.url` (the database's URL with the proxy's host
and port); :meth:`DatabaseProxy.outage` then resets every open connection (a TCP RST, as a
server that crashed leaves them) and refuses new ones (nothing listens on the port) for the
given seconds, and accepts again after. That is what a client sees of a server crash and
restart, and it needs no control over the server: it works against a database in Docker, a
CI service container or a managed instance, and the database comes back at once, without a
restart's recovery time. What it does not show is the server's own side of a crash (crash
recovery, a shutdown's ``57P01`` / ``1053`` message); kill the server for those.

Threads, one pair per connection; for tests only.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import TracebackType

import sqlalchemy as sa

from ..exc import InvalidArgument
from ..validation import positive_seconds

__all__ = ["DatabaseProxy"]

_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "oracle": 1521, "mssql": 1433}
_CHUNK = 65536


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP RST (SO_LINGER 0), as a crashed peer does."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class DatabaseProxy:
    """Relays TCP connections to the database server of ``url``.

    :param url: the database's URL (a server's: SQLite has no connection to cut).
    :param host: the address the proxy listens on.
    :param port: its port; 0 picks a free one, kept across outages.
    :raises InvalidArgument: for a URL without a server.

    Example::

        with DatabaseProxy(database_url) as proxy:
            engine = create_engine(proxy.url)     # the consumers' engine
            ...                                   # start consumers, publish
            proxy.outage(15)                      # 15 s without the database
    """

    def __init__(self, url: str | sa.URL, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.target_url = sa.make_url(url)
        backend = self.target_url.get_backend_name()
        server = self.target_url.host
        if backend == "sqlite" or not server or server.startswith("/"):
            raise InvalidArgument(
                f"DatabaseProxy relays TCP to a database server: give a URL with the "
                f"server's host and port, not {self.target_url.render_as_string()}"
            )
        self.target = (server, self.target_url.port or _DEFAULT_PORTS.get(backend, 0))
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._pairs: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        #: Connections relayed so far, and connections reset by outages.
        self.connections = 0
        self.resets = 0

    @property
    def url(self) -> str:
        """The database's URL through the proxy (password kept)."""
        return self.target_url.set(host=self.host, port=self.port).render_as_string(
            hide_password=False
        )

    # -- running -------------------------------------------------------------------------

    def start(self) -> DatabaseProxy:
        """Listen (again, on the same port) and relay."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        self._spawn(self._accept, listener)
        return self

    def close(self) -> None:
        """Stop listening and reset every connection."""
        self.cut()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = [t for t in self._threads if t.is_alive()]

    def __enter__(self) -> DatabaseProxy:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def cut(self) -> None:
        """Take the database away: refuse new connections, reset the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            pairs, self._pairs = self._pairs, set()
        if listener is not None:
            listener.close()
        for sock in pairs:
            _reset(sock)
        self.resets += len(pairs) // 2

    def restore(self) -> None:
        """Give the database back (listen again)."""
        if self._listener is None:
            self.start()

    def outage(self, seconds: float) -> None:
        """:meth:`cut`, wait ``seconds``, :meth:`restore` (blocks).

        :raises InvalidArgument: for seconds <= 0.
        """
        with self.down():
            time.sleep(positive_seconds(seconds, "seconds", InvalidArgument))

    @contextmanager
    def down(self) -> Iterator[None]:
        """The database is away while the block runs."""
        self.cut()
        try:
            yield
        finally:
            self.restore()

    # -- relaying ------------------------------------------------------------------------

    def _spawn(self, target: Callable[..., object], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="db-proxy")
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by cut()
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    _reset(client)
                    _reset(server)
                    return
                self._pairs |= {client, server}
                self.connections += 1
            self._spawn(self._pump, client, server)
            self._spawn(self._pump, server, client)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        with self._lock:
            ended = source in self._pairs
            self._pairs -= {source, sink}
        if ended:  # a peer closed: close the other side too
            for sock in (source, sink):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
