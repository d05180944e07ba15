"""The relay of forwarder.py's `relay` mode (a proxy other than alight's, reached through its HTTP Unix socket):
every connection accepted on the sandbox's loopback listener is piped to that socket and back.

Loaded only in relay mode, next to forwarder.py inside the sandbox (both compiled to .pyc by bwrap.py). One
thread, one `selectors` loop, no asyncio: each byte costs one recv and one send, idle connections cost nothing,
and a slow reader stops us reading from its peer past HIGH_WATER bytes (back-pressure).
"""

import selectors
import socket

CHUNK = 256 * 1024
HIGH_WATER = 4 * 1024 * 1024
"""Bytes queued for a slow reader before we stop reading from its peer (back-pressure)."""


class Pipe:
    """One direction of one relayed connection."""

    __slots__ = ("src", "dst", "buf", "eof", "peer")

    def __init__(self, src, dst):
        self.src, self.dst, self.buf, self.eof, self.peer = src, dst, bytearray(), False, None


class Relay:
    def __init__(self, listener, unix_path):
        self.sel = selectors.DefaultSelector()
        self.listener, self.unix_path = listener, unix_path
        self.sel.register(listener, selectors.EVENT_READ, None)
        self.pipes = {}  # socket -> [reading pipe (src is socket), writing pipe (dst is socket)]

    def _accept(self):
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.unix_path)
        except OSError:
            client.close()
            upstream.close()
            return
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.setblocking(False)
        upstream.setblocking(False)
        out, back = Pipe(client, upstream), Pipe(upstream, client)
        out.peer, back.peer = back, out
        self.pipes[client] = [out, back]
        self.pipes[upstream] = [back, out]
        self.sel.register(client, selectors.EVENT_READ, None)
        self.sel.register(upstream, selectors.EVENT_READ, None)

    def _rearm(self, sock):
        if sock not in self.pipes:
            return
        reading, writing = self.pipes[sock]
        events = (0 if reading.eof or len(reading.buf) >= HIGH_WATER else selectors.EVENT_READ)
        events |= selectors.EVENT_WRITE if writing.buf else 0
        try:
            key = self.sel.get_key(sock)
        except KeyError:
            key = None
        if not events:
            if key is not None:
                self.sel.unregister(sock)
        elif key is None:
            self.sel.register(sock, events, None)
        elif key.events != events:
            self.sel.modify(sock, events, None)

    def _close(self, sock):
        for s in (sock, self.pipes[sock][0].dst):
            if s in self.pipes:
                del self.pipes[s]
                try:
                    self.sel.unregister(s)
                except (KeyError, ValueError):
                    pass
                s.close()

    def _on_read(self, sock):
        pipe = self.pipes[sock][0]
        try:
            data = sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(sock)
            return
        if not data:
            pipe.eof = True
            if not pipe.buf:
                self._shutdown_write(pipe)
        elif pipe.buf:
            pipe.buf += data
        else:
            try:
                sent = pipe.dst.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._close(sock)
                return
            if sent < len(data):
                pipe.buf += data[sent:]
        if sock in self.pipes:
            self._rearm(sock)
            self._rearm(pipe.dst)

    def _on_write(self, sock):
        pipe = self.pipes[sock][1]
        try:
            sent = sock.send(pipe.buf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(sock)
            return
        del pipe.buf[:sent]
        if not pipe.buf and pipe.eof:
            self._shutdown_write(pipe)
        if sock in self.pipes:
            self._rearm(sock)
            self._rearm(pipe.src)

    def _shutdown_write(self, pipe):
        try:
            pipe.dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        if pipe.peer.eof and not pipe.peer.buf and pipe.src in self.pipes:
            self._close(pipe.src)

    def serve_until(self, wake_fd, done):
        """Relay until done() says so; done() is asked only when wake_fd (the signal pipe) stirs, or every
        half second: no extra system calls per relayed chunk."""
        while True:
            ready = self.sel.select(0.5)
            if not ready or any(key.fileobj == wake_fd for key, _ in ready):
                if done():
                    return
            for key, events in ready:
                sock = key.fileobj
                if sock == wake_fd:
                    continue
                if sock is self.listener:
                    self._accept()
                    continue
                if events & selectors.EVENT_WRITE and sock in self.pipes:
                    self._on_write(sock)
                if events & selectors.EVENT_READ and sock in self.pipes:
                    self._on_read(sock)
