"""The kernel's exit notices (the proc connector): a process of an episode killed by SIGXFSZ or SIGXCPU ends
the episode at once, wherever it ran in the episode's process tree.

An rlimit kills only the one process that crossed it (a `dd` run by the harness's shell tool), and its parent
reaps it and carries on; the sandbox's PID 1 sees only its own child and orphans (forwarder.py). The proc
connector tells us of every exit on the machine with its wait status: one listener thread per alight process
asks the kernel for non-zero exits only (Linux 6.6+ filters them; older kernels send all exits, filtered
here), and hands a limit kill to the watchdog of the episode whose PID namespace the dead process's parent
lives in. Listening needs CAP_NET_ADMIN (alight as root, as in containers); elsewhere `listener()` is None and
the sandbox falls back to its PID 1's view plus the file-at-the-limit check at close (launch.py).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import struct
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

NETLINK_CONNECTOR = 11
CN_IDX_PROC = CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_NONZERO_EXIT = 0x20000000
PROC_EVENT_EXIT = 0x80000000
_HEADER = 16 + 20  # nlmsghdr + cn_msg
LIMIT_SIGNALS = {signal.SIGXFSZ: "file_size", signal.SIGXCPU: "cpu_time"}
PENDING_S = 10.0  # how long a limit kill waits for its vanished parent's own exit notice

Notify = Callable[[str, str], None]
"""(limit name, breach text), e.g. ("file_size", "file_size: process 41 was killed by SIGXFSZ ...")."""


class ExitListener:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._orphaned: dict[int, tuple[str, str, int, float]] = {}  # gone parent -> (limit, signal, pid, when)
        self._watchers: dict[str, Notify] = {}
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="sandbox-exits", daemon=True)
        self.thread.start()

    def watch(self, pid_ns: str, notify: Notify) -> None:
        with self._lock:
            self._watchers[pid_ns] = notify

    def unwatch(self, pid_ns: str) -> None:
        with self._lock:
            self._watchers.pop(pid_ns, None)

    def _run(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # a burst overflowed the buffer: those events are lost, keep listening
                    continue
                # Anything else does not go away by asking again (a closed socket): stop rather than spin. The
                # sandbox still sees its own child's limit kills and checks the file limit at close (launch.py).
                log.warning("sandbox: the kernel's exit notices stopped (%s); limit kills deeper in an episode's "
                            "process tree are now seen only at its end", exc)
                return
            offset = 0
            while offset + _HEADER + 16 <= len(data):
                length = struct.unpack_from("I", data, offset)[0]
                try:
                    self._event(data, offset + _HEADER)
                except Exception:  # noqa: BLE001 - one odd notice must not end the listening for every episode
                    log.exception("sandbox exit notice could not be handled")
                offset += max(length, _HEADER + 16)

    def _event(self, data: bytes, at: int) -> None:
        what = struct.unpack_from("I", data, at)[0]
        if what not in (PROC_EVENT_EXIT, PROC_EVENT_NONZERO_EXIT) or len(data) < at + 16 + 24:
            return
        pid, _tgid, code, _sig, _ppid, parent = struct.unpack_from("6I", data, at + 16)
        now = time.monotonic()
        name = LIMIT_SIGNALS.get(code & 0x7F)  # type: ignore[call-overload]
        if name is not None:
            hit = (name, signal.Signals(code & 0x7F).name, pid, now)
        else:
            hit = self._orphaned.pop(pid, None)  # a parent we were too late for: its own exit names ITS parent
            if hit is None:
                return
        if not self._watchers:
            return
        try:  # the dead process is gone; its parent (the shell that ran it, or PID 1) is normally still there
            pid_ns = os.readlink(f"/proc/{parent}/ns/pid")
        except OSError:
            # The parent exited too, before this thread got to look: a shell that reaped the writer and ended
            # (exit 128+N, a non-zero exit, so its notice follows this one). Carry the hit up to that notice.
            if now - hit[3] < PENDING_S:
                self._orphaned[parent] = hit
                for old in [p for p, h in self._orphaned.items() if now - h[3] >= PENDING_S]:
                    del self._orphaned[old]
            return
        with self._lock:
            notify = self._watchers.get(pid_ns)
        if notify is not None:
            name, sig, dead, _ = hit
            what_limit = "a file reached the file size limit" if name == "file_size" else "it used up its CPU time"
            notify(name, f"{name}: process {dead} of the episode was killed by {sig} ({what_limit})")


_lock = threading.Lock()
_shared: list[ExitListener | None] = []


def listener() -> ExitListener | None:
    """The process-wide listener, started on first use; None where the kernel does not let us listen."""
    with _lock:
        if not _shared:
            _shared.append(_subscribe())
        return _shared[0]


def _subscribe() -> ExitListener | None:
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
    except (OSError, AttributeError):
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind((0, CN_IDX_PROC))
        # proc_input: listen, and only for non-zero exits (kernels without the filter read just the first word)
        op = struct.pack("II", PROC_CN_MCAST_LISTEN, PROC_EVENT_NONZERO_EXIT)
        cn = struct.pack("IIIIHH", CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(op), 0) + op
        sock.send(struct.pack("IHHII", 16 + len(cn), 3, 0, 0, 0) + cn)  # NLMSG_DONE
    except OSError:
        sock.close()
        return None
    return ExitListener(sock)
