"""A host-side Unix socket that relays to a proxy's TCP address, for a proxy that has no Unix socket of its own.

alight's own proxy listens on a Unix socket too (Proxy.unix_path) and needs none of this; the relay is for an
episode whose base URL points at some other proxy. One relay per episode, on the caller's event loop.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile


class Relay:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self._dir = tempfile.mkdtemp(prefix="alight-rl-")
        self.path = os.path.join(self._dir, "proxy.sock")
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> "Relay":
        self._server = await asyncio.start_unix_server(self._serve, self.path)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()
            if task is not None:
                self._tasks.discard(task)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        shutil.rmtree(self._dir, ignore_errors=True)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(256 * 1024):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, asyncio.CancelledError):
        pass
