"""`alight run --executor ray` on a real local Ray cluster: a head and two worker nodes that offer the
`alight_episode` resource (Ray's own cluster_utils, every node a real raylet on this machine, token
authenticated), mini-SWE-agent sandboxed on the nodes, a scripted model upstream. Every episode runs on a worker
node, in the node's own folder, and reaches the head's proxy over TCP; the head alone writes the store; the task's
local files reach the nodes through Ray's object store. A worker killed mid-episode (bubblewrap or container) ->
that episode is abandoned and redone, nothing of it left on its node, and the round completes; the head stopped
with Ctrl-C -> a rerun completes every slot exactly once. Every wait is on something the test can see (a file an
episode writes, a line of progress, a process), never on the clock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from agentlightning_cli.rollout.plan import FINAL
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from agentlightning_cli.scripted.harness_scripts import MINI_SUBMIT, shell_call
from tests import run_support as rs
from tests.harness_support import harness_home

FIX = "sed -i 's/a - b/a + b/' calc.py"
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Head (no episode slots) + two worker nodes with two slots each. Workers inherit ALIGHT_RAY__NODE_DIR: each
    episode's folder on its node is under it, never in the head's run folder."""
    from ray.cluster_utils import Cluster

    from agentlightning_cli.rollout.ray_executor import _own_token

    node_dir = tmp_path_factory.mktemp("nodes")
    # What every node's processes inherit: its folder for episodes, and the test harness installs as ALIGHT_HOME;
    # the cluster's token (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN), which the alight processes under test inherit too.
    node_env = {"ALIGHT_RAY__NODE_DIR": str(node_dir), "ALIGHT_HOME": str(harness_home())}
    before = {k: os.environ.get(k) for k in (*node_env, *AUTH_VARS)}
    os.environ.update(node_env)
    _own_token()
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
        _reload_ray_auth()


def _reload_ray_auth() -> None:
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


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
    assert "WorkerCrashedError" in slow[0].error and slow[1].reward == 1.0  # Ray's own reason, kept
    assert slow[1].id == slow[0].id + ".1"
    assert [e.status for e in episodes if e.task_id == "quick"] == ["done"]
    assert "redone after a Ray failure" in " ".join(stdout.split()), stdout


def _files(root: Path, pattern: str) -> list[Path]:
    return sorted(root.glob(pattern))


