"""`sandbox: container` with real podman and an image built here (tests/container_support.py): a task shell and a
real harness episode run in the image, see only what they should, have no network, hit the memory limit as
`resource_limit`; a run refuses before any episode a task without an image, an image that is not there and an
image whose C library cannot run this machine's Python; a container a killed run left is removed by the next.
The episode, limit and grading tests run on podman and on docker (cs.RUNTIMES; .ci/run provides both)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.errors import AlightError
from agentlightning_cli.sandbox import SandboxSpec
from agentlightning_cli.sandbox.container import check_image, runtime_path, ulimit_args
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from agentlightning_cli.scripted.harness_scripts import is_aider
from agentlightning_cli.tasks.shell import run_shell
from tests import container_support as cs
from tests import run_support as rs
from tests.harness_support import installed


@pytest.fixture(scope="module")
def image() -> str:
    return cs.image()


def _alight_containers(under: Path, runtime: str = "podman") -> list[str]:
    """alight's containers (running or not) whose workspace is under `under`."""
    from agentlightning_cli.sandbox.container import labelled

    return [cid for cid, workspace in labelled(cs.runtime(runtime)) if workspace.startswith(str(under))]


@pytest.mark.parametrize("runtime", cs.RUNTIMES)
def test_a_shell_runs_in_the_image_with_the_workspace_and_without_network(runtime: str, tmp_path: Path) -> None:
    image = cs.image(cs.IMAGE, runtime)
    ws = tmp_path / "ws"
    ws.mkdir()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[bool] = []

    def accept() -> None:
        try:
            server.accept()
            accepted.append(True)
        except OSError:  # closed at the end of the test, nothing having connected
            pass

    threading.Thread(target=accept, daemon=True).start()
    probe = (f"python3 -c \"import socket; s = socket.socket(); s.settimeout(3); "
             f"print('reached' if s.connect_ex(('127.0.0.1', {port})) == 0 else 'unreachable')\"")
    spec = SandboxSpec(writable=[ws], image=image, runtime=runtime)
    res = run_shell(f"cat /etc/alight-test-image; echo made > out.txt; echo $TASK_X; {probe}; ls /root | wc -l; "
                    "echo $PATH; echo ${VIRTUAL_ENV:-none}", ws, 120, env={"TASK_X": "from-the-host"}, sandbox=spec)
    assert res.exit_code == 0, res
    lines = res.stdout_tail.splitlines()
    assert lines[:4] == [cs.MARK.strip(), "from-the-host", "unreachable", "0"]
    # The image's own environment, with the task's variables added: not this machine's PATH or virtualenv.
    assert ".pyenv" not in lines[4] and ".venv" not in lines[4] and lines[5] == "none", lines
    assert (ws / "out.txt").read_text() == "made\n" and not accepted
    server.close()
    assert _alight_containers(tmp_path, runtime) == []  # removed once the command ended


