"""Units of the rollout: deterministic ids and resume plans, pass@k, reward classification, the git source
cache (one fetch for many attempts), stale-process cleanup, the run lock and the plain progress lines."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.errors import AlightError
from agentlightning_cli.reward import RewardResult
from agentlightning_cli.rollout import scoring, stale
from agentlightning_cli.rollout.plan import ABANDONED, episode_id, plan_round
from agentlightning_cli.rollout.progress import Progress
from agentlightning_cli.rollout.sources import SourceCache
from agentlightning_cli.rollout.summary import pass_at_k, summarize


@dataclass
class T:
    id: str


@dataclass
class E:
    id: str
    task_id: str
    attempt: int
    status: str
    reward: float | None = None
    outcome: str | None = None


def test_episode_ids_are_deterministic_distinct_and_url_safe():
    a = episode_id("run-1", 0, "task/with spaces:@+=", 3)
    assert a == episode_id("run-1", 0, "task/with spaces:@+=", 3)
    others = {episode_id("run-1", 0, "task/with spaces:@+=", 2), episode_id("run-1", 1, "task/with spaces:@+=", 3),
              episode_id("run-2", 0, "task/with spaces:@+=", 3), episode_id("run-1", 0, "task/with spaces:@+=", 3, 1)}
    assert a not in others and len(others) == 4
    import re

    from agentlightning_cli.proxy.server import EPISODE_PATH

    assert EPISODE_PATH.match(f"/e/{a}/v1") and re.fullmatch(r"ep-[0-9a-f]{16}", a)


def test_plan_keeps_final_redoes_unfinished_and_never_duplicates():
    tasks = [T("a"), T("b")]
    fresh = plan_round("r", 0, tasks, 2, [])
    assert [(s.task.id, s.attempt) for s in fresh.todo] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    existing = [
        E(episode_id("r", 0, "a", 0), "a", 0, "done", 1.0),
        E(episode_id("r", 0, "a", 1), "a", 1, "running"),
        E(episode_id("r", 0, "b", 0), "b", 0, "setup_failed"),
        E(episode_id("r", 0, "b", 1), "b", 1, ABANDONED),
        E(episode_id("r", 0, "b", 1, 1), "b", 1, "interrupted"),
    ]
    plan = plan_round("r", 0, tasks, 2, existing)
    assert [(s.task.id, s.attempt) for s in plan.todo] == [("a", 1), ("b", 1)]
    assert [s.episode_id for s in plan.todo] == [episode_id("r", 0, "a", 1, 1), episode_id("r", 0, "b", 1, 2)]
    assert sorted(plan.abandon) == sorted([episode_id("r", 0, "a", 1), episode_id("r", 0, "b", 1, 1)])
    assert {e.status for e in plan.kept} == {"done", "setup_failed"}


def test_pass_at_k_matches_the_unbiased_estimator():
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - (3 * 2) / (5 * 4))
    assert pass_at_k(0, 0, 1) is None


def test_summary_counts_statuses_outcomes_and_failed_setups_as_not_passing():
    eps = [E("1", "a", 0, "done", 1.0, "finished"), E("2", "a", 1, "done", 0.0, "timeout"),
           E("3", "b", 0, "setup_failed"), E("4", "b", 1, "reward_error", None, "finished")]
    s = summarize("run", 0, 2, eps, calls=7)
    by = {t.task_id: t for t in s.tasks}
    assert (by["a"].attempts, by["a"].solved, by["a"].mean_reward, by["a"].pass_at_1, by["a"].pass_at_k) == (2, 1, 0.5, 0.5, 1.0)
    assert (by["b"].attempts, by["b"].solved, by["b"].mean_reward, by["b"].pass_at_k) == (2, 0, None, 0.0)
    assert s.statuses == {"done": 2, "setup_failed": 1, "reward_error": 1}
    assert s.outcomes == {"finished": 2, "timeout": 1, "none": 1}
    assert s.to_json()["calls"] == 7


def _reward(**kw):
    base = dict(reward=0.0, detail={}, exit_code=0, stdout_tail="", stderr_tail="", duration_s=0.1)
    return RewardResult(**{**base, **kw})


@pytest.mark.parametrize("result, status", [
    (_reward(reward=1.0), "done"),
    (_reward(exit_code=1), "done"),  # tests failed: a real 0
    (_reward(reward=0.5, detail={"passed": 1}, stdout_tail='{"reward": 0.5, "passed": 1}'), "done"),
    (_reward(error="reward command ran past its 1s limit and was killed", timed_out=True, exit_code=None), "reward_error"),
    (_reward(exit_code=-9), "reward_error"),
    (_reward(exit_code=127, stderr_tail="bash: nope: command not found"), "reward_error"),
    (_reward(exit_code=0, reward=1.0, stdout_tail='{"reward": 1.0, oops'), "reward_error"),
    (_reward(error="the final JSON line's reward must be a finite number, got \"high\""), "reward_error"),
])
def test_reward_classification(result, status):
    got, reward, error = scoring.classify(result)
    assert got == status
    assert (reward is None) == (status == "reward_error") and (error is None) == (status == "done")


def _git(*args, cwd):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True)


def test_source_cache_fetches_a_remote_once_and_never_a_later_commit(tmp_path):
    from agentlightning_cli.tasks import prepare_workspace
    from agentlightning_cli.tasks.model import Task

    origin = tmp_path / "origin"
    origin.mkdir()
    _git("init", "-q", cwd=origin)
    (origin / "f.txt").write_text("base\n")
    _git("add", "-A", cwd=origin)
    _git("commit", "-qm", "base", cwd=origin)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=origin, capture_output=True, text=True).stdout.strip()
    (origin / "f.txt").write_text("the fix\n")
    _git("commit", "-qam", "later", cwd=origin)
    task = Task(id="t", prompt="p", repo=f"file://{origin}", repo_kind="url", base_commit=base, setup=[],
                reward="true", hidden_files=None, timeout_s=None, metadata={}, kind="own",
                source_file=tmp_path / "x.jsonl", source_line=1)
    cache = SourceCache(tmp_path / "sources")
    for i in range(3):
        local = cache.local_task(task)
        ws = prepare_workspace(local, tmp_path / f"ws{i}")
        assert (ws / "f.txt").read_text() == "base\n"
        log = subprocess.run(["git", "log", "--all", "--format=%s"], cwd=ws, capture_output=True, text=True).stdout
        assert "later" not in log
        assert subprocess.run(["git", "remote"], cwd=ws, capture_output=True, text=True).stdout == ""
    assert cache.fetches == 1
    bad = task.model_copy(update={"repo": f"file://{tmp_path}/missing", "id": "gone"})
    with pytest.raises(AlightError, match="cannot fetch"):
        cache.local_task(bad)


def test_stale_processes_of_a_run_are_found_and_killed(tmp_path):
    run_dir = tmp_path / "run"
    ws = stale.workspaces_root(run_dir) / "ep-1"
    ws.mkdir(parents=True)
    home = stale.harness_root(run_dir) / "ep-2" / "home"
    home.mkdir(parents=True)
    env = {**os.environ}
    p1 = subprocess.Popen(["sleep", "300"], env={**env, "TASK_WORKSPACE": str(ws)}, start_new_session=True)
    p2 = subprocess.Popen(["sleep", "300"], env={**env, "HOME": str(home)}, start_new_session=True)
    other = subprocess.Popen(["sleep", "300"], env={**env, "TASK_WORKSPACE": str(tmp_path / "elsewhere")})
    try:
        assert set(stale.run_processes(run_dir)) == {p1.pid, p2.pid}
        assert set(stale.kill_run_processes(run_dir)) == {p1.pid, p2.pid}
        assert p1.wait(5) == -9 and p2.wait(5) == -9
        assert other.poll() is None
        assert stale.remove_leftovers(run_dir, ["ep-1", "ep-2", "ep-3"]) == 2
        assert not ws.exists() and not home.parent.exists()
    finally:
        other.kill()
        other.wait()


def test_run_lock_refuses_a_second_live_run_and_is_freed_by_death(tmp_path):
    with stale.RunLock(tmp_path):
        code = ("import sys; from agentlightning_cli.rollout.stale import RunLock\n"
                "try:\n  RunLock(sys.argv[1]).__enter__()\nexcept Exception as e:\n  print(e); sys.exit(3)")
        proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
        assert proc.returncode == 3 and f"pid {os.getpid()}" in proc.stdout
    holder = subprocess.Popen([sys.executable, "-c", "import sys,time; from agentlightning_cli.rollout.stale import "
                               "RunLock; RunLock(sys.argv[1]).__enter__(); print('held', flush=True); time.sleep(60)",
                               str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    with stale.RunLock(tmp_path):  # the kernel released the dead holder's lock
        pass


def test_plain_progress_lines_when_not_a_terminal():
    out = io.StringIO()
    with Progress(3, stream=out) as p:
        p.started_one()
        p.finished_one("ep-1", "a", 0, "done", "finished", 1.0, 2, 40)
        p.finished_one("ep-2", "a", 1, "setup_failed", None, None, 0, 0, "setup command 1 of 1 exited with 1")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[1/3] a#0 ep-1: done (finished) reward 1 calls 2"
    assert lines[1].startswith("[2/3] a#1 ep-2: setup_failed calls 0 - setup command 1")
    assert "episodes 2/3 done, 0 running, 1 queued | mean reward 1.00 | calls 2" in p.line()
    assert "setup_failed 1" in p.line()
    time.sleep(0)


def test_live_progress_renders_the_counts():
    out = io.StringIO()
    with Progress(2, stream=out, live=True) as p:
        p.started_one()
        p.finished_one("ep-1", "a", 0, "done", "timeout", 0.0, 3, 10)
    text = out.getvalue()
    assert "episodes 1/2 done, 0 running, 1 queued" in text and "timeout 1" in text


async def test_run_mode_proxy_knows_only_registered_episodes(tmp_path):
    """As `alight run` starts it (ad_hoc=False): 404 for an episode it was not given, 200 once registered."""
    import urllib.error
    import urllib.request

    from agentlightning_cli.rollout.episode import RoundContext, create
    from agentlightning_cli.rollout.plan import Slot
    from agentlightning_cli.testing.proxy_env import ProxyEnv

    def get(url: str, key: str) -> int:
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
        try:
            return urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10).status
        except urllib.error.HTTPError as exc:
            return exc.code

    async with ProxyEnv(tmp_path / "run") as env:
        assert env.ad_hoc is False
        run = env.store.create_run("r", {})
        rnd = env.store.create_round(run.id, 0, "policy-r0", None)
        ctx = RoundContext(store=env.store, proxy=env.proxy, recipe=type("R", (), {"name": "x"})(), installed=None,
                           run_id=run.id, round_id=rnd.id, run_dir=tmp_path / "run",
                           sources=SourceCache(tmp_path / "s"), sandbox="none", limits=EpisodeLimits())
        ep = episode_id(run.id, 0, "t", 0)
        url = env.proxy.episode_base_url(ep) + "/models"
        assert await asyncio.to_thread(get, url, "ek-guess") == 404
        key = await asyncio.to_thread(create, ctx, Slot(T("t"), 0, ep))
        assert await asyncio.to_thread(get, url, key) == 200
        assert await asyncio.to_thread(get, url, "ek-wrong") == 401
        assert env.store.get_episode(ep).status == "pending"


@pytest.mark.parametrize("k,header", [(1, ["pass@1"]), (4, ["pass@1", "pass@4"])])
def test_the_summary_table_shows_pass_at_k_beside_pass_at_1_only_when_k_is_more_than_1(k, header):
    import io

    from rich.console import Console

    from agentlightning_cli.rollout.summary import RoundSummary, TaskSummary, render

    out = io.StringIO()
    render(RoundSummary("r", 0, k, k, 0.5, [TaskSummary("t", k, 1, 0.5, 0.5, 1.0)], {"done": k}, {"finished": k}),
           Console(file=out, width=120))
    head = next(line for line in out.getvalue().splitlines() if "task" in line and "attempts" in line)
    assert [cell.strip() for cell in head.strip("┃ ").split("┃")][-len(header):] == header
    assert head.count("pass@") == len(header)