def _wait_for(what: str, check, proc: subprocess.Popen | None = None, limit_s: float = 240):
    """Until check() is true (an event the test can see); fails naming `what` if alight exits first or past the
    limit (a hang, not a timing)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"alight exited ({proc.returncode}) before {what}: {proc.stderr.read()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def test_the_head_stopped_then_rerun_completes_every_slot_once(cluster, tmp_path):
    """Ctrl-C when both `quick` episodes have ended and both `held` ones are running on their nodes (each wrote
    HELD-RUNNING in its workspace and waits to be killed): the held ones are interrupted, a rerun redoes them."""
    rs.ensure_mini()
    c, _, node_dir = cluster
    tasks = rs.calc_task_set(tmp_path, [{"id": "quick", "prompt": "fix add QUICK"},
                                        {"id": "held", "prompt": "fix add HELD"}])
    out = tmp_path / "runs" / "r3"
    holding = [True]

    def first(text: str) -> str:
        return "touch HELD-RUNNING; sleep 3132" if "HELD" in text and holding[0] else FIX

    with FakeVLLM(FakeScript(reply=rs.mini_script(first), served_models=["policy-r0"])) as fake:
        proc = rs.start_alight(_args(tasks, fake, out, c.address), cwd=tmp_path)
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "[2/4]" in line:
                break
        else:
            raise AssertionError("the quick episodes never ended: " + "".join(lines))
        held = _wait_for("both held episodes running on their nodes",
                         lambda: len(_files(node_dir, "*/workspaces/*/HELD-RUNNING")) == 2 and
                         _files(node_dir, "*/workspaces/*/HELD-RUNNING"), proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 130
        interrupted = {e.id for e in _final(out) if e.status == "interrupted"}
        assert interrupted == {path.parent.name for path in held}
        holding[0] = False
        again = rs.alight(_args(tasks, fake, out, c.address), cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert "resuming" in again.stderr
    episodes = _final(out)
    final = [e for e in episodes if e.status in FINAL]
    assert Counter((e.task_id, e.attempt) for e in final) == {(t, a): 1 for t in ("quick", "held") for a in (0, 1)}
    assert all(e.status == "done" and e.reward == 1.0 for e in final)
    assert {e.id for e in episodes if e.status == "abandoned"} == interrupted
    assert _sleepers("3132") == []


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


def _episode_gen(body=None):
    """A Ray generator task shaped like remote.episode_task: the start report, then body() or a `done` NodeResult."""

    def gen():  # pickled by value, with body: the nodes need nothing of this test module
        import os as os_
        import time as time_

        from agentlightning_cli.rollout.episode import Result
        from agentlightning_cli.rollout.remote import NodeResult

        yield {"node_id": "test", "address": "127.0.0.1", "pid": os_.getpid(), "at": time_.time()}
        yield body() if body is not None else NodeResult(Result("done", reward=1.0))

    return gen


@pytest.fixture
def executor(cluster):
    from agentlightning_cli.rollout.ray_executor import RayExecutor

    c, _, _ = cluster
    ex = RayExecutor(c.address, 1)
    ex.connect()
    try:
        yield ex
    finally:
        ex.close()


def _submit(fn, **options):
    import ray

    from agentlightning_cli.rollout.ray_executor import RESOURCE

    return ray.remote(fn).options(num_cpus=0, max_retries=0, **{"resources": {RESOURCE: 1}, **options}).remote()


def _wait(gen, deadline_s: float = 120.0, queue_timeout_s: float = 120.0):
    import asyncio

    import ray

    from agentlightning_cli.rollout.ray_executor import RESOURCE
    from agentlightning_cli.rollout.ray_wait import wait_for_episode

    return asyncio.run(wait_for_episode(ray, gen, deadline_s, queue_timeout_s, RESOURCE))


def test_an_episode_past_its_deadline_is_cancelled_and_its_worker_process_killed(executor, tmp_path):
    """The deadline path on a real cluster: a task that outlives it comes back `interrupted` and the worker
    process running it is gone (what takes an episode's bubblewrap sandbox with it)."""
    pid_file = tmp_path / "pid"

    def stuck():
        import os as os_
        import time as time_

        with open(pid_file, "w") as fh:
            fh.write(str(os_.getpid()))
        time_.sleep(600)

    got = _wait(_submit(_episode_gen(stuck)), deadline_s=1.0)
    assert got.result.status == "interrupted" and "deadline" in got.result.error
    pid = int(pid_file.read_text())
    _wait_for("the cancelled task's worker process to end", lambda: not Path(f"/proc/{pid}").exists(), limit_s=60)


def test_ray_failures_of_one_episode_are_that_episodes_with_rays_reason(executor, cluster):
    """A task Ray cannot schedule (TaskUnschedulableError, a plain RayError that used to cancel the whole round)
    and alight's code failing on the node with a TimeoutError (a RayTaskError that is also a TimeoutError, once read
    as the deadline) both come back as that episode's failure (Lost: abandoned and redone once), naming Ray's
    reason; the generator's start report says where it ran."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from agentlightning_cli.rollout.ray_wait import Lost

    gone = NodeAffinitySchedulingStrategy("ab" * 28, soft=False)  # a node id no node has
    got = _wait(_submit(_episode_gen(), scheduling_strategy=gone))
    assert isinstance(got, Lost) and got.why.startswith("TaskUnschedulableError"), got

    def times_out():
        raise TimeoutError("the node's own timeout")

    got = _wait(_submit(_episode_gen(times_out)), deadline_s=600)
    assert isinstance(got, Lost), got
    assert "wrapping TimeoutError" in got.why and "the node's own timeout" in got.why and "deadline" not in got.why
    assert got.started is not None and got.started["node_id"] == "test"
    last = _wait(_submit(_episode_gen()))
    assert not isinstance(last, Lost) and last.result.status == "done", last  # the cluster took no harm


def test_a_queue_timeout_ends_an_episode_no_node_can_schedule(executor):
    got = _wait(_submit(_episode_gen(), resources={"alight_episode": 1, "no_node_has_this": 1}),
                queue_timeout_s=2.0)
    assert got.result.status == "interrupted" and "queue timeout" in got.result.error, got.result.error
    assert got.result.timings["queued_s"] >= 2.0


def test_the_deadline_starts_on_the_node_and_waiting_behind_busy_slots_is_no_queue_time(executor, cluster, tmp_path):
    """Every episode slot of the cluster held: an episode waits in Ray's queue longer than both its deadline and its
    queue timeout, then runs; neither clock ran out, since the deadline starts with the node's start report and the
    queue clock runs only while a slot is free."""
    import asyncio

    import ray

    release = tmp_path / "release"

    def hold():
        import os as os_
        import time as time_

        while not os_.path.exists(release):
            time_.sleep(0.05)

    slots = int(ray.cluster_resources()["alight_episode"])
    holders = [_submit(hold) for _ in range(slots)]
    _wait_for("every slot held", lambda: ray.available_resources().get("alight_episode", 0) == 0, limit_s=120)

    async def scenario():
        from agentlightning_cli.rollout.ray_executor import RESOURCE
        from agentlightning_cli.rollout.ray_wait import wait_for_episode

        waiting = asyncio.ensure_future(wait_for_episode(ray, _submit(_episode_gen()), 4.0, 2.0, RESOURCE))
        await asyncio.sleep(6.0)  # the scenario itself: queued past both limits (what is checked is the outcome)
        assert not waiting.done()
        release.write_text("go")
        return await waiting

    got = asyncio.run(scenario())
    ray.get(holders)
    assert got.result.status == "done", got.result.error


def test_a_missing_hidden_files_folder_is_an_error_not_an_empty_folder(tmp_path):
    """What a node without the head's files used to do: reveal nothing, then score whatever the agent wrote."""
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.rollout.remote import _missing_source
    from agentlightning_cli.tasks import load_tasks, reveal_hidden_files

    tasks = load_tasks(rs.calc_task_set(tmp_path, [{"id": "t", "prompt": "fix"}]))
    hidden = tasks[0].hidden_files
    (tmp_path / "ws").mkdir()
    (hidden / "test_hidden_calc.py").unlink()
    hidden.rmdir()
    with pytest.raises(AlightError) as gone:
        reveal_hidden_files(tasks[0], tmp_path / "ws")
    assert str(hidden) in gone.value.message
    why = _missing_source(tasks[0], {"node_id": "f" * 56, "address": "10.0.0.7"})
    assert why is not None and str(hidden) in why and "node ffffffff (10.0.0.7)" in why


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


def _held_then(first: str, then: str = MINI_SUBMIT):
    """mini-SWE-agent: step 0 runs `first`, step 1 runs `then` after the test's go: it writes READY in its
    workspace and waits there for GO (an event each side can see)."""
    def reply(body: dict) -> dict:
        messages = body.get("messages") or []
        done = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
        if done == 0:
            return shell_call("mini-swe-agent", first)
        return shell_call("mini-swe-agent", f"touch READY; while [ ! -e GO ]; do sleep 0.05; done; {then}")

    return reply


def test_a_call_count_the_node_cannot_read_keeps_the_harness_ending(cluster, tmp_path):
    """The head's proxy stops answering (the head process stopped: a network blip that outlasts every retry) just
    after the harness made its last call: the episode stays `finished` with its reward and trains; it says the
    node could not read the count, and the head counted its own store (2 calls). It used to be `harness_error: the
    harness could not start` with 0 calls, out of training."""
    rs.ensure_mini()
    c, _, node_dir = cluster
    tasks = rs.calc_task_set(tmp_path, [{"id": "blip", "prompt": "fix add"}])
    out = tmp_path / "runs" / "r6"
    with FakeVLLM(FakeScript(reply=_held_then(FIX), served_models=["policy-r0"])) as fake:
        proc = rs.start_alight(_args(tasks, fake, out, c.address, attempts=1), cwd=tmp_path)
        ready = _wait_for("the harness's last step", lambda: _files(node_dir, "*/workspaces/*/READY"), proc)
        workspace = ready[0].parent
        os.kill(proc.pid, signal.SIGSTOP)  # the proxy (in the head) answers nothing from here
        try:
            (workspace / "GO").write_text("")
            # The episode ended on its node (its workspace is removed after the reward): every ask had failed.
            _wait_for("the episode to end on its node", lambda: not workspace.exists(), limit_s=180)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    (e,) = _final(out)
    assert (e.status, e.outcome, e.reward) == ("done", "finished", 1.0), (e.status, e.outcome, e.error)
    assert "the call count was not read" in e.outcome_detail["calls_not_read"]
    assert e.outcome_detail["calls_not_read"].endswith("counted on the head instead: 2")


def test_an_episode_key_stops_working_once_its_result_is_back_on_the_head(cluster, tmp_path):
    """Two episodes, one at a time, unsandboxed so they can leave notes for each other: the first writes its URL
    and key where the second finds them; the second, sent only after the first's result came back, calls the model
    with the first's key and is refused (403, recorded nowhere), then makes its own call."""
    import json

    c, _, _ = cluster
    notes = tmp_path / "notes"
    notes.mkdir()
    agent = tmp_path / "agent.py"
    agent.write_text(rs.CALL_MODEL_ONCE + f"""
notes = {str(notes)!r}
if "first" in open(sys.argv[1]).read():
    json.dump({{"url": os.environ["OPENAI_BASE_URL"], "key": os.environ["OPENAI_API_KEY"]}},
              open(os.path.join(notes, "first.json"), "w"))
else:
    first = json.load(open(os.path.join(notes, "first.json")))
    late = urllib.request.Request(first["url"] + "/chat/completions", data=json.dumps(body).encode(),
                                  headers={{"Content-Type": "application/json",
                                           "Authorization": "Bearer " + first["key"]}})
    try:
        status = urllib.request.urlopen(late, timeout=60).status
    except urllib.error.HTTPError as exc:
        status = exc.code
    open(os.path.join(notes, "late.json"), "w").write(json.dumps({{"status": status}}))
print(json.dumps({{"event": "finished"}}))
""")
    agent.chmod(0o755)
    recipe = rs.script_recipe(tmp_path, "notes", [sys.executable, str(agent), "{{ prompt_file }}"])
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "prompt": i, "reward": "true"}) + "\n" for i in ("first", "second")))
    out = tmp_path / "runs" / "keys"
    with FakeVLLM(FakeScript(turns=["ok"] * 4, served_models=["policy-r0"])) as fake:
        done = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "1",
                          "--concurrency", "1", "--upstream", fake.url, "--out", str(out), "--executor", "ray",
                          "--ray-address", c.address, "--sandbox", "none"], cwd=tmp_path)
        upstream_calls = [r for r in fake.requests if r.get("max_tokens") != 1]  # not the start's probes
    assert done.returncode == 0, done.stderr
    assert json.loads((notes / "late.json").read_text()) == {"status": 403}
    store, episodes = rs.read_store(out)
    try:
        assert {e.task_id: store.llm_call_count(e.id)[0] for e in episodes} == {"first": 1, "second": 1}
    finally:
        store.close()
    assert len(upstream_calls) == 2  # the late call never reached the model