@pytest.mark.parametrize("runtime", cs.RUNTIMES)
def test_memory_past_the_limit_is_a_resource_limit(runtime: str, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    spec = SandboxSpec(writable=[ws], image=cs.image(cs.IMAGE, runtime), limits=EpisodeLimits(memory_mb=128),
                       runtime=runtime)
    hog = "python3 -c \"x = bytearray(200 * 1024 * 1024); import time; time.sleep(5)\""  # touched: 200 MB resident
    res = run_shell(hog, ws, 120, sandbox=spec)
    assert res.resource_limit is not None and res.resource_limit.startswith("memory"), res
    assert _alight_containers(tmp_path, runtime) == []


def test_an_image_that_cannot_run_this_python_is_refused_with_the_fix(tmp_path: Path) -> None:
    old = cs.image(cs.OLD_IMAGE)  # Debian bullseye: glibc 2.31
    with pytest.raises(AlightError) as info:
        check_image(runtime_path(), old)
    assert "cannot run this machine's Python" in info.value.message and "GLIBC" in info.value.message
    assert "C library" in (info.value.hint or "")


def _calc_tasks(root: Path, image: str | None) -> Path:
    extra = {} if image is None else {"image": image}
    return rs.calc_task_set(root, [{"id": "solve", "prompt": "SOLVE-ME: fix add() in calc.py", **extra},
                                   {"id": "leave", "prompt": "LEAVE-ME: look around", **extra}])


@pytest.mark.parametrize("runtime", cs.RUNTIMES)
def test_mini_swe_agent_runs_inside_the_image_through_the_proxy(runtime: str, tmp_path: Path) -> None:
    rs.ensure_mini()
    image = cs.image(cs.IMAGE, runtime)
    tasks = _calc_tasks(tmp_path, image)
    look = "cat /etc/alight-test-image > seen.txt; ls -a >> seen.txt; ls /root | wc -l >> seen.txt"

    def first(text: str) -> str:
        return look + ("; sed -i 's/a - b/a + b/' calc.py" if "SOLVE-ME" in text else "")

    out = tmp_path / "runs" / "c"
    leftover = subprocess.run([cs.runtime(runtime), "run", "-d", *ulimit_args(), "--label",
                               f"alight.workspace={out}/workspaces/ep-old", image, "sleep", "600"], capture_output=True, text=True, check=True).stdout.strip()
    with FakeVLLM(FakeScript(reply=rs.mini_script(first), served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--attempts", "1",
                          "--upstream", fake.url, "--out", str(out), "--sandbox", "container", "--keep-workspaces",
                          "--json"], cwd=tmp_path, env={"ALIGHT_CONTAINER__RUNTIME": runtime})
    assert proc.returncode == 0, proc.stderr
    assert "removed 1 container(s) a stopped earlier run left behind" in proc.stderr
    assert leftover[:12] not in subprocess.run([cs.runtime(runtime), "ps", "-a", "-q"], capture_output=True,
                                               text=True).stdout
    summary = json.loads(proc.stdout)
    by = {t["task_id"]: t for t in summary["tasks"]}
    assert by["solve"]["mean_reward"] == 1.0 and by["leave"]["mean_reward"] == 0.0
    assert summary["sandbox"] == "container"
    store, episodes = rs.read_store(out)
    try:
        for ep in episodes:
            seen = (out / "workspaces" / ep.id / "seen.txt").read_text().splitlines()
            assert seen[0] == cs.MARK.strip() and "calc.py" in seen and "test_hidden_calc.py" not in seen, seen
            assert seen[-1] == "0"  # the host's /root (HOME, ALIGHT_HOME, the task set) is not there
            calls = store.get_calls(ep.id)
            assert len(calls) == 2 and all(c.prompt_token_ids for c in calls)
            assert ep.outcome_detail["sandbox"]["mode"] == "container"
            assert ep.outcome_detail["sandbox"]["proxy"] == "listener handed over"
    finally:
        store.close()
    assert _alight_containers(tmp_path, runtime) == []


def test_aider_runs_inside_the_image_and_its_edit_is_graded(tmp_path: Path) -> None:
    """Aider (a PyPI venv, text mode) in the container sandbox: it adds calc.py, named in the task, to its chat and
    writes the file listing the scripted model sends back; the hidden test grades what it wrote."""
    installed("aider")
    image = cs.image(cs.IMAGE)
    tasks = rs.calc_task_set(tmp_path, [{"id": "solve", "prompt": "Fix add() in calc.py.", "image": image}])
    fixed = rs.CALC.replace("a - b", "a + b")

    def reply(body: dict) -> dict:
        if not is_aider(body):
            return {"content": "Done."}  # alight's own probe of the upstream before the round
        # calc.py's content must have reached the model: Aider added the file, named in the task, to its chat.
        listing = f"calc.py\n```\n{fixed}```\n" if "a - b" in json.dumps(body["messages"]) else "calc.py is missing"
        return {"content": listing}

    out = tmp_path / "runs" / "a"
    with FakeVLLM(FakeScript(reply=reply, served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", "aider", "--attempts", "1", "--upstream",
                          fake.url, "--out", str(out), "--sandbox", "container", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["sandbox"] == "container" and summary["mean_reward"] == 1.0, summary
    store, [episode] = rs.read_store(out)
    try:
        patch = store.get_patch(episode.id)
        assert episode.outcome == "finished" and episode.outcome_detail["sandbox"]["mode"] == "container"
        assert len(store.get_calls(episode.id)) == 1
    finally:
        store.close()
    assert patch.files == 1 and patch.patch.startswith(b"diff --git a/calc.py b/calc.py\n"), patch
    assert _alight_containers(tmp_path) == []


@pytest.mark.parametrize("runtime", cs.RUNTIMES)
def test_codex_runs_inside_the_image_on_the_hosts_node_through_the_proxy(runtime: str, tmp_path: Path) -> None:
    """Codex's npm install runs on Node, which lies in the host's system folders: the run checks `codex --version`
    in the image before the round (Node mounted as a single file) and its episodes work there through the real
    proxy (Responses over SSE, translated to the scripted chat upstream)."""
    from agentlightning_cli.scripted.harness_scripts import tool_then_finish

    installed("codex")
    image = cs.image(cs.IMAGE, runtime)
    tasks = _calc_tasks(tmp_path, image)
    look = "cat /etc/alight-test-image > seen.txt; ls /root | wc -l >> seen.txt"
    fix, leave = tool_then_finish("codex", look + "; sed -i 's/a - b/a + b/' calc.py"), tool_then_finish("codex", look)

    def reply(body: dict) -> dict:
        return (fix if "SOLVE-ME" in json.dumps(body.get("messages")) else leave)(body)

    out = tmp_path / "runs" / "x"
    with FakeVLLM(FakeScript(reply=reply, served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", "codex", "--attempts", "1", "--upstream",
                          fake.url, "--out", str(out), "--sandbox", "container", "--keep-workspaces", "--json"],
                         cwd=tmp_path, env={"ALIGHT_CONTAINER__RUNTIME": runtime})
    assert proc.returncode == 0, proc.stderr
    assert f"image {image} runs codex (codex-cli " in proc.stderr  # checked once, before the round
    by = {t["task_id"]: t for t in json.loads(proc.stdout)["tasks"]}
    assert by["solve"]["mean_reward"] == 1.0 and by["leave"]["mean_reward"] == 0.0
    store, episodes = rs.read_store(out)
    try:
        for ep in episodes:
            seen = (out / "workspaces" / ep.id / "seen.txt").read_text().splitlines()
            assert seen == [cs.MARK.strip(), "0"], seen  # in the image, without the host's /root
            assert ep.outcome_detail["sandbox"]["mode"] == "container"
            assert [c.protocol for c in store.get_calls(ep.id)][:1] == ["openai-responses"]
    finally:
        store.close()
    assert _alight_containers(tmp_path, runtime) == []


def test_the_harness_check_runs_in_each_image_and_names_what_is_missing(image: str, tmp_path: Path) -> None:
    """Before the round the recipe's own check runs in the image with an episode's mounts; without Node (what the
    check in the image is for: the image's /usr is not the host's) it stops with the harness, image and error."""
    from agentlightning_cli.commands.run_checks import harness_check
    from agentlightning_cli.sandbox.container import check_harness

    recipe, inst = installed("codex")
    argv, mounts, env = harness_check(recipe, inst)
    assert argv[-1] == "--version" and any(p.name == "node" for p in mounts)
    assert check_harness(runtime_path(), image, "codex", argv, mounts, env).startswith("codex-cli ")
    without_node = [p for p in mounts if p.name != "node"]
    with pytest.raises(AlightError) as err:
        check_harness(runtime_path(), image, "codex", argv, without_node, env)
    assert f"codex cannot run in the image {image}" in str(err.value) and "node" in str(err.value)
    assert "Node for an npm install" in err.value.hint


def test_a_run_refuses_missing_images_before_any_episode(image: str, tmp_path: Path) -> None:
    rs.ensure_mini()
    out = tmp_path / "runs" / "n"
    tasks = _calc_tasks(tmp_path, None)
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--upstream",
                      "http://127.0.0.1:9/v1", "--out", str(out), "--sandbox", "container"], cwd=tmp_path)
    assert proc.returncode != 0 and "needs an image for every task; 2 have none (solve, leave)" in proc.stderr
    assert "container.image" in proc.stderr and not out.exists()
    absent = "localhost/alight-test:no-such-tag"
    tasks = _calc_tasks(tmp_path / "b", absent)
    for pull, why in (("never", "not present, and container.pull is never"), ("missing", "pull failed")):
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--upstream",
                          "http://127.0.0.1:9/v1", "--out", str(out), "--sandbox", "container"], cwd=tmp_path,
                         env={"ALIGHT_CONTAINER__PULL": pull})
        assert proc.returncode != 0 and not out.exists(), proc.stderr
        assert f"1 image(s) needed by this task set cannot be had:\n  {absent} ({why}" in proc.stderr, proc.stderr


