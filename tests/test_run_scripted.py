"""`alight run` end to end with the real mini-SWE-agent through the real proxy and a scripted upstream.

(a) one task solved, one not -> rewards 1.0 and 0.0; the agent looks for the hidden tests during its run and
records what it saw: nothing of them. (g) an upstream that rejects return_token_ids (OpenAI's error shape):
the run works, calls are recorded without ids and the summary says it cannot be trained on; run with
`--sandbox none`, the episode records that it ran unsandboxed and the summary says so.
"""

from __future__ import annotations

import json
import shutil
import subprocess

from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from tests import run_support as rs

LOOK = "ls -aR > seen.txt; git log --all --format=%s >> seen.txt; git status --short >> seen.txt"


def test_solved_and_unsolved_tasks_get_1_and_0_and_hidden_tests_stay_hidden(tmp_path):
    rs.ensure_mini()
    tasks = rs.calc_task_set(tmp_path, [
        {"id": "solve", "prompt": "SOLVE-ME: fix add() in calc.py"},
        {"id": "leave", "prompt": "LEAVE-ME: look around"},
    ])

    def first(text: str) -> str:
        return LOOK + ("; sed -i 's/a - b/a + b/' calc.py" if "SOLVE-ME" in text else "")

    with FakeVLLM(FakeScript(reply=rs.mini_script(first), served_models=["policy-r0"])) as fake:
        out = tmp_path / "runs" / "a"
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--attempts", "1",
                          "--concurrency", "2", "--upstream", fake.url, "--out", str(out), "--keep-workspaces",
                          "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    by = {t["task_id"]: t for t in summary["tasks"]}
    assert by["solve"]["mean_reward"] == 1.0 and by["solve"]["pass_at_1"] == 1.0
    assert by["leave"]["mean_reward"] == 0.0 and by["leave"]["solved"] == 0
    assert summary["statuses"] == {"done": 2} and summary["outcomes"] == {"finished": 2} and summary["trainable"]
    assert summary["sandbox"] == "bwrap"  # what the episodes' runners recorded, not a setting read again
    store, episodes = rs.read_store(out)
    try:
        assert len(episodes) == 2
        for ep in episodes:
            seen = (out / "workspaces" / ep.id / "seen.txt").read_text()
            assert "calc.py" in seen and "test_hidden" not in seen, seen  # it looked, and the tests were not there
            assert (out / "workspaces" / ep.id / "test_hidden_calc.py").is_file()  # revealed after the agent
            calls = store.get_calls(ep.id)
            assert len(calls) == 2 and all(c.prompt_token_ids and c.completion_token_ids for c in calls)
            assert ep.outcome == "finished" and ep.reward_detail["exit_code"] in (0, 1)
            assert ep.outcome_detail["sandbox"]["mode"] == "bwrap" and ep.outcome_detail["sandbox"]["peak"]
            assert ep.outcome_detail["sandbox"]["proxy"] == "listener handed over"  # the proxy's inbox, given
        run = store.get_run("a")
        assert run.status == "done" and run.config["options"]["attempts"] == 1 and run.config["harness"] == "mini-swe-agent"
        assert "proxy" in run.config["settings"]
        patches = {ep.task_id: store.get_patch(ep.id) for ep in episodes}
        solve_id = next(ep.id for ep in episodes if ep.task_id == "solve")
    finally:
        store.close()
    assert "[2/2]" in proc.stderr  # plain progress lines when stderr is not a terminal
    # The agent's patch: its edit and its own file, taken before the hidden tests went in.
    for task_id, stored in patches.items():
        text = stored.patch.decode()
        assert stored.error is None and "seen.txt" in text and "test_hidden" not in text, text
        assert ("+    return a + b" in text) == (task_id == "solve") and stored.files == (2 if task_id == "solve" else 1)
    shown = rs.alight(["inspect", "show", solve_id, "--run", str(out), "--patch"], cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.encode() == patches["solve"].patch
    assert not (out / "patch-bases").exists() or not any((out / "patch-bases").iterdir())
    # What a SWE-bench grader would get: one prediction per task, the stored patch verbatim, applying cleanly.
    predictions = tmp_path / "preds.jsonl"
    export = rs.alight(["inspect", "export", str(out), "--format", "swebench", "--out", str(predictions)], cwd=tmp_path)
    assert export.returncode == 0 and "wrote 2 SWE-bench prediction(s)" in export.stderr, export.stderr
    lines = {p["instance_id"]: p for p in map(json.loads, predictions.read_text().splitlines())}
    assert lines["solve"] == {"instance_id": "solve", "model_name_or_path": "alight/a",
                              "model_patch": patches["solve"].patch.decode()}
    fresh = tmp_path / "fresh"
    shutil.copytree(tmp_path / "repos" / "calc", fresh)
    applied = subprocess.run(["git", "apply", "-"], input=lines["solve"]["model_patch"], text=True, cwd=fresh,
                             capture_output=True)
    assert applied.returncode == 0 and "a + b" in (fresh / "calc.py").read_text(), applied.stderr


def test_upstream_that_rejects_token_ids_runs_without_them_and_says_so(tmp_path):
    rs.ensure_mini()
    tasks = rs.calc_task_set(tmp_path, [{"id": "solve", "prompt": "fix add"}])
    inner = rs.mini_script(lambda text: "sed -i 's/a - b/a + b/' calc.py")

    def openai_like(body: dict) -> dict:
        if "return_token_ids" in body or "logprobs" in body:
            return {"error": {"status": 400, "message": "Unrecognized request argument supplied: return_token_ids"}}
        return inner(body)

    with FakeVLLM(FakeScript(reply=openai_like, served_models=["gpt-x"])) as fake:
        out = tmp_path / "runs" / "g"
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--attempts", "1",
                          "--upstream", fake.url + "/v1", "--out", str(out), "--sandbox", "none"], cwd=tmp_path)
        sent = list(fake.script and fake.requests)
    assert proc.returncode == 0, proc.stderr
    assert "cannot be trained on" in proc.stdout
    assert "sandbox:  none - episodes, setup and reward ran on the host" in proc.stdout  # --sandbox none, as run
    assert all("return_token_ids" not in b for b in sent[2:])  # after the probe, never asked again
    store, episodes = rs.read_store(out)
    try:
        (ep,) = episodes
        assert ep.reward == 1.0 and ep.outcome_detail["sandbox"] == "none"
        assert store.get_run("g").config["settings"]["sandbox"] == "none"  # the flag, in the run's snapshot
        calls = store.get_calls(ep.id)
        assert calls and all(c.status == "ok" and c.prompt_token_ids is None and c.completion_token_ids is None
                             for c in calls)
    finally:
        store.close()
