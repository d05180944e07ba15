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
        # 6 episodes x 3 calls (the first and two more), on both servers, every episode on one
        assert len(a.requests) + len(b.requests) - 2 == 18 and a.requests and b.requests  # minus the 2 probes
        note = next(n for n in summary["notes"] if n.startswith("2 upstream servers"))
        assert f"{a.url} {len(a.requests) - 1} call(s)" in note and f"{b.url} {len(b.requests) - 1} call(s)" in note
        with FakeVLLM(FakeScript(served_models=["other-model"])) as c:
            proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--upstream", a.url,
                              "--upstream", c.url, "--out", str(tmp_path / "runs" / "mixed")], cwd=tmp_path)
        assert proc.returncode != 0 and "the --upstream servers serve different models" in proc.stderr
        assert "other-model" in proc.stderr and not (tmp_path / "runs" / "mixed").exists()
