"""Listening sockets handed to the proxy by sandboxes, served like its own port.

A sandboxed episode has its own network namespace. Its forwarder binds 127.0.0.1:<proxy port> THERE and sends
the listening socket over a Unix socket (SCM_RIGHTS); the proxy then accepts the harness's connections straight
from that namespace on its own event loop: no relay process in the path, no added cost per call. The sandbox
keeps the control connection open for its whole life; when it closes (the episode ended) the socket is closed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Awaitable, Callable

__all__ = ["LISTENERS_SOCKET", "ListenerInbox"]

LISTENERS_SOCKET = "listeners.sock"
"""The inbox's file name, beside the proxy's HTTP Unix socket in the same private folder. Nobody derives it: the
proxy publishes the full path (Proxy.listeners_path) and an episode is handed it (EpisodeSpec.proxy_listeners)."""

log = logging.getLogger(__name__)


Serve = Callable[[socket.socket], Awaitable[asyncio.AbstractServer]]


class ListenerInbox:
    def __init__(self, serve: Serve):
        self.serve = serve
        self.path = ""
        self._listener: socket.socket | None = None
        self._open: dict[socket.socket, asyncio.AbstractServer | None] = {}

    def start(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        self.path = path
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        os.chmod(path, 0o600)
        self._listener.listen(256)
        self._listener.setblocking(False)
        loop.add_reader(self._listener.fileno(), self._accept)

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        conn.setblocking(False)
        self._open[conn] = None
        asyncio.get_running_loop().add_reader(conn.fileno(), self._on_control, conn)

    def _on_control(self, conn: socket.socket) -> None:
        try:
            data, fds, _flags, _addr = socket.recv_fds(conn, 16, 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds = b"", []
        if data and fds and self._open.get(conn) is None:
            sock = socket.socket(fileno=fds[0])
            for extra in fds[1:]:
                os.close(extra)
            asyncio.ensure_future(self._serve(conn, sock))
            return
        for fd in fds:
            os.close(fd)
        if not data:  # the sandbox is gone: stop serving its socket
            self._close(conn)

    async def _serve(self, conn: socket.socket, sock: socket.socket) -> None:
        try:
            server = await self.serve(sock)
        except OSError as exc:
            log.warning("cannot serve a sandbox's listening socket: %s", exc)
            sock.close()
            self._close(conn)
            return
        if conn not in self._open:  # closed while we were starting
            server.close()
            return
        self._open[conn] = server
        try:
            conn.send(b"K")  # the forwarder starts the harness only after this
        except OSError:
            self._close(conn)

    def _close(self, conn: socket.socket) -> None:
        server = self._open.pop(conn, None)
        if server is not None:
            server.close()
        try:
            asyncio.get_running_loop().remove_reader(conn.fileno())
        except (ValueError, RuntimeError):
            pass
        conn.close()

    def close(self) -> None:
        for conn in list(self._open):
            self._close(conn)
        if self._listener is not None:
            try:
                asyncio.get_running_loop().remove_reader(self._listener.fileno())
            except RuntimeError:
                pass
            self._listener.close()
            self._listener = None
