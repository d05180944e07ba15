"""Several upstream servers behind one proxy (proxy/routing.py), with real proxies and scripted vLLM servers: an
episode stays on one server, new episodes spread to the least busy, a server that dies is taken out (its failed
call recorded as `unreachable`) and its episodes move at their next call; `alight run --upstream A --upstream B`
runs a round across both and its summary says which took what; servers of different models are refused."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from agentlightning_cli.testing.proxy_env import POLICY, post, start_env, stop_env
from tests import run_support as rs


def _body(text: str) -> str:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})


def _seen(fake: FakeVLLM) -> list[str]:
    """The user texts a scripted server was asked, in order."""
    return [r["messages"][-1]["content"] for r in fake.requests if r.get("messages")]


@pytest.fixture
async def two(tmp_path: Path):
    fakes = [FakeVLLM(FakeScript(served_models=[POLICY])).start() for _ in range(2)]
    env = await start_env(tmp_path, upstream=[f.url for f in fakes])
    yield env, fakes
    await stop_env(env)
    for fake in fakes:
        fake.stop()


async def test_an_episode_stays_on_one_server_and_new_episodes_spread(two) -> None:
    env, fakes = two
    episodes = [env.episode() for _ in range(4)]
    for turn in range(3):
        for n, (ep, key) in enumerate(episodes):
            status, _, _ = await post(env.url(ep), _body(f"episode {n} turn {turn}"), key)
            assert status == 200
    homes = {}
    for i, fake in enumerate(fakes):
        for text in _seen(fake):
            homes.setdefault(text.split(" turn")[0], set()).add(i)
    assert all(len(servers) == 1 for servers in homes.values()), homes  # never moved
    per_server = [sum(1 for servers in homes.values() if i in servers) for i in range(2)]
    assert per_server == [2, 2], homes  # four episodes, two each
    report = env.proxy.session.report()
    assert [s["calls"] for s in report] == [6, 6] and all(s["in_service"] for s in report)


async def test_new_episodes_go_to_the_server_with_fewer_requests_in_flight(tmp_path: Path) -> None:
    slow = FakeVLLM(FakeScript(served_models=[POLICY])).start()
    fast = FakeVLLM(FakeScript(served_models=[POLICY])).start()
    env = await start_env(tmp_path, upstream=[slow.url, fast.url])
    try:
        first, first_key = env.episode()
        slow.script.delay_s = 3.0  # the first episode's call is still running on the first server...
        pending = asyncio.ensure_future(post(env.url(first), _body("long"), first_key))
        while not slow.requests:  # it has reached the server (the server then waits 3 s before answering)
            await asyncio.sleep(0.01)
        assert env.proxy.session.report()[0]["calls"] == 1
        for n in range(2):  # ...so the next episodes go to the second, whatever their count of episodes
            ep, key = env.episode()
            assert (await post(env.url(ep), _body(f"next {n}"), key))[0] == 200
        assert _seen(fast) == ["next 0", "next 1"]
        assert not pending.done() and (await pending)[0] == 200
    finally:
        await stop_env(env)
        slow.stop()
        fast.stop()


async def test_a_server_that_dies_is_taken_out_and_its_episodes_move(two) -> None:
    env, fakes = two
    ep, key = env.episode()
    assert (await post(env.url(ep), _body("before"), key))[0] == 200
    home = 0 if _seen(fakes[0]) == ["before"] else 1
    other = 1 - home
    fakes[home].stop()
    status, out, _ = await post(env.url(ep), _body("during"), key)
    assert status == 502 and "unreachable" in json.loads(out)["error"]["message"]
    status, _, _ = await post(env.url(ep), _body("after"), key)  # moved at its next call
    assert status == 200 and _seen(fakes[other]) == ["after"]
    calls = await env.calls(ep, 3)
    assert [c.status for c in calls] == ["ok", "unreachable", "ok"]  # the failed call is recorded as such
    new, new_key = env.episode()
    assert (await post(env.url(new), _body("new"), new_key))[0] == 200
    assert _seen(fakes[other]) == ["after", "new"]
    dead = env.proxy.session.report()[home]
    assert not dead["in_service"] and dead["failures"] == 1 and dead["episodes"] == 0


def _script_agent(tmp_path: Path) -> Path:
    agent = tmp_path / "agent.py"
    agent.write_text(rs.CALL_MODEL_ONCE + "import time\nfor _ in range(2):\n    urllib.request.urlopen(req, timeout=60).read()\n"
                     "print(json.dumps({'event': 'finished'}))\n")
    agent.chmod(0o755)
    return rs.script_recipe(tmp_path, "twice", [str(agent), "{{ prompt_file }}"])


def test_a_run_across_two_servers_reports_each_and_refuses_different_models(tmp_path: Path) -> None:
    recipe = _script_agent(tmp_path)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"task {i}", "reward": "true"}) + "\n"
                             for i in range(3)))
    with FakeVLLM(FakeScript(turns=["ok"] * 20, served_models=["policy-r0"])) as a, \
            FakeVLLM(FakeScript(turns=["ok"] * 20, served_models=["policy-r0"])) as b:
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "2",
                          "--concurrency", "2", "--upstream", a.url, "--upstream", b.url + "/v1",
                          "--out", str(tmp_path / "runs" / "two"), "--json"], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        summary = json.loads(proc.stdout)
        assert summary["statuses"] == {"done": 6}
        # 6 episodes x 3 calls (the first and two more), on both servers, every episode on one; each server also
        # answered the start's two one-token probes (the server probe and the logprobs-mode probe)
        calls_a, calls_b = ([r for r in fake.requests if r.get("max_tokens") != 1]
                            for fake in (a, b))
        assert len(a.requests) - len(calls_a) == 2 and len(b.requests) - len(calls_b) == 2
        assert len(calls_a) + len(calls_b) == 18 and calls_a and calls_b
        note = next(n for n in summary["notes"] if n.startswith("2 upstream servers"))
        assert f"{a.url} {len(calls_a)} call(s)" in note and f"{b.url} {len(calls_b)} call(s)" in note
        with FakeVLLM(FakeScript(served_models=["other-model"])) as c:
            proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--upstream", a.url,
                              "--upstream", c.url, "--out", str(tmp_path / "runs" / "mixed")], cwd=tmp_path)
        assert proc.returncode != 0 and "the --upstream servers serve different models" in proc.stderr
        assert "other-model" in proc.stderr and not (tmp_path / "runs" / "mixed").exists()


class Clock:
    """The router's clock, moved by hand: no test waits out retry_after_s."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _home(fakes: list[FakeVLLM], text: str) -> int:
    return next(i for i, fake in enumerate(fakes) if text in _seen(fake))


