"""`alight eval` and `alight run --adapter` through the real CLI, a script agent and a scripted upstream: the
adapters are loaded on the upstream, whose reply depends on the adapter asked for and the call's seed, so rewards
are deterministic and the expected pass@1, its task-clustered interval and the paired difference are known."""

from __future__ import annotations

import json
import stat

import pytest

from agentlightning_cli.proxy.control import episode_seed, slot_draw
from agentlightning_cli.rollout.intervals import paired_interval, task_interval
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from agentlightning_cli.serve.given_adapter import upstream_name
from tests import run_support as rs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from agentlightning_cli.serve.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-2")

AGENT = '''#!/usr/bin/env python3
import json, os, sys, urllib.request
body = {"model": "policy", "messages": [{"role": "user", "content": open(sys.argv[1]).read()}]}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
answer = json.loads(urllib.request.urlopen(req, timeout=60).read())["choices"][0]["message"]["content"]
if "FIX" in answer:
    text = open("calc.py").read()
    open("calc.py", "w").write(text.replace("a - b", "a + b"))
print(json.dumps({"event": "finished", "answer": answer}))
'''
TASKS, ATTEMPTS = ["t0", "t1", "t2", "t3"], 2


def solves(good: bool, seed: int) -> bool:
    """The scripted policy: the base fixes calc.py on even seeds, the `good` adapter also on multiples of 3."""
    return seed % 2 == 0 or (good and seed % 3 == 0)


def _setup(tmp_path):
    tasks = rs.calc_task_set(tmp_path, [{"id": t, "prompt": "Fix add() in calc.py."} for t in TASKS])
    agent = tmp_path / "fixer.py"
    agent.write_text(AGENT)
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
    recipe = rs.script_recipe(tmp_path, "fixer", ["./fixer.py", "{{ prompt_file }}"])
    adapters = {}
    for name, base in (("good", "/elsewhere/models/tiny-2"), ("wrong", "/elsewhere/models/smollm2-135m-instruct-1")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "r": 4}))
        (folder / "adapter_model.safetensors").write_bytes(b"")
        adapters[name] = folder
    return tasks, recipe, adapters


def _fake():
    holder = []

    def reply(body):
        fake = holder[0]
        good = "good" in fake.adapters.get(body["model"], "")
        return "FIX" if solves(good, body.get("seed") or 1) else "no idea"

    fake = FakeVLLM(FakeScript(reply=reply, served_models=["tiny-2"]))
    holder.append(fake)
    return fake


