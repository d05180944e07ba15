"""What the sandbox costs: start-up per episode, and the proxy round trip through the in-sandbox forwarder.

start-up      Popen -> exit of `true`, median of --starts runs, for: the host (process group only), bubblewrap
              with every namespace and mount, the forwarder's interpreter alone, and the full episode sandbox
              (cgroup joined while bwrap waits, the forwarder as PID 1 handing its listener over, watchdog,
              clean-up), also by phase. Added = sandbox minus host.
round trip    sequential chat requests (keep-alive, ~1 KB body) to the real proxy in front of the scripted
              upstream. Default path: the same client inside a real sandbox, whose loopback listener the proxy
              accepts on directly (listener handed over), against the client on the host going straight to
              the proxy's TCP port, in interleaved rounds; added = the difference of medians. Relay mode (for a
              proxy other than alight's): one client alternating call by call between the proxy's TCP port and
              forwarder.py relaying to the proxy's Unix socket; the relay's CPU per call from its /proc stat.

    python bench/sandbox.py [--starts 40] [--calls 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "sandbox.json"

CLIENT = r'''
import http.client, json, os, socket, sys, time
ports, path, key, n = [int(p) for p in sys.argv[1].split(",")], sys.argv[2], sys.argv[3], int(sys.argv[4])
watch = int(sys.argv[5]) if len(sys.argv) > 5 else os.getppid()  # whose CPU to report (the forwarder)
body = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "x" * 900}]}).encode()
headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
conns = []
for port in ports:
    c = http.client.HTTPConnection("127.0.0.1", port); c.connect()
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); conns.append(c)
def call(conn):
    conn.request("POST", path, body, headers)
    r = conn.getresponse(); r.read(); assert r.status == 200, r.status
for _ in range(20):
    for c in conns: call(c)  # warm-up
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
cpu0 = cpu(watch); times = [[] for _ in conns]
for _ in range(n):
    for i, c in enumerate(conns):  # alternating call by call: both arms see the same machine load
        t = time.perf_counter(); call(c); times[i].append(time.perf_counter() - t)
print(json.dumps({"times": times, "watched_cpu_s": cpu(watch) - cpu0}))
'''


def startup(n: int) -> dict:
    from agentlightning_cli.sandbox import Sandbox, SandboxSpec
    from agentlightning_cli.sandbox.bwrap import command

    import socket
    import threading

    work = Path(tempfile.mkdtemp(prefix="alight-bench-"))
    sock = work / "inbox.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock))
    listener.listen()

    def inbox() -> None:  # stands in for the proxy's listener inbox: takes the socket, says K, waits for EOF
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            _, fds, _, _ = socket.recv_fds(conn, 16, 1)
            conn.send(b"K")
            conn.recv(1)
            for fd in fds:
                os.close(fd)
            conn.close()

    threading.Thread(target=inbox, daemon=True).start()
    from agentlightning_cli.sandbox.bwrap import forwarder_python

    python = forwarder_python()[0]
    arms: dict[str, list[float]] = {"host": [], "bwrap alone (namespaces, mounts)": [],
                                    "forwarder's interpreter start (host)": [], "episode sandbox": []}
    phases: dict[str, list[float]] = {"Sandbox()": [], "command + Popen": [], "wait": [], "close": []}
    full = command(SandboxSpec(writable=[work]), ["true"], work, "bwrap")
    bare = full[:full.index(python)] + ["true"]  # the same bwrap line without the forwarder in front of `true`
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([python, "-I", "-S", "-c", "pass"], start_new_session=True, check=True)
        arms["forwarder's interpreter start (host)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run(["true"], start_new_session=True, check=True)
        arms["host"].append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run(bare, start_new_session=True, check=True)
        arms["bwrap alone (namespaces, mounts)"].append(time.perf_counter() - t)
        t0 = time.perf_counter()
        box = Sandbox(SandboxSpec(writable=[work], proxy_listeners=sock, proxy_port=8765))  # the default path
        t1 = time.perf_counter()
        proc = subprocess.Popen(box.command(["true"], work), start_new_session=True, **box.popen_kwargs())
        box.started(proc.pid)
        t2 = time.perf_counter()
        proc.wait()
        t3 = time.perf_counter()
        box.close()
        t4 = time.perf_counter()
        arms["episode sandbox"].append(t4 - t0)
        for name, value in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            phases[name].append(value)
    listener.close()
    out = {k: round(statistics.median(v) * 1000, 2) for k, v in arms.items()}
    return {"median_ms": out, "added_ms": round(out["episode sandbox"] - out["host"], 2), "runs": n,
            "phases_median_ms": {k: round(statistics.median(v) * 1000, 2) for k, v in phases.items()},
            "kernel_cgroup": box.cgroup is not None}


async def round_trip(calls: int, rounds: int) -> dict:
    """Relay mode paired call by call on the host; the default (listener handed over) inside a real sandbox,
    against a direct client in the same round."""
    import socket

    from agentlightning_cli.sandbox import Sandbox, SandboxSpec
    from agentlightning_cli.sandbox.bwrap import compiled_forwarder, forwarder_python
    from agentlightning_cli.testing.proxy_env import start_env, stop_env

    work = Path(tempfile.mkdtemp(prefix="alight-bench-"))
    env = await start_env(work)
    python, prefix = forwarder_python()
    client = work / "client.py"
    client.write_text(CLIENT)
    port = int(env.proxy.base_url.rsplit(":", 1)[1])
    episode, key = env.episode()
    path = f"/e/{episode}/v1/chat/completions"
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    fport = probe.getsockname()[1]
    probe.close()
    fwd = await asyncio.create_subprocess_exec(python, "-I", "-S", str(compiled_forwarder()), "relay",
                                               env.proxy.unix_path, str(fport), "-", "--", "sleep", "100000",
                                               start_new_session=True)
    await asyncio.sleep(0.5)
    direct, forwarded, cpu_ms, boxed, direct_alone = [], [], [], [], []
    for _ in range(rounds):
        proc = await asyncio.create_subprocess_exec(python, "-I", str(client), f"{port},{fport}", path, key,
                                                    str(calls), str(fwd.pid), stdout=asyncio.subprocess.PIPE)
        data = json.loads((await proc.communicate())[0])
        direct += data["times"][0]
        forwarded += data["times"][1]
        cpu_ms.append(data["watched_cpu_s"] * 1000 / calls)
        # The default path: the sandbox hands its loopback listener to the proxy, nothing relays.
        box = Sandbox(SandboxSpec(writable=[work], read_only=[prefix], proxy_port=port,
                                  proxy_listeners=Path(env.proxy.listeners_path)))
        proc = await asyncio.create_subprocess_exec(*box.command([python, "-I", str(client), str(port), path, key,
                                                                  str(calls)], work),
                                                    stdout=asyncio.subprocess.PIPE, **box.popen_kwargs())
        box.started(proc.pid)
        data = json.loads((await proc.communicate())[0])
        box.close()
        boxed += data["times"][0]
        proc = await asyncio.create_subprocess_exec(python, "-I", str(client), str(port), path, key, str(calls),
                                                    str(os.getpid()), stdout=asyncio.subprocess.PIPE)
        direct_alone += json.loads((await proc.communicate())[0])["times"][0]
    os.killpg(fwd.pid, 9)  # the forwarder and its placeholder child
    await fwd.wait()
    await stop_env(env)
    ms = {k: round(statistics.median(v) * 1000, 3) for k, v in
          (("direct loopback (paired with relay)", direct), ("relay forwarder (paired)", forwarded),
           ("direct loopback (alone)", direct_alone), ("inside a sandbox, listener handed over", boxed))}
    return {"median_ms_per_call": ms,
            "added_ms_per_call": round(ms["inside a sandbox, listener handed over"] - ms["direct loopback (alone)"], 3),
            "relay_added_ms_per_call": round(ms["relay forwarder (paired)"] - ms["direct loopback (paired with relay)"], 3),
            "relay_cpu_ms_per_call": round(statistics.median(cpu_ms), 3),
            "calls": calls, "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--starts", type=int, default=40)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    start = startup(a.starts)
    trip = asyncio.run(round_trip(a.calls, a.rounds))
    print(f"{'start-up (median of ' + str(a.starts) + ')':<44} {'ms':>8}")
    for k, v in start["median_ms"].items():
        print(f"  {k:<42} {v:>8.2f}")
    print("  episode sandbox by phase: " + ", ".join(f"{k} {v:.2f}" for k, v in start["phases_median_ms"].items()))
    print(f"  {'added by the episode sandbox':<42} {start['added_ms']:>8.2f}   (target <= 50)")
    print(f"{'proxy round trip (median per call)':<44} {'ms':>8}")
    for k, v in trip["median_ms_per_call"].items():
        print(f"  {k:<42} {v:>8.3f}")
    print(f"  {'added per call (sandbox, default path)':<42} {trip['added_ms_per_call']:>8.3f}   (target <= 0.2)")
    print(f"  {'added per call (relay mode)':<42} {trip['relay_added_ms_per_call']:>8.3f}")
    print(f"  {'relay CPU per call':<42} {trip['relay_cpu_ms_per_call']:>8.3f}")
    load = os.getloadavg()[0]
    print(f"(load average {load:.2f} on {os.cpu_count()} CPUs)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"startup": start, "round_trip": trip, "load_avg_1m": round(load, 2),
                                   "cpus": os.cpu_count(), "args": vars(a)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
