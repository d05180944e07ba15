"""The sandbox's first process (PID 1 of its namespace, `bwrap --as-pid-1`): set the episode's rlimits, reach
the proxy, run the episode's command as a child, reap every orphan, and exit with the command's status.

    python -I -S forwarder.pyc MODE ADDRESS PORT RLIMITS -- argv...

Run with the host's interpreter from a precompiled .pyc (no parse per episode) and only C modules on the
default path, so it starts in about the time of the interpreter itself. MODE:
- `hand-over` (alight's proxy): bind 127.0.0.1:PORT and send the listening socket to the proxy's listener
  inbox at ADDRESS (proxy/listener_inbox.py), which then accepts the harness's connections itself. Nothing is
  relayed; the control connection stays open until we exit, which is how the proxy learns the episode ended.
- `relay` (another proxy): relay every connection on 127.0.0.1:PORT to the Unix socket ADDRESS. One thread,
  one `selectors` loop: each byte costs one recv and one send, and idle connections cost nothing.
- `none` (setup and reward commands): no proxy.
The listening socket is bound BEFORE the command starts, so the harness can never race it. RLIMITS is
`RES=SOFT:HARD,...` (resource numbers): set here, inside the user namespace, so no program runs in front of
bubblewrap to set them, and everything the command starts inherits them.

Exit status: the command's exit code, or 128 + N when it died of signal N (like a shell), so the runner can
tell a SIGXCPU / SIGXFSZ (per-process CPU / file-size limit) from an ordinary failure. Being PID 1, every
orphaned process of the episode is reaped here: one killed by SIGXFSZ / SIGXCPU ends the episode at once
with the same 128 + N (the kernel then kills the whole namespace). SIGTERM / SIGINT / SIGHUP are passed on
to the command, so a stopped harness gets its grace to flush (the host kills the namespace after it).
"""

import os
import sys

# The hand-over path (the default) starts with only C modules: `socket`, `signal` and `selectors` import enum
# and friends (~15 ms of start-up per episode). The relay path loads them and relay_inside.py (its neighbour,
# also compiled) from _relay_modules.
selectors = signal = socket = Relay = None

def _relay_modules():
    global selectors, signal, socket, Relay
    import selectors
    import signal
    import socket

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from relay_inside import Relay


def _listen(sock_module, port):
    listener = sock_module.socket(sock_module.AF_INET, sock_module.SOCK_STREAM)
    listener.setsockopt(sock_module.SOL_SOCKET, sock_module.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(256)
    return listener


LIMIT_SIGNALS = {25: "SIGXFSZ (file size limit)", 24: "SIGXCPU (CPU time limit)"}
"""Linux x86/arm numbers; a process of the episode killed by one of these ends the episode."""


def main(argv):
    sep = argv.index("--")
    mode, address, port, limits = argv[1:sep]
    command = argv[sep + 1:]
    _set_rlimits(limits)
    state = {"child": None, "status": None}
    if mode == "relay":
        return relay_and_run(int(port), address, command, state)
    keep = None
    if mode == "hand-over":
        keep = hand_over(int(port), address)
        if keep is None:
            return 125
    import _signal

    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(sig, lambda signum, _f: _pass_on(state, signum))
    if _spawn(state, command) is None:
        return 127
    while state["status"] is None:
        pid, status = os.waitpid(-1, 0)  # retried by Python itself when a signal interrupts it
        code = _reaped(state, pid, status)
        if code is not None:
            return code
    return _exit_code(state["status"])


def hand_over(port, control_path):
    """Give the listening socket to the proxy (which accepts on it from its own event loop). Returns the control
    connection, to be held open until we exit; None when the proxy cannot be reached."""
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
        return None
    listener.close()
    return control


def relay_and_run(port, unix_path, command, state):
    _relay_modules()
    listener = _listen(socket, port)
    listener.setblocking(False)
    # A self-pipe wakes the select loop the moment a child exits.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _f: _pass_on(state, signum))
    if _spawn(state, command) is None:
        return 127
    relay = Relay(listener, unix_path)
    relay.sel.register(wake_r, selectors.EVENT_READ, None)
    result = {}

    def done():
        try:
            os.read(wake_r, 512)
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                return False
            code = _reaped(state, pid, status)
            if code is not None:
                result["code"] = code
                return True
            if state["status"] is not None:
                return True

    os.set_blocking(wake_r, False)
    if not done():  # the child may have exited before the loop started listening for it
        relay.serve_until(wake_r, done)
    return result.get("code", _exit_code(state["status"]) if state["status"] is not None else 1)


def _reaped(state, pid, status):
    """Note a reaped process. The command's own status is kept; an orphan killed by a limit signal ends the
    episode now: returns the exit code for that, else None."""
    if pid == state["child"]:
        state["status"] = status
        return None
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in LIMIT_SIGNALS:
        sys.stderr.write(f"sandbox: process {pid} of the episode was killed by {LIMIT_SIGNALS[os.WTERMSIG(status)]}\n")
        return 128 + os.WTERMSIG(status)
    return None


def _set_rlimits(spec):
    if not spec or spec == "-":
        return
    import resource

    for item in spec.split(","):
        res, _, values = item.partition("=")
        soft, hard = (int(v) for v in values.split(":"))
        _, old_hard = resource.getrlimit(int(res))
        if old_hard != resource.RLIM_INFINITY:  # only lowering is allowed here
            soft, hard = min(soft, old_hard), min(hard, old_hard)
        resource.setrlimit(int(res), (soft, hard))


def _spawn(state, command):
    """Start the command (the harness); its pid goes into `state` so signals can be passed on. None: it cannot
    (the line below names the program: the runner reports it)."""
    import _signal

    try:
        # Python ignores SIGPIPE and SIGXFSZ for itself and a spawned child would inherit that: back to the
        # defaults, so a write past the file size limit kills the writer (which the kernel then reports).
        child = os.posix_spawnp(command[0], command, os.environ, setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))
    except OSError as exc:
        sys.stderr.write(f"{CANNOT_START}{command[0]}: {exc.strerror or exc}\n")
        return None
    state["child"] = child
    return child


CANNOT_START = "sandbox: cannot start "


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
