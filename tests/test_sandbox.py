"""The sandbox itself, through the real proxy (Unix socket + in-sandbox forwarder) and the scripted upstream:
what a sandboxed command can reach, its limits, and the clear error without bubblewrap."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.errors import AlightError
from agentlightning_cli.sandbox import Sandbox, SandboxSpec, ensure_available
from agentlightning_cli.sandbox.bwrap import bwrap_path, forwarder_python
from agentlightning_cli.testing import sandbox_agent
from agentlightning_cli.testing.loopback import LoopbackServer
from agentlightning_cli.testing.proxy_env import start_env, stop_env

AGENT = Path(sandbox_agent.__file__)
PYTHON, PYTHON_PREFIX = forwarder_python()  # the bare interpreter: the agent needs only the standard library


async def run_boxed(box: Sandbox, argv: list[str], cwd: Path, timeout: float = 60,
                    kill_when=None) -> int | None:
    """Start argv in the sandbox, wait (killing bubblewrap on timeout, or once `kill_when()` holds), close the
    sandbox."""
    proc = await asyncio.create_subprocess_exec(*box.command(argv, cwd), cwd=str(cwd), **box.popen_kwargs(),
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    box.started(proc.pid)
    try:
        if kill_when is not None:
            await wait_for(lambda: kill_when() or proc.returncode is not None, timeout)
            raise asyncio.TimeoutError
        await asyncio.wait_for(proc.wait(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
    box.exit_limit(proc.returncode)
    box.close()
    return proc.returncode


async def wait_for(condition, timeout: float) -> bool:
    """Polls `condition` until it holds or `timeout` seconds pass; whether it held."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def episode_dirs(tmp_path: Path, name: str) -> tuple[Path, Path]:
    ws, ep = tmp_path / name / "ws", tmp_path / name / "ep"
    ws.mkdir(parents=True)
    (ep / "home").mkdir(parents=True)
    return ws, ep


def spec_for(ws: Path, ep: Path, env, limits: EpisodeLimits | None = None) -> SandboxSpec:
    port = int(env.proxy.base_url.rsplit(":", 1)[1])
    return SandboxSpec(writable=[ws, ep], read_only=[AGENT.parent], proxy_socket=Path(env.proxy.unix_path),
                       proxy_port=port, limits=limits or EpisodeLimits())


async def test_sees_its_workspace_and_the_proxy_and_nothing_else(tmp_path: Path) -> None:
    env = await start_env(tmp_path)
    server = LoopbackServer()
    home_secret = Path.home() / f".alight-sandbox-probe-{os.getpid()}"
    home_secret.write_text("user secret")
    try:
        hidden = tmp_path / "taskset" / "hidden" / "test_secret.py"
        hidden.parent.mkdir(parents=True)
        hidden.write_text("HIDDEN TEST")
        other_ws, _ = episode_dirs(tmp_path, "other")
        (other_ws / "answer.txt").write_text("other episode's work")
        ws, ep = episode_dirs(tmp_path, "mine")
        episode_id, key = env.episode()
        store_db = next((tmp_path / "run").glob("*.db"))
        outside = tmp_path / "outside.txt"
        cfg = {
            "base_url": f"{env.proxy.base_url}/e/{episode_id}/v1", "api_key": key,
            "read": [str(hidden), str(store_db), str(other_ws / "answer.txt"), str(home_secret), str(ep / "home")],
            "write": [str(outside), "/etc/alight-escape", str(Path.home() / "escape.txt"), str(ep / "home" / "ok.txt"),
                      "/tmp/ok.txt"],
            "connect": [["127.0.0.1", server.port]],
            "resolve": ["example.com", "pypi.org"],
        }
        box = Sandbox(spec_for(ws, ep, env))
        code = await run_boxed(box, [PYTHON, "-I", str(AGENT), json.dumps(cfg)], ws)
        assert code == 0, box.breach
        report = json.loads((ws / "report.json").read_text())
        assert report["model"] == {"ok": True, "value": [200, "Hello from the fake model."]}
        calls = await env.calls(episode_id, 1)
        assert len(calls) == 1 and calls[0].status == "ok"
        assert (ws / "out.txt").read_text() == "edited by the script agent\n"
        for path in (hidden, store_db, other_ws / "answer.txt", home_secret):
            assert not report["read"][str(path)]["ok"], path
            assert "FileNotFoundError" in report["read"][str(path)]["error"]
        writes = report["write"]
        assert writes[str(ep / "home" / "ok.txt")]["ok"] and writes["/tmp/ok.txt"]["ok"]
        assert not writes["/etc/alight-escape"]["ok"] and "Read-only" in writes["/etc/alight-escape"]["error"]
        # Writes elsewhere land in the sandbox's own throwaway tmpfs at best, never on the host.
        assert not outside.exists() and not (Path.home() / "escape.txt").exists()
        assert not Path("/etc/alight-escape").exists() and not Path("/tmp/ok.txt").exists()
        assert not report["connect"][f"127.0.0.1:{server.port}"]["ok"]
        assert server.seen == []
        assert not any(r["ok"] for r in report["resolve"].values()), report["resolve"]
    finally:
        home_secret.unlink()
        server.close()
        await stop_env(env)


