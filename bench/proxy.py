"""Proxy overhead: direct to the fake vLLM vs through `alight proxy`, same run, interleaved rounds.

The fake upstream and the proxy each run in their own process (the proxy via the real `alight proxy`
command, ad-hoc episodes), so the proxy's CPU time is read exactly from /proc/<pid>/stat (all threads,
recorder included). The `floor` row is a bare relay on the proxy's own HTTP server and upstream client
(bench/proxy_floor.py) sent the body the proxy would send vLLM: no parsing, stripping or recording, so proxy
minus floor is our own work and the floor is what no change inside the proxy can go below; `floor-aiohttp` is
the same relay on aiohttp's server and client, the engine the proxy used before. The load generator is this process
(raw aiohttp). With --pin (and 2+ CPUs) the proxy is pinned to the last CPU and everything else to the
others, as in research/proxy-engines.md; on a machine shared with other work, pinning can starve the proxy,
so it is off by default.

    python bench/proxy.py [--rounds 2] [--repeat 1] [--quick] [--pin]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "proxy.json"
TICK = os.sysconf("SC_CLK_TCK")
PROMPT = "Please fix the failing test in the repository. " * 32  # ~1.5 KB request body
REPLY = "The fix is to check the index bounds before reading the list element. " * 5  # 355 tokens to cut from
# floor / floor-aiohttp: a bare relay (bench/proxy_floor.py) on our HTTP engine / on aiohttp's, sent the direct body.
TARGETS = ("direct", "floor-aiohttp", "floor", "chat", "anthropic", "responses")
FLOORS = {"floor": "lean", "floor-aiohttp": "aiohttp"}
PROXIED = ("chat", "anthropic", "responses")


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """CPU time of the whole process, or of one of its threads (the main thread's tid is the pid)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def request_for(target: str, base: str, upstream: str, episode: str, stream: bool, max_tokens: int):
    """(url, headers, body bytes) for one call of `target`."""
    messages = [{"role": "user", "content": PROMPT}]
    if target == "direct" or target in FLOORS:  # the client asks for what the proxy would inject: vLLM does the same work
        body = {"model": "base", "messages": messages, "max_tokens": max_tokens, "logprobs": True,
                "return_token_ids": True, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        return f"{upstream}/v1/chat/completions", {}, body
    head = {"Authorization": "Bearer bench-key"}
    if target == "chat":
        body = {"model": "base", "messages": messages, "max_tokens": max_tokens, "stream": stream}
        return f"{base}/e/{episode}/v1/chat/completions", head, body
    if target == "anthropic":
        body = {"model": "base", "messages": messages, "max_tokens": max_tokens, "stream": stream}
        return f"{base}/e/{episode}/v1/messages", {"x-api-key": "bench-key"}, body
    body = {"model": "base", "input": PROMPT, "max_output_tokens": max_tokens, "stream": stream}
    return f"{base}/e/{episode}/v1/responses", head, body


async def one(session, url, headers, body: bytes) -> tuple[float, float, int]:
    """(latency s, time to first body byte s, SSE events) for one request."""
    start = time.perf_counter()
    first, events = None, 0
    async with session.post(url, data=body, headers={"Content-Type": "application/json", **headers}) as resp:
        async for chunk in resp.content.iter_any():
            if first is None:
                first = time.perf_counter() - start
            events += chunk.count(b"\n\n")
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}")
    return time.perf_counter() - start, first or 0.0, events


async def load(target, env, concurrency, total, stream, max_tokens):
    upstream = env[target] if target in FLOORS else env["upstream"]  # the relay stands where vLLM would
    url, headers, body = request_for(target, env["base"], upstream, f"bench-{target}", stream, max_tokens)
    data = json.dumps(body).encode()
    results = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        queue = iter(range(total))

        async def worker():
            for _ in queue:
                results.append(await one(session, url, headers, data))

        pid = env[f"{target}_pid"] if target in FLOORS else env["proxy_pid"]
        before, loop_before = cpu_seconds(pid), cpu_seconds(pid, pid)
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
        cpu, loop_cpu = cpu_seconds(pid) - before, cpu_seconds(pid, pid) - loop_before
    return {"wall": wall, "cpu": cpu, "loop_cpu": loop_cpu, "lat": [r[0] for r in results],
            "ttfb": [r[1] for r in results], "events": sum(r[2] for r in results), "n": total}


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def measure(env, paced, rounds, quick):
    n1, n64, nsse = (60, 256, 16) if quick else (150, 640, 32)
    raw = {t: {"c1": [], "c64": [], "sse": [], "ttfb": []} for t in TARGETS}
    for target in TARGETS:  # warm up connections, episodes and caches
        await load(target, env, 4, 8, False, 40)
        await load(target, env, 2, 2, True, 200)
        await load(target, paced, 2, 2, True, 20)
    for _ in range(rounds):
        for target in TARGETS:
            raw[target]["c1"].append(await load(target, env, 1, n1, False, 40))
            raw[target]["c64"].append(await load(target, env, 64, n64, False, 40))
            raw[target]["sse"].append(await load(target, env, 16, nsse, True, 200))
            # Time to first byte: 16 concurrent streams paced like a real model (5 ms per event), so the
            # number is the proxy's added latency rather than CPU starvation by 16 unpaced 200-event bursts.
            raw[target]["ttfb"].append(await load(target, paced, 16, 64, True, 20))
    out = {}
    for target, runs in raw.items():
        lat = [x for r in runs["c1"] for x in r["lat"]]
        c64_wall, c64_n = sum(r["wall"] for r in runs["c64"]), sum(r["n"] for r in runs["c64"])
        sse_wall, sse_events = sum(r["wall"] for r in runs["sse"]), sum(r["events"] for r in runs["sse"])
        ttfb = [x for r in runs["ttfb"] for x in r["ttfb"]]
        row = {"json_c1_p50_ms": 1000 * statistics.median(lat), "json_c1_p99_ms": 1000 * pct(lat, 0.99),
               "json_c64_rps": c64_n / c64_wall, "sse_c16_events_per_s": sse_events / sse_wall,
               "ttfb_c16_p50_ms": 1000 * statistics.median(ttfb)}
        if target != "direct":
            json_cpu = sum(r["cpu"] for r in runs["c1"] + runs["c64"])
            json_n = sum(r["n"] for r in runs["c1"] + runs["c64"])
            row["proxy_cpu_ms_per_json"] = 1000 * json_cpu / json_n
            # Split: the event-loop thread (HTTP server, client, translation) vs the rest (the recorder thread
            # encoding and writing to SQLite), so what is left over budget can be attributed.
            row["proxy_loop_cpu_ms_per_json"] = 1000 * sum(r["loop_cpu"] for r in runs["c1"] + runs["c64"]) / json_n
            row["proxy_cpu_ms_per_json_c1"] = 1000 * sum(r["cpu"] for r in runs["c1"]) / sum(r["n"] for r in runs["c1"])
            row["proxy_cpu_ms_per_json_c64"] = 1000 * sum(r["cpu"] for r in runs["c64"]) / sum(r["n"] for r in runs["c64"])
            row["proxy_cpu_us_per_event"] = 1e6 * sum(r["cpu"] for r in runs["sse"]) / sse_events
        out[target] = row
    return out


def start(cmd, cpus, ready: str, env=None) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if cpus:
        os.sched_setaffinity(proc.pid, cpus)
    seen = []
    while ready not in "".join(seen):
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{cmd[0]} failed to start: {''.join(seen)}")
        seen.append(line)
    text = "".join(seen)
    proc.port = int(text.split("listening on http://127.0.0.1:")[1].split()[0]) if "listening on" in text else 0
    proc.base = text.split("recording ")[1].split()[0] if "recording " in text else ""
    return proc


def pair(tmp: Path, name: str, script: dict, mine, proxy_cpus, procs: list) -> dict:
    """A fake vLLM process and an `alight proxy` process in front of it."""
    (tmp / f"{name}.json").write_text(json.dumps(script))
    fake = start([sys.executable, "-m", "agentlightning_cli.scripted.fake_vllm", "--port", "0", "--script",
                  str(tmp / f"{name}.json")], mine, "listening")
    procs.append(fake)
    up = f"http://127.0.0.1:{fake.port}"
    alight = shutil.which("alight", path=str(Path(sys.executable).parent)) or "alight"
    proxy = start([alight, "proxy", "--upstream", up, "--port", "0", "--store", str(tmp / f"{name}-store")],
                  proxy_cpus, "Ctrl-C")
    procs.append(proxy)
    env = {"base": proxy.base, "upstream": up, "proxy_pid": proxy.pid}
    for target, engine in FLOORS.items():
        floor = start([sys.executable, str(ROOT / "bench" / "proxy_floor.py"), "--upstream", up, "--port", "0",
                       "--engine", engine], proxy_cpus, "Ctrl-C")
        procs.append(floor)
        env[target], env[f"{target}_pid"] = f"http://127.0.0.1:{floor.port}", floor.pid
    return env


def run_once(args, cpus) -> dict:
    """Fresh processes, one interleaved measurement: {"rows", "proxy_peak_rss_mb", "load_avg_*"}."""
    load_before = os.getloadavg()
    mine, proxy_cpus = (set(cpus[:-1]), {cpus[-1]}) if args.pin and len(cpus) > 1 else (None, None)
    tmp = Path(tempfile.mkdtemp(prefix="alight-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        env = pair(tmp, "fast", {"turns": [REPLY]}, mine, proxy_cpus, procs)
        paced = pair(tmp, "paced", {"turns": [REPLY], "event_delay_s": 0.005}, mine, proxy_cpus, procs)
        if mine:
            os.sched_setaffinity(0, mine)
        rows = asyncio.run(measure(env, paced, args.rounds, args.quick))
        rss = peak_rss_mb(env["proxy_pid"])
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(20)
        shutil.rmtree(tmp, ignore_errors=True)
        if mine:
            os.sched_setaffinity(0, set(cpus))
    derive(rows)
    return {"rows": rows, "proxy_peak_rss_mb": rss, "load_avg_before": load_before, "load_avg_after": os.getloadavg()}


def derive(rows: dict) -> None:
    """Ratios against `direct` (same run) and, for the proxied protocols, the issue's targets."""
    direct = rows["direct"]
    for target in TARGETS[1:]:
        row = rows[target]
        row["json_c64_rps_vs_direct"] = row["json_c64_rps"] / direct["json_c64_rps"]
        row["ttfb_added_p50_ms"] = row["ttfb_c16_p50_ms"] - direct["ttfb_c16_p50_ms"]
        if target not in PROXIED:  # the floor is a reference, not something with targets
            continue
        row["targets_met"] = {
            "cpu_per_json<=0.5ms": row["proxy_cpu_ms_per_json"] <= 0.5,
            "cpu_per_event<=20us": row["proxy_cpu_us_per_event"] <= 20,
            "c64_rps>=60%direct": row["json_c64_rps_vs_direct"] >= 0.6,
            "added_ttfb<=2ms": row["ttfb_added_p50_ms"] <= 2.0,
        }


def median_rows(runs: list[dict]) -> dict:
    """Per target and metric, the median over runs (each run's ratios were taken side by side in that run)."""
    out: dict = {}
    for target in TARGETS:
        keys = [k for k, v in runs[0]["rows"][target].items() if isinstance(v, (int, float))]
        out[target] = {k: statistics.median(run["rows"][target][k] for run in runs) for k in keys}
    for target in PROXIED:
        row = out[target]
        row["targets_met"] = {
            "cpu_per_json<=0.5ms": row["proxy_cpu_ms_per_json"] <= 0.5,
            "cpu_per_event<=20us": row["proxy_cpu_us_per_event"] <= 20,
            "c64_rps>=60%direct": row["json_c64_rps_vs_direct"] >= 0.6,
            "added_ttfb<=2ms": row["ttfb_added_p50_ms"] <= 2.0,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1,
                        help="whole runs, each with fresh processes; the summary is their median (this machine "
                             "is shared: one run's absolute numbers can swing by 25%%, its ratios much less)")
    parser.add_argument("--quick", action="store_true", help="smaller runs (for a smoke check)")
    parser.add_argument("--pin", action="store_true", help="pin the proxy to its own CPU")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    runs = []
    for i in range(args.repeat):
        runs.append(run_once(args, cpus))
        if args.repeat > 1:
            print(f"run {i + 1}/{args.repeat} (load {runs[-1]['load_avg_before'][0]:.2f}):")
            print_table(runs[-1]["rows"], runs[-1]["proxy_peak_rss_mb"])
    rows = median_rows(runs) if args.repeat > 1 else runs[0]["rows"]
    rss = max(run["proxy_peak_rss_mb"] for run in runs)
    report = {"rows": rows, "proxy_peak_rss_mb": rss, "cpus": len(cpus), "pinned": args.pin, "rounds": args.rounds,
              "repeat": args.repeat, "runs": runs if args.repeat > 1 else None,
              "load_avg_before": runs[0]["load_avg_before"], "load_avg_after": runs[-1]["load_avg_after"],
              "reply_tokens": {"json": 40, "sse": 200}}
    if args.repeat > 1:
        print(f"median of {args.repeat} runs:")
    print_table(rows, rss)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


def print_table(rows, rss) -> None:
    cols = [("json_c1_p50_ms", "c1 p50 ms", "{:.2f}"), ("json_c1_p99_ms", "c1 p99 ms", "{:.2f}"),
            ("json_c64_rps", "c64 req/s", "{:.0f}"), ("json_c64_rps_vs_direct", "vs direct", "{:.0%}"),
            ("sse_c16_events_per_s", "SSE ev/s", "{:.0f}"), ("ttfb_c16_p50_ms", "TTFB p50 ms", "{:.2f}"),
            ("ttfb_added_p50_ms", "+TTFB ms", "{:+.2f}"), ("proxy_cpu_ms_per_json", "CPU ms/req", "{:.3f}"),
            ("proxy_loop_cpu_ms_per_json", "loop ms/req", "{:.3f}"), ("proxy_cpu_us_per_event", "CPU us/event", "{:.1f}")]
    print(f"{'target':<10}" + "".join(f"{title:>13}" for _, title, _ in cols))
    for target, row in rows.items():
        cells = [fmt.format(row[key]) if key in row else "-" for key, _, fmt in cols]
        print(f"{target:<10}" + "".join(f"{c:>13}" for c in cells))
    print(f"proxy peak RSS: {rss:.0f} MB (CPU ms/req: whole process, averaged over c=1 and c=64; loop ms/req: its\n"
          "  event-loop thread alone, which writes the JSON answers' records; the rest is the writer thread, which\n"
          "  writes the streams'; floor: a bare relay on the same HTTP engine without any of our work; floor-aiohttp:\n"
          "  the same relay on aiohttp's server and client)")


if __name__ == "__main__":
    main()
