"""`alight run --executor ray` on a real local Ray cluster: a head and two worker nodes that offer the
`alight_episode` resource (Ray's own cluster_utils, every node a real raylet on this machine), mini-SWE-agent
sandboxed on the nodes, a scripted model upstream. Every episode runs on a worker node, in the node's own folder,
and reaches the head's proxy over TCP; the head alone writes the store. A worker killed mid-episode -> that
episode is abandoned and redone and the round completes; the head stopped with Ctrl-C -> a rerun completes
every slot exactly once."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from agentlightning_cli.rollout.plan import FINAL
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from tests import run_support as rs
from tests.harness_support import harness_home

FIX = "sed -i 's/a - b/a + b/' calc.py"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Head (no episode slots) + two worker nodes with two slots each. Workers inherit ALIGHT_RAY__NODE_DIR: each
    episode's folder on its node is under it, never in the head's run folder."""
    from ray.cluster_utils import Cluster

    node_dir = tmp_path_factory.mktemp("nodes")
    # What every node's processes inherit: its folder for episodes, and the test harness installs as ALIGHT_HOME.
    node_env = {"ALIGHT_RAY__NODE_DIR": str(node_dir), "ALIGHT_HOME": str(harness_home())}
    before = {k: os.environ.get(k) for k in node_env}
    os.environ.update(node_env)
    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 ** 2}
    c = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
    workers = [c.add_node(**small, resources={"alight_episode": 2}) for _ in range(2)]
    c.wait_for_nodes()
    try:
        yield c, workers, node_dir
    finally:
        c.shutdown()
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _args(tasks: Path, fake: FakeVLLM, out: Path, address: str, attempts: int = 2) -> list[str]:
    return ["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--attempts", str(attempts),
            "--concurrency", "4", "--upstream", fake.url, "--out", str(out), "--executor", "ray",
            "--ray-address", address]


def _final(out: Path) -> list:
    store, episodes = rs.read_store(out)
    store.close()
    return episodes


