"""A loopback TCP proxy in front of Redis that can lose one script's answer on the way back.

Armed, the next connection that sends EVALSHA has that command delivered to
Redis (which applies it) while the answer is thrown away and the connection
closed: exactly a write whose outcome the router cannot know. Everything else
passes through untouched. Armed with `stall=True`, the proxy then also drops every
other connection and refuses new ones until `heal()`: Redis gone quiet right
after it applied the write, so the router's retry cannot reach it either.
"""

from __future__ import annotations

import socket
import threading

from tests.servers import free_port


class ReplyDropper:
    """Forwards 127.0.0.1:`port` to a Redis at `upstream_port`; `arm()` loses one answer."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.armed = threading.Event()
        self.dropped = threading.Event()
        self._stall = False
        self._sockets: list[socket.socket] = []
        self._closing = False
        self._listen()

    def _listen(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    @property
    def url(self) -> str:
        """The redis:// URL that goes through the proxy."""
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, *, stall: bool = False) -> None:
        """Lose the answer to the next script call (EVALSHA) sent through the proxy.

        With `stall`, every connection is then dropped and new ones refused until heal().
        """
        self.dropped.clear()
        self._stall = stall
        self.armed.set()

    def heal(self) -> None:
        """Accept connections again after a stall."""
        self._listen()

    def _stalled(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked on it
        except OSError:
            pass
        self._listener.close()
        for sock in list(self._sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Stop accepting connections."""
        self._closing = True
        self._listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closing:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            losing = threading.Event()
            threading.Thread(target=self._forward, args=(client, upstream, losing),
                             daemon=True).start()
            threading.Thread(target=self._backward, args=(upstream, client, losing),
                             daemon=True).start()

    def _forward(self, client: socket.socket, upstream: socket.socket,
                 losing: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                if self.armed.is_set() and b"EVALSHA" in data:
                    self.armed.clear()
                    losing.set()
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            upstream.close()

    def _backward(self, upstream: socket.socket, client: socket.socket,
                  losing: threading.Event) -> None:
        try:
            while data := upstream.recv(65536):
                if losing.is_set():
                    # Redis applied the script; its answer never reaches the router.
                    # Said before the stall: once the sockets close, the router answers at
                    # once, and the test may look before this thread runs again.
                    self.dropped.set()
                    if self._stall:
                        self._stalled()
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            # shutdown first: a plain close() would wait for the other thread's recv
            # to let go of the socket, and the router would see no end of stream.
            for sock in (client, upstream):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