async def test_a_dead_server_is_not_picked_again_until_a_health_probe_answers(two) -> None:
    env, fakes = two
    router = env.proxy.session
    router.clock = clock = Clock()
    first, first_key = env.episode()
    assert (await post(env.url(first), _body("first"), first_key))[0] == 200
    home = _home(fakes, "first")
    port = fakes[home].port
    fakes[home].stop()
    assert (await post(env.url(first), _body("fails"), first_key))[0] == 502  # taken out by this call
    assert (await post(env.url(first), _body("moved"), first_key))[0] == 200
    for n in range(2):  # past retry_after_s, the dead server is idle and would be the first pick
        clock.now += router.retry_after_s + 1
        ep, key = env.episode()
        status, body, _ = await post(env.url(ep), _body(f"new {n}"), key)
        assert status == 200, body  # no new episode pays a 502 to find out the server is still dead
        await router.probes()  # the probe failed: out for another retry_after_s
        assert not router.report()[home]["in_service"]
    fakes[home] = FakeVLLM(FakeScript(served_models=[POLICY]), port=port).start()  # it comes back
    clock.now += router.retry_after_s + 1
    ep, key = env.episode()
    assert (await post(env.url(ep), _body("while probing"), key))[0] == 200
    await router.probes()
    assert router.report()[home]["in_service"]
    back, back_key = env.episode()
    assert (await post(env.url(back), _body("back"), back_key))[0] == 200
    assert _seen(fakes[home]) == ["back"]  # the idle server that answered its probe is the first pick again


