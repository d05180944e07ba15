"""`alight serve` as a user runs it: a real subprocess, real vLLM, a request, Ctrl-C, nothing left running."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from agentlightning_cli.store import Store

pytestmark = pytest.mark.vllm


def descendants(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,sid="], capture_output=True, text=True).stdout.split("\n")
    rows = [tuple(map(int, line.split())) for line in out if line.strip()]
    found, frontier = set(), {pid}
    while frontier:
        kids = {p for p, pp, _ in rows if pp in frontier} - found
        found |= kids
        frontier = kids
    # vLLM runs in its own session: also everything in the sessions those children lead.
    sessions = {p for p in found}
    return found | {p for p, _, sid in rows if sid in sessions}


def running(pid: int) -> str | None:
    """The command line of a live process; None when gone or a zombie (killed, awaiting its reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return None if state in ("Z", "X") else Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except (OSError, IndexError):
        return None


def start_serve(cwd: Path, run: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "ALIGHT_SERVE__MAX_MODEL_LEN": "2048", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "agentlightning_cli", "serve", "--run", run], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + 300
    while not any(l.startswith("Every call is recorded") for l in lines):
        line = proc.stderr.readline()
        if not line and proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("alight serve did not come up:\n" + "".join(lines))
        lines.append(line)
    return proc, "".join(lines)


def test_serve_prints_urls_records_calls_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    proc, banner = start_serve(tmp_path, "demo")
    try:
        base = re.search(r"OpenAI chat completions / Responses\s+(\S+)/e/<episode>/v1", banner).group(1)
        for needle in ("mini-SWE-agent", "OPENAI_BASE_URL=", "LLM_BASE_URL=", "ANTHROPIC_BASE_URL=",
                       "wire_api = \"responses\"", f"{base}/e/cc-1 "):
            assert needle in banner
        children = descendants(proc.pid)
        assert len(children) >= 2  # vLLM's API server and engine

        req = urllib.request.Request(f"{base}/e/by-hand/v1/chat/completions", method="POST", data=json.dumps(
            {"model": "anything", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode(),
            headers={"content-type": "application/json", "authorization": "Bearer mine"})
        assert json.load(urllib.request.urlopen(req, timeout=60))["choices"]
        # Past the old 4096-token default: Codex's first prompt alone is ~4.1k tokens, and the banner offers Codex.
        long = urllib.request.Request(f"{base}/e/by-hand-long/v1/chat/completions", method="POST", data=json.dumps(
            {"model": "anything", "messages": [{"role": "user", "content": "hello world " * 3000}],
             "max_tokens": 2}).encode(), headers={"content-type": "application/json", "authorization": "Bearer mine"})
        answer = json.load(urllib.request.urlopen(long, timeout=120))
        assert answer["choices"] and answer["usage"]["prompt_tokens"] > 5000

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130  # Ctrl-C: clean stop, then the CLI's interrupt exit code
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(1)
    alive = {p: running(p) for p in children}
    assert not any(alive.values()), f"left running: {alive}"

    run_dir = tmp_path / "runs" / "demo"
    assert (run_dir / "logs" / "vllm.log").is_file() and (run_dir / "adapters" / "round-0" / "adapter_config.json").is_file()
    with Store.open(run_dir) as store:
        calls = store.get_calls("by-hand")
        assert len(calls) == 1 and calls[0].model == "policy-r0" and calls[0].completion_token_ids
        # exact continuation is live (vLLM started with its endpoints; end-of-turn ids from the model's tokenizer)
        assert calls[0].continuation["mode"] == "exact" and calls[0].continuation["kind"] == "start"
        assert json.loads(calls[0].upstream_request)["token_ids"] == calls[0].prompt_token_ids
        run = store.get_run("demo")
        assert run is not None
        # The ad-hoc episode belongs to this run's round 0, not to nothing.
        episode = store.get_episode("by-hand")
        [round0] = store.list_rounds(run.id)
        assert (episode.run_id, episode.round_id, round0.index) == (run.id, round0.id, 0)


def test_serve_reports_a_missing_model_and_a_taken_port_before_starting_anything(tmp_path: Path) -> None:
    def serve(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "agentlightning_cli", "serve", "--run", "x", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)

    done = serve("--model", str(tmp_path / "nope"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: model directory {tmp_path / 'nope'} does not exist\nhint: pass --model")
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        done = serve("--model", str(model), "--port", str(port))
    assert done.returncode == 1 and f"error: port {port} on 127.0.0.1 is already in use" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_vllm_does_not_outlive_a_killed_alight(tmp_path: Path) -> None:
    proc, _ = start_serve(tmp_path, "killed")
    children = descendants(proc.pid)
    assert children
    proc.kill()  # no cleanup code runs: the kernel's parent-death signal must stop vLLM
    proc.wait()
    deadline = time.monotonic() + 60
    try:
        while any(running(p) for p in children) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not {p: running(p) for p in children if running(p)}
    finally:
        for pid in children:  # only if the assertion failed: never leave this test's vLLM behind
            if running(pid):
                os.kill(pid, signal.SIGKILL)
