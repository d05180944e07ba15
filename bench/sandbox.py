"""What the sandbox costs: start-up per episode, and the proxy round trip through the in-sandbox forwarder.

start-up      Popen -> exit of `true`, median of --starts runs, for: the host (process group only), bubblewrap
              with every namespace and mount, and the full episode sandbox (cgroup, forwarder bound to the
              proxy's Unix socket, watchdog, clean-up). Added = sandbox minus host.
round trip    one client making --calls sequential chat requests (keep-alive, ~1 KB body) to the real proxy in
              front of the scripted upstream: on the host straight to the proxy's TCP port, and inside the
              sandbox to 127.0.0.1:<port>, which the forwarder relays to the proxy's Unix socket. Arms are
              interleaved (--rounds); added ms per call = median sandbox - median direct; the forwarder's CPU per
              call is read from its own /proc stat by the client (the forwarder is its parent).

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
import http.client, json, os, sys, time
port, path, key, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
body = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "x" * 900}]}).encode()
headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
conn = http.client.HTTPConnection("127.0.0.1", port)
def call():
    conn.request("POST", path, body, headers)
    r = conn.getresponse(); r.read(); assert r.status == 200, r.status
for _ in range(20): call()  # warm-up
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
parent0 = cpu(os.getppid()); times = []
for _ in range(n):
    t = time.perf_counter(); call(); times.append(time.perf_counter() - t)
print(json.dumps({"times": times, "parent_cpu_s": cpu(os.getppid()) - parent0}))
'''


def startup(n: int) -> dict:
    from agentlightning_cli.sandbox import Sandbox, SandboxSpec
    from agentlightning_cli.sandbox.bwrap import command

    work = Path(tempfile.mkdtemp(prefix="alight-bench-"))
    sock = work / "fake.sock"
    import socket

    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock))
    listener.listen()
    arms: dict[str, list[float]] = {"host": [], "bwrap": [], "episode sandbox": []}
    bwrap_spec = SandboxSpec(writable=[work])
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(["true"], start_new_session=True, check=True)
        arms["host"].append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run(command(bwrap_spec, ["true"], work, "bwrap"), start_new_session=True, check=True)
        arms["bwrap"].append(time.perf_counter() - t)
        t = time.perf_counter()
        box = Sandbox(SandboxSpec(writable=[work], proxy_socket=sock, proxy_port=8765))
        proc = subprocess.Popen(box.command(["true"], work), start_new_session=True, **box.popen_kwargs())
        box.started(proc.pid)
        proc.wait()
        box.close()
        arms["episode sandbox"].append(time.perf_counter() - t)
    listener.close()
    out = {k: round(statistics.median(v) * 1000, 2) for k, v in arms.items()}
    return {"median_ms": out, "added_ms": round(out["episode sandbox"] - out["host"], 2), "runs": n}


async def round_trip(calls: int, rounds: int) -> dict:
    from agentlightning_cli.sandbox import Sandbox, SandboxSpec
    from agentlightning_cli.sandbox.bwrap import forwarder_python
    from agentlightning_cli.testing.proxy_env import start_env, stop_env

    work = Path(tempfile.mkdtemp(prefix="alight-bench-"))
    env = await start_env(work)
    python, prefix = forwarder_python()
    client = work / "client.py"
    client.write_text(CLIENT)
    port = int(env.proxy.base_url.rsplit(":", 1)[1])
    episode, key = env.episode()
    path = f"/e/{episode}/v1/chat/completions"
    args = [str(port), path, key, str(calls)]
    res: dict[str, list] = {"direct": [], "sandbox": [], "forwarder_cpu_ms": []}
    for _ in range(rounds):
        proc = await asyncio.create_subprocess_exec(python, "-I", str(client), *args, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        res["direct"] += json.loads(out)["times"]
        box = Sandbox(SandboxSpec(writable=[work], read_only=[prefix], proxy_socket=Path(env.proxy.unix_path),
                                  proxy_port=port))
        proc = await asyncio.create_subprocess_exec(*box.command([python, "-I", str(client), *args], work),
                                                    stdout=asyncio.subprocess.PIPE, **box.popen_kwargs())
        box.started(proc.pid)
        out, _ = await proc.communicate()
        box.close()
        data = json.loads(out)
        res["sandbox"] += data["times"]
        res["forwarder_cpu_ms"].append(data["parent_cpu_s"] * 1000 / calls)
    await stop_env(env)
    direct, boxed = statistics.median(res["direct"]) * 1000, statistics.median(res["sandbox"]) * 1000
    return {"median_ms_per_call": {"direct loopback": round(direct, 3), "through forwarder": round(boxed, 3)},
            "added_ms_per_call": round(boxed - direct, 3),
            "forwarder_cpu_ms_per_call": round(statistics.median(res["forwarder_cpu_ms"]), 3),
            "calls": calls, "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--starts", type=int, default=40)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    start = startup(a.starts)
    trip = asyncio.run(round_trip(a.calls, a.rounds))
    print(f"{'start-up (median of ' + str(a.starts) + ')':<40} {'ms':>8}")
    for k, v in start["median_ms"].items():
        print(f"  {k:<38} {v:>8.2f}")
    print(f"  {'added by the episode sandbox':<38} {start['added_ms']:>8.2f}   (target <= 50)")
    print(f"{'proxy round trip (median per call)':<40} {'ms':>8}")
    for k, v in trip["median_ms_per_call"].items():
        print(f"  {k:<38} {v:>8.3f}")
    print(f"  {'added per call':<38} {trip['added_ms_per_call']:>8.3f}   (target <= 0.2)")
    print(f"  {'forwarder CPU per call':<38} {trip['forwarder_cpu_ms_per_call']:>8.3f}")
    load = os.getloadavg()[0]
    print(f"(load average {load:.2f} on {os.cpu_count()} CPUs)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"startup": start, "round_trip": trip, "load_avg_1m": round(load, 2),
                                   "cpus": os.cpu_count(), "args": vars(a)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