async def test_an_ended_episode_no_longer_weighs_on_its_server(two) -> None:
    env, fakes = two
    eps = [env.episode() for _ in range(3)]
    for n, (ep, key) in enumerate(eps):
        assert (await post(env.url(ep), _body(f"ep {n}"), key))[0] == 200
    loaded = _home(fakes, "ep 0")
    assert _home(fakes, "ep 2") == loaded  # two episodes there, one on the other
    for ep, _ in (eps[0], eps[2]):
        env.proxy.end_episode(ep)
    ep, key = env.episode()
    assert (await post(env.url(ep), _body("next"), key))[0] == 200
    assert _home(fakes, "next") == loaded  # its two episodes ended: it is the less loaded one now
    taken = [s["episodes_taken"] for s in env.proxy.session.report()]
    assert taken[loaded] == 3 and taken[1 - loaded] == 1  # what each server took stays counted


async def test_a_replica_whose_process_exited_stays_out(tmp_path: Path) -> None:
    import subprocess
    import sys

    from agentlightning_cli.config import ProxySettings
    from agentlightning_cli.proxy.server import Proxy
    from agentlightning_cli.serve.vllm import free_port
    from agentlightning_cli.store import Store

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": ["ok"] * 50, "served_models": [POLICY]}))
    ports = [free_port(), free_port()]
    procs = {f"http://127.0.0.1:{p}": subprocess.Popen(
        [sys.executable, "-m", "agentlightning_cli.scripted.fake_vllm", "--port", str(p), "--script", str(script)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for p in ports}
    store = Store.open(tmp_path / "run")
    proxy = Proxy(store, list(procs), ProxySettings(), replica_exited=lambda url: procs[url].poll())
    late: FakeVLLM | None = None
    try:
        from agentlightning_cli.proxy.probe import probe_upstream

        for url in procs:  # both up
            for _ in range(200):
                try:
                    await asyncio.to_thread(probe_upstream, url, 1.0)
                    break
                except Exception:  # noqa: BLE001 - not listening yet
                    await asyncio.sleep(0.05)
        await proxy.start()
        router = proxy.session
        router.clock = clock = Clock()

        def episode() -> tuple[str, str]:
            key = f"k-{len(store.list_episodes())}"
            ep = store.create_episode(None, None, None, 0, "test", key)
            proxy.register_episode(ep.id, key)
            return ep.id, key

        async def call(ep: str, key: str, text: str) -> int:
            return (await post(f"{proxy.base_url}/e/{ep}/v1/chat/completions", _body(text), key))[0]

        first = episode()
        assert await call(*first, "first") == 200
        dead_url = router._by_episode[first[0]].url
        procs[dead_url].kill()
        procs[dead_url].wait()
        assert await call(*first, "after the exit") == 200  # its episode moves without a 502: the process is gone
        late = FakeVLLM(FakeScript(served_models=[POLICY]), port=int(dead_url.rsplit(":", 1)[1])).start()
        for n in range(3):  # something answers at its address again: not alight's replica, so it stays out
            clock.now += router.retry_after_s + 1
            assert await call(*episode(), f"new {n}") == 200
            await router.probes()
        assert late.requests == []
        dead = next(s for s in router.report() if s["url"] == dead_url)
        assert dead["exited"] and not dead["in_service"] and "exited with code -9" in dead["why"]
        assert [c.status for c in store.get_calls(first[0])] == ["ok", "ok"]
    finally:
        await proxy.stop()
        store.close()
        if late is not None:
            late.stop()
        for proc in procs.values():
            proc.kill()
            proc.wait()
