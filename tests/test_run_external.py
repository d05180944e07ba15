"""`alight run --harness ./my-agent.yaml`: a recipe without `install` whose command is a Python script agent
in the user's folder (c): one call to the model, then a file edit -> reward 1.0; its no-op twin -> 0.0; a
recipe whose program does not exist fails its episodes (harness_error naming the program, still scored), not
the run."""

from __future__ import annotations

import json
import stat

import pytest

from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from tests import run_support as rs

AGENT = '''#!/usr/bin/env python3
import json, os, sys, urllib.request
body = {"model": "policy", "messages": [{"role": "user", "content": open(sys.argv[1]).read()}]}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
answer = json.loads(urllib.request.urlopen(req, timeout=60).read())["choices"][0]["message"]["content"]
if EDIT:
    text = open("calc.py").read()
    open("calc.py", "w").write(text.replace("a - b", "a + b"))
print(json.dumps({"event": "finished", "answer": answer}))
'''


def _recipe(folder, name: str, edit: bool | None):
    program = f"./{name}.py"
    if edit is not None:
        path = folder / f"{name}.py"
        path.write_text(AGENT.replace("EDIT", "True" if edit else "False"))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return rs.script_recipe(folder, name, [program, "{{ prompt_file }}"], "a script agent kept next to the task set")


@pytest.mark.parametrize("name, edit, reward, outcome", [
    ("fixer", True, 1.0, "finished"),
    ("idler", False, 0.0, "finished"),
    ("absent", None, 0.0, "harness_error"),
])
def test_external_script_agent(tmp_path, name, edit, reward, outcome):
    tasks = rs.calc_task_set(tmp_path, [{"id": "calc", "prompt": "Fix add() in calc.py."}])
    recipe = _recipe(tmp_path, name, edit)
    with FakeVLLM(FakeScript(turns=["I will fix it."], served_models=["policy-r0"])) as fake:
        out = tmp_path / "runs" / name
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "2",
                          "--upstream", fake.url, "--out", str(out), "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["statuses"] == {"done": 2} and summary["outcomes"] == {outcome: 2}
    assert summary["tasks"][0]["mean_reward"] == reward
    store, episodes = rs.read_store(out)
    try:
        for ep in episodes:
            calls = store.get_calls(ep.id)
            assert len(calls) == (0 if edit is None else 1)
            assert all(c.prompt_token_ids and c.completion_token_ids for c in calls)
            if edit is None:
                assert "cannot start ./absent.py" in ep.error, ep.error
    finally:
        store.close()


@pytest.mark.parametrize("exit_codes, outcome", [("", "harness_error"), ("  exit_codes: [0, 3]\n", "finished")])
def test_a_recipe_names_the_exit_codes_its_report_decides(tmp_path, exit_codes, outcome):
    """A harness that exits 3 after a normal ending its report calls its own (Mistral Vibe on a reply cut at the
    token cap): a harness_error naming the code, unless the recipe lists 3 in `outcome.exit_codes`; then the
    report decides and the episode is finished and scored."""
    tasks = rs.calc_task_set(tmp_path, [{"id": "calc", "prompt": "Fix add() in calc.py."}])
    path = tmp_path / "three.py"
    path.write_text(AGENT.replace("EDIT", "True") + "sys.exit(3)\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    recipe = rs.script_recipe(tmp_path, "three", ["./three.py", "{{ prompt_file }}"], extra=exit_codes)
    with FakeVLLM(FakeScript(turns=["I will fix it."], served_models=["policy-r0"])) as fake:
        out = tmp_path / "runs" / "three"
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "1",
                          "--upstream", fake.url, "--out", str(out), "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    store, [episode] = rs.read_store(out)
    store.close()
    assert episode.outcome == outcome and episode.exit_code == 3, (episode.outcome, episode.error)
    assert episode.reward == 1.0  # scored either way
    if outcome == "harness_error":
        assert episode.error.startswith("exit code 3"), episode.error