def test_doctor_checks_the_runtime_and_the_configured_image(image: str, tmp_path: Path) -> None:
    old = cs.image(cs.OLD_IMAGE)
    found = {}
    for name in (image, old):
        proc = rs.alight(["doctor", "--json"], cwd=tmp_path, env={"ALIGHT_CONTAINER__IMAGE": name,
                                                                   "ALIGHT_SANDBOX": "container"})
        checks = json.loads(proc.stdout)["checks"]
        found[name] = next(c for c in checks if c["name"].startswith("container runtime"))
    assert found[image]["ok"] and "podman" in found[image]["version"] and image in found[image]["detail"]
    assert not found[old]["ok"] and "GLIBC" in found[old]["detail"] and "C library" in found[old]["fix"]


# A SWE-bench-format instance built here (container_support.swebench_instance), graded by the official code.
SWE_FIXER = rs.CALL_MODEL_ONCE + '''here = os.getcwd()
seen = [here, str(os.path.exists("tests/test_calc.py")), str(os.path.exists("/etc/alight-test-image"))]
open("seen.txt", "w").write("\\n".join(seen) + "\\n")
if MODE == "fix":
    open("calc/__init__.py", "w").write("def add(a, b):\\n    return a + b\\n")
elif MODE == "cheat":  # an ignored conftest that makes add() right while the tests run, outside the diff
    open("conftest.py", "w").write("import calc\\ncalc.add = lambda a, b: a + b\\n")
print(json.dumps({"event": "finished"}))
'''