async def test_fork_bomb_and_memory_hog_end_at_their_limits_while_another_goes_on(tmp_path: Path) -> None:
    env = await start_env(tmp_path)
    try:
        limits = EpisodeLimits(processes=48, memory_mb=300)
        boxes, runs = [], []
        for name, mode in (("bomb", "fork_bomb"), ("hog", "memory_hog"), ("calm", "probe")):
            ws, ep = episode_dirs(tmp_path, name)
            box = Sandbox(spec_for(ws, ep, env, limits))
            argv = [PYTHON, "-I", str(AGENT), json.dumps({"mode": mode})]
            if name == "calm":  # outlives the other two, then finishes normally
                argv = ["bash", "-c", f"sleep 3 && {PYTHON} -I {AGENT} '{json.dumps({'mode': mode})}'"]
            boxes.append((name, box, ws))
            runs.append(run_boxed(box, argv, ws, timeout=60))
        codes = await asyncio.gather(*runs)
        result = {name: (box.limit, box.breach, code, ws) for (name, box, ws), code in zip(boxes, codes)}
        assert result["bomb"][0] == "processes", result["bomb"]
        assert result["hog"][0] == "memory", result["hog"]
        assert result["calm"][0] is None and result["calm"][2] == 0, result["calm"]
        assert (result["calm"][3] / "report.json").exists()
    finally:
        await stop_env(env)


async def test_killing_the_sandbox_leaves_no_process_behind(tmp_path: Path) -> None:
    ws, ep = episode_dirs(tmp_path, "sleeper")
    box = Sandbox(SandboxSpec(writable=[ws, ep], read_only=[AGENT.parent, PYTHON_PREFIX]))
    marker = f"{os.getpid()}{len(str(tmp_path))}"
    argv = ["bash", "-c", f"(setsid sleep 36{marker} &); {PYTHON} -I {AGENT} '{json.dumps({'mode': 'sleep_with_daemon'})}'"]

    def left() -> list[str]:
        return [p for p in os.listdir("/proc") if p.isdigit() and (f"36{marker}" in _cmdline(p)
                                                                    or str(AGENT) in _cmdline(p))]

    def agents() -> int:  # the agent and, once it forked, its own-session daemon (bwrap's argv names it too)
        return sum(1 for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).startswith(f"{PYTHON} -I {AGENT}"))

    # Killed once the agent has reported and its daemon is up.
    await run_boxed(box, argv, ws, timeout=60, kill_when=lambda: (ws / "report.json").exists() and agents() >= 2)
    assert (ws / "report.json").exists(), "the agent never ran; the test proves nothing"

    await wait_for(lambda: not left(), 5)  # the kernel reaps a killed PID namespace asynchronously
    assert left() == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


async def test_big_file_hits_the_file_size_limit(tmp_path: Path) -> None:
    ws, ep = episode_dirs(tmp_path, "writer")
    box = Sandbox(SandboxSpec(writable=[ws, ep], read_only=[AGENT.parent, PYTHON_PREFIX], limits=EpisodeLimits(file_size_mb=5)))
    await run_boxed(box, [PYTHON, "-I", str(AGENT), json.dumps({"mode": "big_file"})], ws)
    assert box.limit == "file_size" and "big.bin" in box.breach
    assert (ws / "big.bin").stat().st_size == 5 * 1024 * 1024


async def test_a_write_past_the_file_size_limit_anywhere_in_the_tree_ends_the_sandbox_at_once(tmp_path: Path) -> None:
    """A shell tool's write past the limit kills only that writer; the kernel's exit notice ends the episode."""
    from agentlightning_cli.sandbox import exits

    assert exits.listener() is not None, "this machine's kernel gives no exit notices"
    ws, ep = episode_dirs(tmp_path, "tool")
    box = Sandbox(SandboxSpec(writable=[ws, ep], limits=EpisodeLimits(file_size_mb=5)))
    started = time.monotonic()
    await run_boxed(box, ["bash", "-c", "bash -c 'head -c 10000000 /dev/zero > big'; echo went on > after; sleep 60"],
                    ws, timeout=60)
    assert time.monotonic() - started < 10
    assert box.limit == "file_size" and "SIGXFSZ" in box.breach, box.breach
    assert (ws / "big").stat().st_size == 5 * 1024 * 1024


