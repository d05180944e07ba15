"""Who may call the proxy (proxy/access.py), as a user meets it:

- `alight proxy` listening beyond loopback (proxy.host 0.0.0.0): a request to this machine's own non-loopback
  address with an arbitrary key and a made-up episode id is refused (401) and nothing is recorded; with the run
  token the banner printed it works. On loopback, ad-hoc creation stays as it was (tests/test_proxy_cli.py).
- An episode's key stops working when the episode ends: through `alight run`, a process the harness leaves
  behind (its own session, a scrubbed environment: the runner's leftover sweep cannot see it) calls the proxy
  with the episode's URL and key once the episode has ended; it gets 403 and nothing of it is stored.
- The proxy itself: a revoked key answers 403 at once; an episode the store says has ended is refused too.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from agentlightning_cli.store import Store
from agentlightning_cli.testing.proxy_env import post, start_env, stop_env
from tests import run_support as rs
from tests.netaddr_support import DIRECT, own_address, rerun_in_netns
from tests.test_proxy_cli import _banner, _free_port

CHAT = {"model": "base", "messages": [{"role": "user", "content": "hey"}]}


def _post(url: str, key: str) -> tuple[int, str]:
    """A chat request straight to `url` (this machine's own address: no HTTP proxy in between)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(CHAT).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with DIRECT.open(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_beyond_loopback_a_new_episode_needs_the_run_token(tmp_path: Path, request) -> None:
    address = own_address()
    if address is None:  # no address of its own here: the same test inside a namespace that has one
        done = rerun_in_netns(request.node.nodeid)
        assert done.returncode == 0, done.stdout + done.stderr
        return
    alight = shutil.which("alight", path=str(Path(sys.executable).parent))
    port, store_dir = _free_port(), tmp_path / "store"
    with FakeVLLM(FakeScript(turns=["hi from upstream"] * 4)) as fake:
        proc = subprocess.Popen([alight, "proxy", "--upstream", fake.url, "--port", str(port), "--store",
                                 str(store_dir)], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env={**rs.env_for_cli(None), "ALIGHT_PROXY__HOST": "0.0.0.0"})
        try:
            banner = _banner(proc)
            token = re.search(r"run token: (\S+)", banner).group(1)
            base = f"http://{address}:{port}/e"
            status, body = _post(f"{base}/made-up-1/v1/chat/completions", "any-secret")
            assert status == 401 and "run token" in json.loads(body)["error"]["message"], body
            status, _ = _post(f"{base}/made-up-2/v1/chat/completions", "rt-not-the-token.x")
            assert status == 401
            status, _ = _post(f"{base}/made-up-3/v1/chat/completions", token + "x")  # a longer token is not it
            assert status == 401
            status, body = _post(f"{base}/mine-1/v1/chat/completions", f"{token}.mine-1")
            assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "hi from upstream"
            status, _ = _post(f"{base}/mine-1/v1/chat/completions", f"{token}.other")  # its key is fixed now
            assert status == 401
            asked = len(fake.requests)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(20)
    assert asked == 1  # only the token holder's call reached the model
    with Store.open(store_dir) as store:
        assert [e.id for e in store.list_episodes()] == ["mine-1"]
        for made_up in ("made-up-1", "made-up-2", "made-up-3"):
            assert store.get_episode(made_up) is None and store.get_calls(made_up) == []
        assert [c.status for c in store.get_calls("mine-1")] == ["ok"]


async def test_an_ended_episode_key_is_refused_and_nothing_is_recorded(tmp_path: Path) -> None:
    env = await start_env(tmp_path)
    try:
        ep, key = env.episode()
        assert (await post(env.url(ep), json.dumps(CHAT), key))[0] == 200
        env.proxy.end_episode(ep)
        status, body, _ = await post(env.url(ep), json.dumps(CHAT), key)
        assert status == 403 and "has ended" in json.loads(body)["error"]["message"]
        await env.proxy.drain()
        assert len(env.store.get_calls(ep)) == 1
        # Another process ended it (the store says so): a proxy that never saw it refuses it the same way.
        other, other_key = env.episode()
        env.store.update_episode(other, status="done")
        env.proxy.keys._digests.pop(other)  # as if this proxy had restarted: only the store knows the episode
        status, _, _ = await post(env.url(other), json.dumps(CHAT), other_key)
        assert status == 403 and env.store.get_calls(other) == []
    finally:
        await stop_env(env)


LATE_CALLER = r'''
import json, os, sys, time, urllib.error, urllib.request
url, key, gate, out = sys.argv[1:5]
deadline = time.monotonic() + 120
while not os.path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.05)  # until the reward command says the episode has ended
body = {"model": "policy", "messages": [{"role": "user", "content": "a late call"}]}
req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
try:
    with urllib.request.urlopen(req, timeout=60) as resp:
        answer = (resp.status, resp.read().decode())
except urllib.error.HTTPError as exc:
    answer = (exc.code, exc.read().decode())
with open(out + ".tmp", "w") as f:
    json.dump(answer, f)
os.replace(out + ".tmp", out)
'''

AGENT = rs.CALL_MODEL_ONCE + r'''
import subprocess
here = os.path.dirname(os.path.abspath(__file__))
# Left behind on purpose: its own session and a scrubbed environment, so the runner's sweep of the episode's
# processes (by its environment marker) does not find it, as a daemon a real agent started might not be found.
subprocess.Popen([sys.executable, os.path.join(here, "late_caller.py"), os.environ["OPENAI_BASE_URL"],
                  os.environ["OPENAI_API_KEY"], os.path.join(here, "gate"), os.path.join(here, "late.json")],
                 env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(json.dumps({"event": "finished"}))
'''


def test_a_process_left_behind_cannot_call_once_its_episode_ended(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    (tmp_path / "late_caller.py").write_text(LATE_CALLER)
    recipe = rs.script_recipe(tmp_path, "leaves-one", [str(agent), "{{ prompt_file }}"])
    gate, late = tmp_path / "gate", tmp_path / "late.json"
    # The reward runs after the episode's harness ended: it opens the gate and waits for the late call's answer.
    reward = (f"touch {gate}; i=0; while [ ! -s {late} ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; "
              'echo \'{"reward": 1}\'')
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "prompt": "task", "reward": reward}) + "\n")
    out = tmp_path / "runs" / "late"
    with FakeVLLM(FakeScript(turns=["ok"] * 4, served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "1",
                          "--upstream", fake.url, "--out", str(out), "--json"], cwd=tmp_path,
                         env={"ALIGHT_SANDBOX": "none"})
        asked = [r for r in fake.requests if r.get("messages")]
    assert proc.returncode == 0, proc.stderr
    status, body = json.loads(late.read_text())
    assert status == 403 and "has ended" in json.loads(body)["error"]["message"], body
    assert not any("a late call" in json.dumps(r) for r in asked)  # it never reached the model
    store, episodes = rs.read_store(out)
    try:
        [ep] = episodes
        assert ep.status == "done"
        calls = store.get_calls(ep.id)
        assert len(calls) == 1 and b"a late call" not in calls[0].client_request
    finally:
        store.close()


@pytest.mark.parametrize("key,ok", [("rt-abc", True), ("rt-abc.mini-1", True), ("rt-abc.", True),
                                    ("rt-ab", False), ("rt-abcd", False), ("rt-abcd.x", False), ("x.rt-abc", False)])
def test_run_token_forms(key: str, ok: bool) -> None:
    from agentlightning_cli.proxy.access import carries_token

    assert carries_token(key, "rt-abc") is ok


def test_servers_alight_did_not_start_beyond_loopback_need_a_key() -> None:
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.serve.remote_policy import unkeyed_servers

    assert unkeyed_servers(["http://127.0.0.1:8000", "http://localhost:8001"], None, trains=True) is None
    assert unkeyed_servers(["http://gpu1:8000"], "k", trains=True) is None
    warning = unkeyed_servers(["http://127.0.0.1:8000", "http://gpu1:8000"], None, trains=False)
    assert "http://gpu1:8000" in warning and "127.0.0.1" not in warning and "ALIGHT_SERVE__API_KEY" in warning
    with pytest.raises(AlightError) as refused:  # a run that trains loads its adapters there
        unkeyed_servers(["http://gpu1:8000"], None, trains=True)
    assert "--api-key" in refused.value.hint
