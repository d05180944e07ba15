"""A host service on 127.0.0.1 that is not the proxy, recording every connection it gets: sandbox tests check that
an episode cannot reach it (it must see nothing)."""

from __future__ import annotations

import socket
import threading


class LoopbackServer:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.seen: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            self.seen.append(str(addr))
            conn.close()

    def close(self) -> None:
        self.sock.close()