async def test_without_exit_notices_the_sandboxs_first_process_still_catches_an_orphan_killed_at_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlightning_cli.sandbox import exits

    monkeypatch.setattr(exits, "listener", lambda: None)  # a machine where the kernel tells us nothing
    ws, ep = episode_dirs(tmp_path, "orphan")
    box = Sandbox(SandboxSpec(writable=[ws, ep], limits=EpisodeLimits(file_size_mb=5)))
    started = time.monotonic()
    # The writer's parent shell exits first: the writer is an orphan, reaped by the sandbox's PID 1.
    writer = "sh -c 'sleep 0.3; exec head -c 10000000 /dev/zero > big'"
    code = await run_boxed(box, ["bash", "-c", f"({writer} &); sleep 60"], ws, timeout=60)
    assert time.monotonic() - started < 10
    assert code == 128 + 25 and box.limit == "file_size", (code, box.breach)


async def test_limits_are_set_inside_and_nothing_runs_in_front_of_bubblewrap(tmp_path: Path) -> None:
    ws, ep = episode_dirs(tmp_path, "limits")
    box = Sandbox(SandboxSpec(writable=[ws, ep], limits=EpisodeLimits(cpu_s=77, file_size_mb=3)))
    argv = box.command(["sh", "-c", "cat /proc/self/limits > limits.txt; echo $$ > pid.txt"], ws)
    assert argv[0] == box.bwrap and "--as-pid-1" in argv
    assert box.popen_kwargs().keys() == {"pass_fds"}  # no preexec_fn: Python can vfork
    assert await run_boxed(box, ["sh", "-c", "cat /proc/self/limits > limits.txt; echo $$ > pid.txt"], ws) == 0
    limits = {line[:26].strip(): line[26:].split()[:2] for line in (ws / "limits.txt").read_text().splitlines()[1:]}
    assert limits["Max cpu time"] == ["77", "82"]
    assert limits["Max file size"] == [str(3 * 1024 * 1024)] * 2
    assert limits["Max core file size"] == ["0", "0"]
    assert limits["Max data size"] == [str(2 * 4096 * 1024 * 1024)] * 2  # twice the episode's memory
    assert (ws / "pid.txt").read_text().strip() == "2"  # the forwarder is PID 1, the command its child


async def test_one_process_cannot_commit_past_twice_the_memory_limit_between_two_looks_of_the_watchdog(
        tmp_path: Path) -> None:
    """1 GB allocated and never touched: no resident memory for the watchdog to see, refused by RLIMIT_DATA."""
    ws, ep = episode_dirs(tmp_path, "commit")
    box = Sandbox(SandboxSpec(writable=[ws, ep], read_only=[PYTHON_PREFIX], limits=EpisodeLimits(memory_mb=300)))
    code = await run_boxed(box, [PYTHON, "-I", "-c", "import sys\ntry:\n    bytearray(1 << 30)\nexcept MemoryError:\n"
                                 "    sys.exit(7)"], ws)
    assert code == 7 and box.limit is None


def test_without_bubblewrap_the_error_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without bwrap
    with pytest.raises(AlightError) as err:
        bwrap_path()
    assert "bubblewrap" in str(err.value) and "apt-get install bubblewrap" in err.value.hint
    assert "--sandbox none" in err.value.hint
    with pytest.raises(AlightError):
        Sandbox(SandboxSpec(writable=[tmp_path]))


def test_this_machine_can_sandbox() -> None:
    assert ensure_available().endswith("bwrap")


def test_doctor_says_whether_the_sandbox_works_and_how_to_fix_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from agentlightning_cli.commands.doctor import run_checks

    found = {c["name"]: c for c in run_checks()["checks"]}["bubblewrap (sandbox)"]
    assert found["ok"] and found["version"].startswith("bubblewrap") and "namespaces work" in found["detail"]
    monkeypatch.setenv("PATH", str(tmp_path))
    from agentlightning_cli.sandbox.check import sandbox_status

    missing = sandbox_status()
    assert not missing["ok"] and "apt-get install bubblewrap" in missing["fix"]


def test_sandbox_flag_and_the_summary_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console
    from typer.testing import CliRunner

    from agentlightning_cli.cli import app
    from agentlightning_cli.rollout.summary import render, summarize

    bad = CliRunner().invoke(app, ["harness", "check", "codex", "--sandbox", "chroot"])
    assert bad.exit_code == 2 and "bwrap, container, none" in bad.output
    monkeypatch.setenv("ALIGHT_SANDBOX", "none")  # the summary reports what episodes ran in, not the setting

    def ep(seen: object) -> SimpleNamespace:
        return SimpleNamespace(task_id="t", attempt=0, reward=1.0, status="done", outcome="finished",
                               outcome_detail=None if seen is None else {"sandbox": seen})

    boxed = {"mode": "bwrap", "peak": {}, "proxy": "relayed"}
    assert summarize("r", 0, 1, [ep(boxed)]).sandbox == "bwrap"
    assert summarize("r", 0, 1, [ep(None)]).sandbox is None  # no harness ran: nothing to report
    for eps, shown in (([ep("none")], "sandbox:  none - episodes"), ([ep(boxed), ep("none")], "bwrap, none - some")):
        summary = summarize("r", 0, 1, eps)
        out = io.StringIO()
        render(summary, Console(file=out, width=120))
        assert shown in out.getvalue(), out.getvalue()