def test_retried_call_count_asks_ride_out_a_blip(tmp_path):
    """ProxyCalls on a node: an ask that gets no answer (a server that accepts and says nothing) is asked again."""
    import json
    import socket
    import threading

    from agentlightning_cli.rollout.remote import ProxyCalls

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    asked = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(65536)
            asked.append(1)
            if len(asked) == 1:  # the blip: the first ask is never answered
                continue
            body = json.dumps({"calls": 3, "first_call_at": 1.0}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    counter = ProxyCalls(f"http://127.0.0.1:{server.getsockname()[1]}", "ek-x", ask_timeout_s=1.0,
                         retries_s=(0.1,))
    try:
        assert counter("ep-1") == (3, 1.0)
    finally:
        server.close()
    assert len(asked) >= 2


def test_the_nodes_get_the_tasks_files_from_the_head_not_from_a_shared_file_system(cluster, tmp_path):
    """Every episode has started on its node when the head's task files (the hidden tests, a plain-folder repo and
    a local git repo) are deleted: the episodes finish and are scored from what the head sent through Ray's object
    store (reward 1.0; a node reading the head's paths would reveal nothing and score 0). The git repo reached the
    node as its base commit's history only (a later commit, a tag and a branch in it never left the head)."""
    import shutil

    rs.ensure_mini()
    c, _, node_dir = cluster
    tasks = rs.calc_task_set(tmp_path, [{"id": "plain", "prompt": "fix add"}])
    gitrepo = tmp_path / "repos" / "calc-git"
    shutil.copytree(tmp_path / "repos" / "calc", gitrepo)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(gitrepo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    base = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (gitrepo / "FUTURE.txt").write_text("the fix\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "later"], check=True)
    subprocess.run([*git, "tag", "v-later"], check=True)
    import json

    with open(tasks, "a") as fh:
        line = {"id": "git", "prompt": "fix add", "repo": "repos/calc-git", "base_commit": base,
                "hidden_files": "hidden/calc", "reward": "python3 -m unittest -q test_hidden_calc"}
        fh.write(json.dumps(line) + "\n")
    out = tmp_path / "runs" / "r7"
    with FakeVLLM(FakeScript(reply=_held_then(FIX), served_models=["policy-r0"])) as fake:
        proc = rs.start_alight(_args(tasks, fake, out, c.address, attempts=1), cwd=tmp_path)
        ready = _wait_for("both episodes at their last step",
                          lambda: len(_files(node_dir, "*/workspaces/*/READY")) == 2 and
                          _files(node_dir, "*/workspaces/*/READY"), proc)
        shutil.rmtree(tmp_path / "hidden")
        shutil.rmtree(tmp_path / "repos")
        for path in ready:
            (path.parent / "GO").write_text("")
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    by = {e.task_id: e for e in _final(out)}
    assert {k: (e.status, e.reward) for k, e in by.items()} == {"plain": ("done", 1.0), "git": ("done", 1.0)}, \
        {k: e.error for k, e in by.items()}
    shipped = [p for p in _files(node_dir, "*/shipped/*") if (p / "HEAD").is_file()]
    assert shipped, "no node unpacked the git repo's bundle"
    for repo in shipped:
        history = subprocess.run(["git", "-C", str(repo), "rev-list", "--all"], capture_output=True, text=True,
                                 check=True).stdout.split()
        assert history == [base]  # the base commit's history: not the later commit
        assert subprocess.run(["git", "-C", str(repo), "tag"], capture_output=True, text=True).stdout == ""


def test_the_cluster_alight_starts_refuses_a_client_without_its_token(tmp_path):
    """`--executor ray` without `--ray-address` starts its own Ray, token authenticated with a token of the run
    that is written nowhere, even where the user's environment says RAY_AUTH_MODE=disabled: a client that was not
    given the token is refused, with token authentication off or on (and the same HOME, where Ray's own default
    would have left the token in ~/.ray/auth_token)."""
    import re
    import threading

    rs.ensure_mini()
    tasks = rs.calc_task_set(tmp_path, [{"id": "t", "prompt": "fix add"}])
    home = tmp_path / "home"
    home.mkdir()
    out = tmp_path / "runs" / "r8"
    answered = threading.Event()

    def reply(body: dict) -> dict:
        import json

        if "fix add" in json.dumps(body.get("messages")):  # the episode's (not the probe's): the run stays up
            answered.wait(300)  # until the client has tried
        return rs.mini_script(lambda text: FIX)(body)

    env = {"HOME": str(home), "RAY_AUTH_MODE": "disabled"}
    clean = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    with FakeVLLM(FakeScript(reply=reply, served_models=["policy-r0"])) as fake:
        args = ["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--attempts", "1", "--concurrency",
                "1", "--upstream", fake.url, "--out", str(out), "--executor", "ray"]
        saved = {k: os.environ.pop(k) for k in AUTH_VARS if k in os.environ}
        try:
            proc = rs.start_alight(args, cwd=tmp_path, env=env)
        finally:
            os.environ.update(saved)
        lines: list[str] = []
        for line in proc.stderr:
            lines.append(line)
            found = re.search(r"one-machine cluster at (\S+) \(token authentication", line)
            if found:
                break
        else:
            raise AssertionError("no cluster started: " + "".join(lines))
        clients = [subprocess.run(
            [sys.executable, "-c", f"import ray; ray.init(address={found.group(1)!r}); print('JOINED')"],
            capture_output=True, text=True, timeout=120, env={**clean, "HOME": str(home), "RAY_AUTH_MODE": mode})
            for mode in ("disabled", "token")]
        answered.set()
        stdout, stderr = proc.communicate(timeout=300)
    for client in clients:
        assert "JOINED" not in client.stdout and client.returncode != 0
        assert "InvalidAuthToken" in client.stderr or "no authentication token" in client.stderr, client.stderr[-2000:]
    assert not (home / ".ray" / "auth_token").exists()  # the token was written nowhere
    assert proc.returncode == 0, stderr
    assert [e.reward for e in _final(out)] == [1.0]


def test_a_worker_killed_under_containers_leaves_no_container_and_the_episode_is_redone(cluster, tmp_path):
    """`--sandbox container`: the Ray worker running an episode is SIGKILLed while the agent's command runs in its
    container. The container outlives its worker (the runtime's monitor is its parent); the head removes it on its
    node, the episode is abandoned and redone, and nothing of it is left running."""
    from agentlightning_cli.sandbox.container import labelled
    from tests import container_support as cs

    rs.ensure_mini()
    c, _, node_dir = cluster
    image = cs.image(cs.IMAGE)
    tasks = rs.calc_task_set(tmp_path, [{"id": "slow", "prompt": "fix add SLOW", "image": image},
                                        {"id": "quick", "prompt": "fix add", "image": image}])
    out = tmp_path / "runs" / "r9"
    slow_started = []

    def first_command(text: str) -> str:
        if "SLOW" in text and not slow_started:
            slow_started.append(True)
            return "touch SLOW-RUNNING; sleep 3133"
        return FIX

    with FakeVLLM(FakeScript(reply=rs.mini_script(first_command), served_models=["policy-r0"])) as fake:
        proc = rs.start_alight(_args(tasks, fake, out, c.address, attempts=1) + ["--sandbox", "container"],
                               cwd=tmp_path, env={"ALIGHT_CONTAINER__RUNTIME": "podman"})
        marker = _wait_for("the slow episode's command in its container",
                           lambda: _files(node_dir, "*/workspaces/*/SLOW-RUNNING") and _sleepers("3133") and
                           _files(node_dir, "*/workspaces/*/SLOW-RUNNING"), proc)
        label = f"alight.workspace={marker[0].parent}".encode()
        client = _wait_for("the podman client of the slow episode", lambda: _podman_client(label), proc)
        os.kill(_ray_worker_of(client), signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert _sleepers("3133") == []  # its container went with its episode
    assert [cid for cid, ws in labelled(cs.runtime()) if ws.startswith(str(node_dir))] == []
    slow = sorted((e for e in _final(out) if e.task_id == "slow"), key=lambda e: e.id)
    assert [e.status for e in slow] == ["abandoned", "done"], [(e.id, e.status, e.error) for e in slow]
    assert "WorkerCrashedError" in slow[0].error and slow[1].reward == 1.0
    assert "leftover container(s) removed on the nodes" in " ".join(stdout.split()), stdout


def _podman_client(label: bytes) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"podman") and b"run" in argv and label in argv:
                return int(entry.name)
    return None