def test_a_round_runs_every_episode_on_a_worker_node_and_the_head_stores_it_once(cluster, tmp_path):
    rs.ensure_mini()
    c, workers, node_dir = cluster
    tasks = rs.calc_task_set(tmp_path, [{"id": f"t{i}", "prompt": "fix add"} for i in range(3)])
    out = tmp_path / "runs" / "r1"
    script = FakeScript(reply=rs.mini_script(lambda text: FIX), served_models=["policy-r0"])
    with FakeVLLM(script) as fake:
        done = rs.alight(_args(tasks, fake, out, c.address), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    episodes = _final(out)
    assert len(episodes) == 6 and all(e.status == "done" and e.reward == 1.0 for e in episodes), \
        [(e.status, e.reward, e.error) for e in episodes]
    worker_ids = {w.node_id for w in workers}
    nodes = Counter(e.outcome_detail["node"]["node_id"] for e in episodes)
    assert set(nodes) <= worker_ids, (nodes, worker_ids)  # never on the head, which offers no episode slot
    assert sum(nodes.values()) == 6
    store, _ = rs.read_store(out)
    try:
        for e in episodes:
            # Each of mini's two calls (the fix, then submit) recorded once, by the head's proxy.
            assert store.llm_call_count(e.id)[0] == 2
            assert e.outcome_detail["sandbox"]["mode"] == "bwrap"  # sandboxed on the node
            assert Path(e.outcome_detail["node"]["folder"]).is_relative_to(node_dir)
            assert Path(e.workspace).is_relative_to(node_dir)  # where it was made, on the node
            assert (out / "logs" / "episodes" / f"{e.id}.stdout").is_file()  # its log tail came back to the head
            assert store.get_patch(e.id) is not None
    finally:
        store.close()
    assert not (out / "workspaces").exists() or not any((out / "workspaces").iterdir())
    summary = " ".join(done.stdout.split())
    assert f"Ray ran the episodes on {len(nodes)} node(s)" in summary and "proxy round trip" in summary, summary


def test_endings_on_a_node_are_the_same_as_on_one_machine(cluster, tmp_path):
    """A call refused over the budget stops the harness on its node (budget_exceeded); a source the node cannot
    fetch is setup_failed with the git error; the others are scored as usual."""
    import json

    rs.ensure_mini()
    c, _, _ = cluster
    tasks = rs.calc_task_set(tmp_path, [
        {"id": "ok", "prompt": "fix add"},
        {"id": "chatty", "prompt": "LOOP: keep going"},
        {"id": "no-repo", "prompt": "fix", "repo": f"file://{tmp_path}/missing.git"},
    ])

    def reply(body: dict) -> dict:
        if "LOOP" in json.dumps(body.get("messages")):  # never submits: runs into the call budget
            return rs.shell_call("mini-swe-agent", "true")
        return rs.mini_script(lambda text: FIX)(body)

    out = tmp_path / "runs" / "r4"
    with FakeVLLM(FakeScript(reply=reply, served_models=["policy-r0"])) as fake:
        done = rs.alight(_args(tasks, fake, out, c.address, attempts=1) + ["--max-calls", "3"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    by = {e.task_id: e for e in _final(out)}
    assert (by["ok"].status, by["ok"].outcome, by["ok"].reward) == ("done", "finished", 1.0)
    assert (by["chatty"].status, by["chatty"].outcome, by["chatty"].reward) == ("done", "budget_exceeded", 0.0)
    assert "budget" in by["chatty"].error
    assert by["no-repo"].status == "setup_failed" and "cannot fetch" in by["no-repo"].error
    assert by["no-repo"].reward is None and by["no-repo"].outcome_detail["node"]["node_id"]  # where it failed


def _sleepers(seconds: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == f"sleep\0{seconds}\0".encode():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _ray_worker_of(pid: int) -> int:
    """The Ray worker process an episode's tool command runs under (its title starts with `ray::`)."""
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if cmdline.startswith(b"ray::") or b"default_worker.py" in cmdline:
            return pid
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    raise AssertionError("no Ray worker above the episode's process")


def test_a_worker_killed_mid_episode_is_redone_and_the_round_completes(cluster, tmp_path):
    rs.ensure_mini()
    c, _, _ = cluster
    tasks = rs.calc_task_set(tmp_path, [{"id": "slow", "prompt": "fix add SLOW"}, {"id": "quick", "prompt": "fix add"}])
    out = tmp_path / "runs" / "r2"
    slow_started = []

    def first_command(text: str) -> str:
        if "SLOW" in text and not slow_started:  # the first try of the slow task only
            slow_started.append(True)
            return "sleep 3131"
        return FIX

    with FakeVLLM(FakeScript(reply=rs.mini_script(first_command), served_models=["policy-r0"])) as fake:
        proc = rs.start_alight(_args(tasks, fake, out, c.address, attempts=1), cwd=tmp_path)
        deadline = time.monotonic() + 240
        while not _sleepers("3131") and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        sleepers = _sleepers("3131")
        assert sleepers, "the slow episode's command never started"
        os.kill(_ray_worker_of(sleepers[0]), signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert _sleepers("3131") == []  # the sandbox went with its worker
    episodes = _final(out)
    slow = sorted((e for e in episodes if e.task_id == "slow"), key=lambda e: e.id)
    assert [e.status for e in slow] == ["abandoned", "done"], [(e.id, e.status, e.error) for e in slow]
    assert "lost" in slow[0].error and slow[1].reward == 1.0
    assert slow[1].id == slow[0].id + ".1"
    assert [e.status for e in episodes if e.task_id == "quick"] == ["done"]
    assert "redone after their node was lost" in " ".join(stdout.split()), stdout


def test_the_head_stopped_then_rerun_completes_every_slot_once(cluster, tmp_path):
    rs.ensure_mini()
    c, _, _ = cluster
    tasks = rs.calc_task_set(tmp_path, [{"id": "one", "prompt": "fix"}, {"id": "two", "prompt": "fix"}])
    out = tmp_path / "runs" / "r3"
    script = FakeScript(reply=rs.mini_script(lambda text: "sleep 4; " + FIX), served_models=["policy-r0"])
    with FakeVLLM(script) as fake:
        proc = rs.start_alight(_args(tasks, fake, out, c.address), cwd=tmp_path)
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "[1/4]" in line:
                break
        else:
            raise AssertionError("no episode ended: " + "".join(lines))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 130
        interrupted = {e.id for e in _final(out) if e.status == "interrupted"}
        assert interrupted, "expected episodes still out when the head stopped"
        again = rs.alight(_args(tasks, fake, out, c.address), cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert "resuming" in again.stderr
    episodes = _final(out)
    final = [e for e in episodes if e.status in FINAL]
    assert Counter((e.task_id, e.attempt) for e in final) == {(t, a): 1 for t in ("one", "two") for a in (0, 1)}
    assert all(e.status == "done" and e.reward == 1.0 for e in final)
    assert {e.id for e in episodes if e.status == "abandoned"} == interrupted
    assert _sleepers("4") == []


class _StubRay:
    """What RayExecutor.set_proxy reads of Ray: this node's address and the cluster's nodes."""

    def __init__(self, here: str, nodes: list[tuple[str, int]]):
        import types

        self.util = types.SimpleNamespace(get_node_ip_address=lambda: here)
        self._nodes = [{"Alive": True, "NodeManagerAddress": a, "Resources": {"alight_episode": n} if n else {}}
                       for a, n in nodes]

    def nodes(self) -> list[dict]:
        return self._nodes


def test_the_nodes_reach_the_proxy_where_it_listens_and_a_loopback_proxy_is_refused_for_other_machines():
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.rollout.ray_executor import RayExecutor

    executor = RayExecutor("10.0.0.1:6379", 4)
    executor._ray = _StubRay("10.0.0.1", [("10.0.0.1", 0), ("10.0.0.2", 8), ("10.0.0.3", 8)])
    executor.set_proxy("http://0.0.0.0:8123")  # proxy.host: 0.0.0.0 -> the head's own address
    assert executor.proxy_url == "http://10.0.0.1:8123"
    with pytest.raises(AlightError) as refused:
        executor.set_proxy("http://127.0.0.1:8123")
    assert "10.0.0.2, 10.0.0.3" in refused.value.message and "proxy.host: 0.0.0.0" in refused.value.hint
    executor._ray = _StubRay("10.0.0.1", [("10.0.0.1", 8)])  # every episode slot on this machine: loopback is fine
    executor.set_proxy("http://127.0.0.1:8123")
    assert executor.proxy_url == "http://127.0.0.1:8123"


def test_harness_install_runs_on_every_node_with_episode_slots(cluster, tmp_path):
    rs.ensure_mini()
    c, workers, _ = cluster
    done = rs.alight(["harness", "install", "mini-swe-agent", "--ray-address", c.address], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and {w.node_id[:8] for w in workers} == {line.split("(node ")[1][:8] for line in lines}
    assert all("mini-swe-agent" in line for line in lines), lines


def test_an_episode_past_its_deadline_is_cancelled_and_its_worker_process_killed(cluster, tmp_path):
    """The deadline path of RayExecutor on a real cluster: a task that outlives it comes back `interrupted` and the
    worker process running it is gone (what takes an episode's sandbox with it)."""
    import asyncio

    import ray

    from agentlightning_cli.rollout.ray_executor import RESOURCE, RayExecutor

    c, _, _ = cluster
    pid_file = tmp_path / "pid"

    def stuck() -> None:  # pickled by value: the nodes need nothing of this test module
        import os as os_
        import time as time_

        with open(pid_file, "w") as fh:
            fh.write(str(os_.getpid()))
        time_.sleep(600)

    executor = RayExecutor(c.address, 1)
    executor.connect()
    try:
        ref = ray.remote(stuck).options(num_cpus=0, resources={RESOURCE: 1}, max_retries=0).remote()
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        pid = int(pid_file.read_text())
        got = asyncio.run(executor.wait_for_episode(ref, 1.0))
        assert got.result.status == "interrupted" and "deadline" in got.result.error
        deadline = time.monotonic() + 60
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists(), "the worker process outlived its cancelled task"
    finally:
        executor.close()


def test_a_container_sandboxed_round_runs_on_the_nodes_in_the_tasks_image(cluster, tmp_path):
    """`--sandbox container` (SWE-bench's way) on the Ray nodes: each episode's harness, setup and reward run in the
    task's image on its node, and the harness in the container reaches the head's proxy through the node's relay."""
    from agentlightning_cli.sandbox.container import labelled
    from tests import container_support as cs

    rs.ensure_mini()
    c, workers, node_dir = cluster
    image = cs.image(cs.IMAGE)
    tasks = rs.calc_task_set(tmp_path, [{"id": "solve", "prompt": "SOLVE-ME: fix add", "image": image},
                                        {"id": "leave", "prompt": "LEAVE-ME: look around", "image": image}])
    look = "cat /etc/alight-test-image > seen.txt"

    def first(text: str) -> str:
        return look + ("; " + FIX if "SOLVE-ME" in text else "")

    out = tmp_path / "runs" / "r5"
    with FakeVLLM(FakeScript(reply=rs.mini_script(first), served_models=["policy-r0"])) as fake:
        done = rs.alight(_args(tasks, fake, out, c.address, attempts=1) + ["--sandbox", "container"], cwd=tmp_path,
                         env={"ALIGHT_CONTAINER__RUNTIME": "podman"})
    assert done.returncode == 0, done.stderr
    by = {e.task_id: e for e in _final(out)}
    assert (by["solve"].reward, by["leave"].reward) == (1.0, 0.0), [(e.status, e.error) for e in by.values()]
    store, _ = rs.read_store(out)
    try:
        for e in by.values():
            assert e.outcome_detail["sandbox"]["mode"] == "container"
            assert e.outcome_detail["sandbox"]["proxy"] == "relayed"  # to the head's proxy over TCP
            assert e.outcome_detail["node"]["node_id"] in {w.node_id for w in workers}
            assert len(store.get_calls(e.id)) == 2
            assert b"a + b" in (store.get_patch(e.id).patch or b"") or e.task_id == "leave"
    finally:
        store.close()
    assert [cid for cid, ws in labelled(cs.runtime()) if ws.startswith(str(node_dir))] == []  # none left on nodes