@pytest.mark.parametrize("mode, reward, runtime", [("fix", 1.0, "podman"), ("noop", 0.0, "podman"),
                                                   ("cheat", 0.0, "podman"), ("fix", 1.0, "docker")])
def test_swebench_instance_in_its_image_graded_by_the_official_code(tmp_path: Path, mode: str, reward: float,
                                                                    runtime: str) -> None:
    row, image = cs.swebench_instance(tmp_path, runtime)
    tasks = tmp_path / "swe.jsonl"
    tasks.write_text(json.dumps(row) + "\n")
    agent = tmp_path / f"{mode}.py"
    agent.write_text(SWE_FIXER.replace("MODE", repr(mode)))
    agent.chmod(0o755)
    recipe = rs.script_recipe(tmp_path, mode, [str(agent), "{{ prompt_file }}"])
    out = tmp_path / "runs" / mode
    with FakeVLLM(FakeScript(turns=["ok"], served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "1",
                          "--upstream", fake.url, "--out", str(out), "--sandbox", "container", "--keep-workspaces",
                          "--json"], cwd=tmp_path, env={"ALIGHT_CONTAINER__GRADING_NETWORK": "false",
                                                        "ALIGHT_CONTAINER__RUNTIME": runtime})
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["statuses"] == {"done": 1} and summary["tasks"][0]["mean_reward"] == reward, summary
    assert any("grading ran without the network" in note for note in summary["notes"]), summary["notes"]
    store, (ep,) = rs.read_store(out)
    try:
        detail = ep.reward_detail
        assert detail["grading"] == "official" and detail["resolved"] == (reward == 1.0) and not detail["network"]
        f2p, p2p = detail["tests_status"]["FAIL_TO_PASS"], detail["tests_status"]["PASS_TO_PASS"]
        assert (f2p["success"] if mode == "fix" else f2p["failure"]) == ["tests/test_calc.py::test_add_negative"]
        assert len(p2p["success"]) == 3 and detail["patch_applied"]
        patch = store.get_patch(ep.id)
    finally:
        store.close()
    seen = (out / "workspaces" / ep.id / "seen.txt").read_text().split()
    # The agent worked at /testbed, in the image, without the hidden test file change (test_patch comes later).
    assert seen == ["/testbed", "True", "True"]
    assert "test_add_negative" not in (out / "workspaces" / ep.id / "tests" / "test_calc.py").read_text()
    if mode == "cheat":  # the ignored conftest.py is outside the patch: the verdict never saw it
        assert b"conftest" not in patch.patch