def test_eval_compares_two_adapters_paired_with_task_clustered_intervals(tmp_path):
    tasks, recipe, adapters = _setup(tmp_path)
    with _fake() as fake:
        common = ["eval", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", str(ATTEMPTS),
                  "--upstream", fake.url, "--seed", "7", "--resamples", "500"]
        refused = rs.alight([*common, "--adapter", "base", "--adapter", str(adapters["wrong"]),
                             "--out", str(tmp_path / "refused")], cwd=tmp_path)
        assert refused.returncode == 1
        assert "smollm2-135m-instruct-1" in refused.stderr and "tiny-2" in refused.stderr, refused.stderr
        assert not (tmp_path / "refused").exists() and not fake.adapters  # refused before anything started
        out = tmp_path / "ev"
        proc = rs.alight([*common, "--adapter", "base", "--adapter", str(adapters["good"]), "--out", str(out),
                          "--json"], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        asked = {body["model"] for body in fake.requests if "calc.py" in json.dumps(body["messages"])}
        assert not fake.adapters  # loaded for its arm, unloaded after
        # The same command again resumes: nothing is run again, the same numbers print.
        again = rs.alight([*common, "--adapter", "base", "--adapter", str(adapters["good"]), "--out", str(out),
                           "--json"], cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert len([b for b in fake.requests if "calc.py" in json.dumps(b["messages"])]) == 2 * len(TASKS) * ATTEMPTS
    assert asked == {"tiny-2", upstream_name(adapters["good"])}
    result = json.loads(proc.stdout)
    seeds = {(t, a): episode_seed(7, slot_draw(t, a), 0) for t in TASKS for a in range(ATTEMPTS)}
    base = [sum(solves(False, seeds[t, a]) for a in range(ATTEMPTS)) / ATTEMPTS for t in TASKS]
    good = [sum(solves(True, seeds[t, a]) for a in range(ATTEMPTS)) / ATTEMPTS for t in TASKS]
    assert result["bootstrap"]["unit"] == "task" and result["bootstrap"]["resamples"] == 500
    arm0, arm1 = result["arms"]
    assert arm0["adapter"] == "base" and arm1["adapter"] == str(adapters["good"].resolve())
    assert arm0["pass_at_1"] == task_interval(base, 500).to_json()
    assert arm1["pass_at_1"] == task_interval(good, 500).to_json()
    assert [t["pass_at_1"] for t in arm1["per_task"]] == good
    diff = result["difference"]
    assert diff["of"] == "1-good - 0-base" and diff["pairs"] == len(seeds)
    assert diff["pass_at_1"] == paired_interval(base, good, 500).to_json()
    # Paired: each (task, attempt) went upstream with the same seed under both adapters.
    sent = {}
    for arm in ("0-base", "1-good"):
        store, episodes = rs.read_store(out / arm)
        try:
            sent[arm] = {(e.task_id, e.attempt): store.get_calls(e.id)[0].sampling["seed"] for e in episodes}
        finally:
            store.close()
    assert sent["0-base"] == sent["1-good"] == seeds
    assert json.loads(again.stdout) == result
    assert "every episode of run 0-base has ended already" in again.stderr


def test_run_adapter_flag_serves_it_and_refuses_another_base(tmp_path):
    tasks, recipe, adapters = _setup(tmp_path)
    help_text = rs.alight(["run", "--help"], cwd=tmp_path, env={"COLUMNS": "200"}).stdout
    assert "--adapter" in help_text and "serve.adapter" in help_text
    with _fake() as fake:
        common = ["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "1", "--tasks", "t0",
                  "--upstream", fake.url, "--json"]
        wrong = rs.alight([*common, "--adapter", str(adapters["wrong"]), "--out", str(tmp_path / "w")], cwd=tmp_path)
        assert wrong.returncode == 1 and "smollm2-135m-instruct-1" in wrong.stderr, wrong.stderr
        proc = rs.alight([*common, "--adapter", str(adapters["good"]), "--out", str(tmp_path / "r")], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        asked = [body["model"] for body in fake.requests if "calc.py" in json.dumps(body["messages"])]
        other = rs.alight([*common[:-1], "--out", str(tmp_path / "r")], cwd=tmp_path)  # resumed without it
    assert asked == [upstream_name(adapters["good"])] and not fake.adapters
    assert not (tmp_path / "w").exists()  # refused before anything started
    assert other.returncode == 1 and "was started with --adapter" in other.stderr, other.stderr


def test_served_adapter_is_round_0s_and_its_base_is_checked_where_vllm_would_start(tmp_path, tiny):
    # Servers alight starts (alight serve/run/eval --adapter): the adapter's base is checked against the model
    # before vLLM starts, and round 0's row records the given adapter, so --rounds N trains on from it.
    from agentlightning_cli.config import Settings
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.serve.adapters import make_adapter
    from agentlightning_cli.serve.policy import PolicyServer

    adapter = make_adapter(tiny, tmp_path / "r4", rank=4)
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny.resolve())
    settings = Settings()
    settings.serve.adapter = adapter
    (tmp_path / "run").mkdir()
    policy = PolicyServer(settings, tmp_path / "run", tiny)

    def where_vllm_starts(*args, **kwargs):
        raise StopIteration

    policy.vllm.start = where_vllm_starts
    for server in policy.servers:
        server.start = where_vllm_starts
    try:
        policy.start()
    except StopIteration:
        pass
    assert policy.first_adapter == adapter.resolve()
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "models" / "smollm2-135m-instruct-1")
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    other = PolicyServer(settings, tmp_path / "run", tiny)
    other.vllm.start = where_vllm_starts
    try:
        other.start()
        raise AssertionError("an adapter of another base was served")
    except AlightError as exc:
        assert "smollm2-135m-instruct-1" in exc.message and tiny.name in exc.message
