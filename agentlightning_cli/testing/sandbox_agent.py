"""A tiny script agent for the sandbox tests: calls the model like a harness, edits its workspace, and probes
what it can reach; writes everything it saw to report.json in its workspace.

Standard library only (it runs with the bare interpreter inside the sandbox). Configured by one JSON argument:
  {"base_url": ..., "api_key": ..., "read": [paths], "write": [paths], "connect": [[host, port]],
   "resolve": [names], "mode": "probe" | "fork_bomb" | "memory_hog" | "sleep_with_daemon" | "big_file"
            | "big_file_tool" | "flush_on_term", "bytes": N}
big_file_tool writes `bytes` bytes through a shell command (as a harness's tool would) and then waits;
flush_on_term waits, and on SIGTERM takes half a second to write flushed.json (a harness saving its trajectory).
"""

import json
import os
import socket
import sys
import time
import urllib.request


def call_model(base_url, api_key):
    body = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "hello"}]}).encode()
    req = urllib.request.Request(f"{base_url}/chat/completions", data=body, method="POST", headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, json.loads(resp.read())["choices"][0]["message"].get("content")


def attempt(fn):
    try:
        return {"ok": True, "value": fn()}
    except BaseException as exc:  # noqa: BLE001 - the point is to record any failure
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def connect(host, port):
    with socket.create_connection((host, port), timeout=3) as s:
        s.sendall(b"GET /leak HTTP/1.0\r\n\r\n")
        return s.recv(100).decode(errors="replace")


def write(path):
    with open(path, "w") as f:
        f.write("escaped")
    return path


def fork_bomb():
    while True:
        try:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
        except OSError:
            time.sleep(0.001)


def memory_hog():
    hog = []
    while True:
        hog.append(b"x" * (32 * 1024 * 1024))  # written, so resident
        time.sleep(0.01)


def main():
    cfg = json.loads(sys.argv[1])
    mode = cfg.get("mode", "probe")
    report = {"pid": os.getpid(), "uid": os.getuid(), "home": os.environ.get("HOME")}
    if cfg.get("base_url"):
        report["model"] = attempt(lambda: call_model(cfg["base_url"], cfg["api_key"]))
    with open("out.txt", "w") as f:
        f.write("edited by the script agent\n")
    report["read"] = {p: attempt(lambda p=p: open(p).read()[:200]) for p in cfg.get("read", [])}
    report["write"] = {p: attempt(lambda p=p: write(p)) for p in cfg.get("write", [])}
    report["connect"] = {f"{h}:{p}": attempt(lambda h=h, p=p: connect(h, p)) for h, p in cfg.get("connect", [])}
    report["resolve"] = {n: attempt(lambda n=n: str(socket.getaddrinfo(n, 80)[0][4])) for n in cfg.get("resolve", [])}
    with open("report.json", "w") as f:
        json.dump(report, f)
    if mode == "fork_bomb":
        fork_bomb()
    elif mode == "memory_hog":
        memory_hog()
    elif mode == "sleep_with_daemon":
        if os.fork() == 0:  # a daemon in its own session, the kind a process-group kill misses
            os.setsid()
            time.sleep(3600)
            os._exit(0)
        time.sleep(3600)
    elif mode == "big_file_tool":
        import subprocess

        subprocess.run(["sh", "-c", f"head -c {int(cfg['bytes'])} /dev/zero > tool-big.bin"])
        time.sleep(3600)  # like a harness going on after a failed tool call
    elif mode == "flush_on_term":
        import signal

        def flush(signum, _frame):
            time.sleep(0.5)
            with open("flushed.json", "w") as f:
                json.dump({"signal": signum}, f)
            os._exit(0)

        signal.signal(signal.SIGTERM, flush)
        with open("waiting", "w"):
            pass
        time.sleep(3600)
    elif mode == "big_file":
        with open("big.bin", "wb") as f:
            while True:
                f.write(b"\0" * (1024 * 1024))


if __name__ == "__main__":
    main()
