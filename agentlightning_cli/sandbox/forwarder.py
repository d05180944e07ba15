"""Inside the sandbox: listen on 127.0.0.1:<port>, relay every connection to the proxy's Unix socket, and run
the episode's command as a child; exit with the child's status.

Run as a plain script with the host's interpreter (`python -I -S forwarder.py SOCKET PORT -- argv...`), so it
imports only the standard library and starts in a few milliseconds. With `--hand-over CONTROL PORT` it relays
nothing: it sends the bound listening socket to the proxy (alight's own proxy takes it, see
proxy/listener_inbox.py), which then accepts the harness's connections itself. The listening socket is bound BEFORE the
command starts, so the harness can never race it. One thread, one `selectors` loop, no asyncio: each byte
costs one recv and one send, and idle connections cost nothing.

Exit status: the child's exit code, or 128 + N when it died of signal N (like a shell), so the runner can tell
a SIGXCPU / SIGXFSZ (per-process CPU / file-size limit) from an ordinary failure.
"""

import os
import sys

# The hand-over path (the default) starts with only C modules: `socket`, `signal` and `selectors` import enum
# and friends (~15 ms of start-up per episode). The relay path loads them (see _relay_modules).
selectors = signal = socket = None

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


def _relay_modules():
    global selectors, signal, socket
    import selectors
    import signal
    import socket


def _listen(sock_module, port):
    listener = sock_module.socket(sock_module.AF_INET, sock_module.SOCK_STREAM)
    listener.setsockopt(sock_module.SOL_SOCKET, sock_module.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(256)
    return listener


def main(argv):
    sep = argv.index("--")
    hand_over = argv[1] == "--hand-over"
    args = argv[2:sep] if hand_over else argv[1:sep]
    unix_path, port, command = args[0], int(args[1]), argv[sep + 1:]
    if hand_over:
        return hand_over_and_run(port, unix_path, command)
    _relay_modules()
    listener = _listen(socket, port)
    listener.setblocking(False)
    state = {"status": None}
    # A self-pipe wakes the select loop the moment the child exits.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _f: _pass_on(state, signum))
    child = _spawn(state, command)
    if child is None:
        return 127
    relay = Relay(listener, unix_path)
    relay.sel.register(wake_r, selectors.EVENT_READ, None)

    def done():
        try:
            os.read(wake_r, 512)
        except BlockingIOError:
            pass
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid == child:
            state["status"] = status
            return True
        return False

    os.set_blocking(wake_r, False)
    if not done():  # the child may have exited before the loop started listening for it
        relay.serve_until(wake_r, done)
    return _exit_code(state["status"])


def hand_over_and_run(port, control_path, command):
    """The fast path: give the listening socket to the proxy (which accepts on it from its own event loop),
    then just run the command. The control connection stays open until we exit: that is how the proxy learns
    the episode is over."""
    import _signal
    import _socket

    listener = _listen(_socket, port)
    control = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        control.connect(control_path)
        control.sendmsg([b"L"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, listener.fileno().to_bytes(4, sys.byteorder))])
        if control.recv(1) != b"K":
            raise OSError("the proxy did not take the socket")
    except OSError as exc:
        sys.stderr.write(f"sandbox: cannot reach the proxy at {control_path}: {exc}\n")
        return 125
    listener.close()
    state = {}
    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(sig, lambda signum, _f: _pass_on(state, signum))
    child = _spawn(state, command)
    if child is None:
        return 127
    _, status = os.waitpid(child, 0)  # retried by Python itself when a signal interrupts it
    return _exit_code(status)


def _spawn(state, command):
    """Start the command (the harness); its pid goes into `state` so signals can be passed on. None: it cannot."""
    try:
        child = os.posix_spawnp(command[0], command, os.environ)
    except OSError as exc:
        sys.stderr.write(f"sandbox: cannot start {command[0]}: {exc.strerror or exc}\n")
        return None
    state["child"] = child
    return child


def _exit_code(status):
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _pass_on(state, signum):
    child = state.get("child")
    if child:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: the episode has ended, nothing is left to clean up