def test_a_swebench_row_without_grading_columns_is_refused_before_the_round(tmp_path: Path) -> None:
    from tests.test_tasks_swebench import make_mirror

    _, line = make_mirror(tmp_path)
    tasks = tmp_path / "swe.jsonl"
    tasks.write_text(json.dumps({k: v for k, v in line.items() if not k.startswith("_")}) + "\n")
    out = tmp_path / "runs" / "x"
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--upstream",
                      "http://127.0.0.1:9/v1", "--out", str(out), "--sandbox", "container"], cwd=tmp_path)
    assert proc.returncode != 0 and not out.exists()
    assert "1 SWE-bench row(s) (acme__calc-42) lack what the official grading needs" in proc.stderr
    assert "`eval_script`, `log_parser` and `eval_type`" in proc.stderr and "--sandbox bwrap" in proc.stderr


@pytest.mark.parametrize("name", ["opencode", "qwen-code", "gemini-cli", "kilo-code", "mistral-vibe"])
def test_npm_harnesses_run_inside_the_image_through_the_proxy(name: str, tmp_path: Path) -> None:
    """OpenCode and Kilo Code (self-contained binaries), Qwen Code and Gemini CLI (on the host's Node, mounted like
    Codex's; Gemini CLI over the Gemini API, translated) and Mistral Vibe (a PyPI venv on the host's Python, like
    Aider's) work in the task's image under `--sandbox container` (podman), talking only to the proxy: the scripted
    shell step runs in the image, the reward sees its edit."""
    from agentlightning_cli.scripted.harness_scripts import tool_then_finish

    recipe, _ = installed(name)
    image = cs.image(cs.IMAGE)
    tasks = _calc_tasks(tmp_path, image)
    look = "cat /etc/alight-test-image > seen.txt"
    fix, leave = tool_then_finish(name, look + "; sed -i 's/a - b/a + b/' calc.py"), tool_then_finish(name, look)

    def reply(body: dict) -> dict:
        return (fix if "SOLVE-ME" in json.dumps(body.get("messages")) else leave)(body)

    out = tmp_path / "runs" / "x"
    with FakeVLLM(FakeScript(reply=reply, served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", name, "--attempts", "1", "--upstream",
                          fake.url, "--out", str(out), "--sandbox", "container", "--keep-workspaces", "--json"],
                         cwd=tmp_path, env={"ALIGHT_CONTAINER__RUNTIME": "podman"})
    assert proc.returncode == 0, proc.stderr
    by = {t["task_id"]: t for t in json.loads(proc.stdout)["tasks"]}
    assert by["solve"]["mean_reward"] == 1.0 and by["leave"]["mean_reward"] == 0.0, by
    store, episodes = rs.read_store(out)
    try:
        for ep in episodes:
            assert ep.outcome == "finished", (ep.outcome, ep.error)
            assert (out / "workspaces" / ep.id / "seen.txt").read_text() == cs.MARK  # in the image
            assert ep.outcome_detail["sandbox"]["mode"] == "container"
            assert [c.protocol for c in store.get_calls(ep.id)][:1] == [recipe.protocol]
    finally:
        store.close()
    assert _alight_containers(tmp_path, "podman") == []