async def test_the_proxy_serves_the_sandboxs_own_loopback_listener_until_the_sandbox_ends(tmp_path: Path) -> None:

    env = await start_env(tmp_path)
    try:
        ws, ep = episode_dirs(tmp_path, "handed")
        episode_id, key = env.episode()
        spec = spec_for(ws, ep, env)
        spec.proxy_socket, spec.proxy_listeners = None, Path(env.proxy.listeners_path)
        cfg = {"base_url": f"{env.proxy.base_url}/e/{episode_id}/v1", "api_key": key}
        box = Sandbox(spec)
        assert "hand-over" in box.command(["true"], ws)
        assert await run_boxed(box, [PYTHON, "-I", str(AGENT), json.dumps(cfg)], ws) == 0
        assert json.loads((ws / "report.json").read_text())["model"]["ok"]
        assert len(await env.calls(episode_id, 1)) == 1
        # the sandbox is gone, so is the socket the proxy served for it
        assert await wait_for(lambda: env.proxy._inbox._open == {}, 10), env.proxy._inbox._open
    finally:
        await stop_env(env)


async def test_without_a_pids_cgroup_the_watchdog_still_stops_a_fork_bomb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlightning_cli.sandbox.limits import PidsCgroup

    monkeypatch.setattr(PidsCgroup, "create", classmethod(lambda cls, limit: None))  # a machine without one
    ws, ep = episode_dirs(tmp_path, "bomb")
    box = Sandbox(SandboxSpec(writable=[ws, ep], read_only=[AGENT.parent, PYTHON_PREFIX],
                              limits=EpisodeLimits(processes=40)))
    assert box.cgroup is None
    await run_boxed(box, [PYTHON, "-I", str(AGENT), json.dumps({"mode": "fork_bomb"})], ws, timeout=60)
    assert box.limit == "processes" and "alive" in box.breach, box.breach


def test_alight_run_without_bubblewrap_stops_before_anything_starts(tmp_path: Path) -> None:
    import subprocess

    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "prompt": "p", "reward": "true"}) + "\n")
    recipe = tmp_path / "agent.yaml"
    recipe.write_text("name: a\ndescription: d\nprotocol: openai-chat\ncommand: [\"true\"]\n")
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # python, but no bwrap
    proc = subprocess.run([sys.executable, "-m", "agentlightning_cli", "run", "--task-set", str(tasks),
                           "--harness", str(recipe), "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "bubblewrap" in proc.stderr and "apt-get install bubblewrap" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_a_stale_empty_episode_cgroup_of_a_gone_process_is_swept(tmp_path: Path) -> None:
    from agentlightning_cli.sandbox.limits import _sweep_stale

    # A plain folder stands in for the cgroup hierarchy: rmdir behaves the same (it fails while not empty).
    gone, mine, busy = (tmp_path / f"alight-{pid}-ab12cd34" for pid in (999999999, os.getpid(), 999999998))
    for path in (gone, mine, busy):
        path.mkdir()
    (busy / "cgroup.procs").write_text("123")  # not empty: rmdir fails, like a cgroup with processes
    _sweep_stale(tmp_path)
    assert not gone.exists() and mine.exists() and busy.exists()


def test_the_exit_listener_stops_on_a_lasting_socket_error_and_keeps_listening_past_lost_events() -> None:
    """ENOBUFS (a burst overflowed the buffer) is asked again; any other error (a closed socket) ends the thread
    rather than spinning on recv. The socket stands in for the kernel's: neither error can be made on demand."""
    import errno

    from agentlightning_cli.sandbox import exits

    class Failing:
        def __init__(self) -> None:
            self.errors = [OSError(errno.ENOBUFS, "lost"), OSError(errno.ENOBUFS, "lost"),
                           OSError(errno.EBADF, "closed")]
            self.calls = 0

        def recv(self, size: int) -> bytes:
            self.calls += 1
            raise self.errors.pop(0) if self.errors else AssertionError("recv called after a lasting error")

    sock = Failing()
    listener = exits.ExitListener(sock)  # type: ignore[arg-type]
    listener.thread.join(timeout=10)
    assert not listener.thread.is_alive() and sock.calls == 3
