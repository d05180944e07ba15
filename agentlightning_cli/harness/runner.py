"""Run one harness for one episode: render its recipe, launch it in its own process group, bound it, judge it.

The harness runs with the episode's workspace as cwd, a private HOME, and an environment scrubbed of the
parent's provider settings, so the only model it can reach is the proxy URL alight hands it. It stops on
exit, wall-clock timeout or a proxy budget signal; the whole process group is killed and the recipe's cleanup
(e.g. OpenHands' daemonised tmux server) runs every time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from agentlightning_cli import process
from agentlightning_cli.masking import masked_env
from agentlightning_cli.harness.env import EpisodeSpec, episode_context, harness_env, resolve_program
from agentlightning_cli.harness.install import Installed
from agentlightning_cli.harness.outcome import EpisodeOutcome, judge, load_report
from agentlightning_cli.harness.recipe import Recipe
from agentlightning_cli.sandbox.launch import CANNOT_START
from agentlightning_cli.harness.sandboxed import EpisodeBox, open_box

log = logging.getLogger("alight.harness")

CallCounter = Callable[[str], "tuple[int, float | None]"]
"""episode_id -> (LLM calls recorded, time.time() of the first one or None); may raise CallCountUnread."""


class CallCountUnread(Exception):
    """The count lives elsewhere and could not be read (a Ray node asks the head's proxy, which did not answer):
    the harness's own ending stands, and the episode says the count was not read."""


def store_call_counter(store: Any, settle_s: float = 0.1, max_wait_s: float = 5.0) -> CallCounter:
    """Counts the episode's recorded LLM calls once the count has settled.

    A streamed call is recorded when its stream ends, which can be just after the harness has read the last
    byte and exited; so the count is re-read until it stays the same for `settle_s`.
    """

    read = store.llm_call_count  # one indexed count, no body or token ids decompressed

    def count(episode_id: str) -> tuple[int, float | None]:
        deadline = time.monotonic() + max_wait_s
        last = read(episode_id)
        while time.monotonic() < deadline:
            time.sleep(settle_s)
            now = read(episode_id)
            if now == last:
                break
            last = now
        return last

    return count


class HarnessEpisode:
    """One launch of one harness. `await run()` once; `stop()` from any thread ends it early."""

    def __init__(self, recipe: Recipe, installed: Installed, spec: EpisodeSpec, count_calls: CallCounter):
        self.recipe, self.installed, self.spec = recipe, installed, spec
        self.count_calls = count_calls
        self.episode_dir = Path(spec.run_dir) / "harness" / spec.episode_id
        self.log_dir = Path(spec.run_dir) / "logs" / "episodes"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()
        self._stop_status: str | None = None
        self._stop_reason: str | None = None
        self.pid: int | None = None
        self.marker = f"{spec.episode_id}-{secrets.token_hex(4)}"

    def stop(self, reason: str, status: str = "budget_exceeded") -> None:
        """Ask the episode to end (e.g. the proxy's call budget ran out). Safe from any thread."""
        if self._stop_status is None:
            self._stop_status, self._stop_reason = status, reason
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def _prepare(self, ctx: dict[str, Any]) -> tuple[list[str], dict[str, str], str | None]:
        recipe = self.recipe
        for folder in (self.episode_dir, Path(ctx["home"]), self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)
        Path(ctx["prompt_file"]).write_text(self.spec.prompt, encoding="utf-8")
        for path_t, content_t in recipe.files.items():
            path = Path(recipe.render(path_t, ctx))
            path = path if path.is_absolute() else self.episode_dir / path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(recipe.render(content_t, ctx), encoding="utf-8")
            path.chmod(0o600)  # holds the episode key
        env = harness_env()
        env["HOME"] = ctx["home"]
        if not self.installed.external:
            env["PATH"] = f"{ctx['bin_dir']}{os.pathsep}{env.get('PATH', '')}"
        env[process.MARKER_VAR] = self.marker  # inherited by everything the harness starts; see process.py
        for name, template in recipe.env.items():
            value = recipe.render(template, ctx)
            if value:
                env[name] = value
            else:  # a template that renders empty means "leave unset" (e.g. IS_SANDBOX only as root)
                env.pop(name, None)
        stdin = recipe.render(recipe.stdin, ctx) if recipe.stdin is not None else None
        argv = [recipe.render(part, ctx) for part in recipe.command]
        if self.installed.external:  # on PATH, absolute, or relative to the recipe file or the workspace
            argv[0] = resolve_program(argv[0], recipe.recipe_dir, self.spec.workspace, env.get("PATH")) or argv[0]
        log.debug("episode %s: %s with recipe env %s", self.spec.episode_id, argv[0],
                  masked_env({k: env[k] for k in recipe.env if k in env}))
        return argv, env, stdin

    async def run(self) -> EpisodeOutcome:
        self._loop = asyncio.get_running_loop()
        if self._stop_status is not None:
            self._stop.set()
        spec, recipe = self.spec, self.recipe
        # A short private folder: tmux's socket path must stay under the 107-byte unix socket limit.
        tmpdir = Path(tempfile.mkdtemp(prefix="alight-"))
        ctx = episode_context(recipe, self.installed, spec, self.episode_dir, tmpdir)
        stdout_path = self.log_dir / f"{spec.episode_id}.stdout"
        stderr_path = self.log_dir / f"{spec.episode_id}.stderr"
        try:
            argv, env, stdin_path = self._prepare(ctx)
            # The sandbox (default) hides everything but the workspace, the episode folder and the proxy.
            boxed = await open_box(recipe, self.installed, spec, self.episode_dir, tmpdir, argv, env.get("PATH"))
        except BaseException:
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise
        start_kwargs: dict[str, Any] = {}
        if boxed is not None:
            argv = boxed.box.command(argv, Path(spec.workspace), env)
            start_kwargs = boxed.box.popen_kwargs()
        timeout = float(ctx["timeout_s"])
        started = time.time()
        timed_out = False
        try:
            with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
                try:
                    # stdin is a file or /dev/null, never a pipe: Codex otherwise waits for EOF and appends
                    # stdin to the prompt.
                    with open(stdin_path or os.devnull, "rb") as stdin:
                        proc = await process.start_async(argv, cwd=str(spec.workspace), env=env, stdin=stdin,
                                                         stdout=out, stderr=err, **start_kwargs)
                except OSError as exc:
                    return EpisodeOutcome("harness_error", reason=f"cannot start {argv[0]}: {exc.strerror or exc}",
                                   stdout_path=str(stdout_path), stderr_path=str(stderr_path))
            self.pid = proc.pid
            if boxed is not None:
                boxed.box.started(proc.pid)
            exited = asyncio.ensure_future(proc.wait())
            stopper = asyncio.ensure_future(self._stop.wait())
            try:
                await asyncio.wait({exited, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:  # Ctrl-C: the harness still gets its grace to flush
                await asyncio.shield(self._terminate(proc, exited, boxed))
                raise
            finally:
                stopper.cancel()
            if not exited.done():
                timed_out = not self._stop.is_set()
                await self._terminate(proc, exited, boxed)
            exit_code = proc.returncode
        finally:
            await self._cleanup(ctx, env)
            # Anything the episode left (a backgrounded tool command, a command in its own session, a
            # daemon) dies with it.
            leftovers = await asyncio.to_thread(process.kill_leftovers, self.pid, self.marker) if self.pid else []
            if boxed is not None:
                if self.pid is not None:
                    boxed.box.exit_limit(proc.returncode)
                await boxed.close()
            shutil.rmtree(tmpdir, ignore_errors=True)
        ended = time.time()
        outcome = EpisodeOutcome("finished", exit_code=exit_code, wall_s=round(ended - started, 3),
                          stdout_path=str(stdout_path), stderr_path=str(stderr_path))
        if leftovers:
            outcome.detail["leftover_processes_killed"] = len(leftovers)
        outcome.detail["sandbox"] = "none" if boxed is None else {
            "mode": boxed.mode, "peak": boxed.box.peak,
            "proxy": "listener handed over" if boxed.box.spec.proxy_listeners else "relayed"}
        if boxed is not None and boxed.box.limit is not None:
            self._stop_status, self._stop_reason = "resource_limit", boxed.box.breach
        elif boxed is not None and exit_code == 127 and self._stop_status is None:
            missing = cannot_start(stderr_path)
            if missing is not None:
                self._stop_status, self._stop_reason = "harness_error", missing
        try:
            outcome.calls, first = await asyncio.to_thread(self.count_calls, spec.episode_id)
        except CallCountUnread as exc:  # not "no calls": unknown, and said so (the head counts its own store)
            outcome.calls, first = None, None
            outcome.detail["calls_not_read"] = str(exc)
        outcome.first_call_s = round(first - started, 3) if first is not None else None
        self._classify(outcome, ctx, stdout_path, stderr_path, timed_out, timeout)
        log.info("episode %s: %s%s (%s calls, %.1f s)", spec.episode_id, outcome.status,
                 f" ({outcome.reason})" if outcome.reason else "", outcome.calls, outcome.wall_s)
        return outcome

    def _classify(self, outcome: EpisodeOutcome, ctx: dict, stdout_path: Path, stderr_path: Path, timed_out: bool, timeout: float) -> None:
        if self._stop_status is not None:
            outcome.status, outcome.reason = self._stop_status, self._stop_reason  # type: ignore[assignment]
            return
        if timed_out:
            outcome.status, outcome.reason = "timeout", f"no exit within {timeout:g} s; process group killed"
            return
        records = load_report(self.recipe, ctx, stdout_path)
        error, turn_limit = judge(self.recipe, ctx, records)
        outcome.turn_limit_reached = turn_limit
        if outcome.calls == 0:
            why = error or (f"exit code {outcome.exit_code}: {_tail(stderr_path)}" if outcome.exit_code else "no error reported")
            outcome.status, outcome.reason = "no_calls", f"the harness exited without a single LLM call ({why})"
        elif error is not None:
            outcome.status, outcome.reason = "harness_error", error
        elif outcome.exit_code not in self.recipe.outcome.exit_codes and not turn_limit:
            outcome.status, outcome.reason = "harness_error", f"exit code {outcome.exit_code}: {_tail(stderr_path)}"
        elif turn_limit:
            outcome.reason = "turn limit reached"

    async def _terminate(self, proc: asyncio.subprocess.Process, exited: asyncio.Future,
                         boxed: EpisodeBox | None) -> None:
        """The recipe's stop signal, then SIGKILL after its grace_s. Sandboxed, the signal goes to the sandbox's
        PID 1, which passes it on to the harness: the namespace stays up for the grace, so the harness can flush
        its trajectory (a signal to bubblewrap itself would end the namespace at once)."""
        stop = self.recipe.stop
        sig = getattr(signal, stop.signal)
        if exited.done():
            return
        if boxed is None or not await asyncio.to_thread(boxed.box.signal, sig):
            await asyncio.to_thread(process.terminate, proc.pid, self.marker, sig)
        try:
            await asyncio.wait_for(asyncio.shield(exited), stop.grace_s)
        except asyncio.TimeoutError:
            process.signal_group(proc.pid, signal.SIGKILL)
            await exited

    async def _cleanup(self, ctx: dict[str, Any], env: dict[str, str]) -> None:
        for template in self.recipe.stop.cleanup:
            argv = [self.recipe.render(part, ctx) for part in template]
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv, env=env, stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
                await asyncio.wait_for(proc.wait(), 15)
            except (OSError, asyncio.TimeoutError):
                continue  # cleanup is best effort; a missing tmux server is the normal case


def cannot_start(stderr_path: Path) -> str | None:
    """The sandbox's own line saying the harness's program could not start inside it, as a reason that names
    the program and the fix; None when the harness started (its exit code 127 is its own)."""
    try:
        first = stderr_path.read_text(encoding="utf-8", errors="replace").lstrip().split("\n", 1)[0]
    except OSError:
        return None
    if not first.startswith(CANNOT_START):
        return None
    program, _, why = first[len(CANNOT_START):].strip().rpartition(": ")
    return (f"cannot start {program or why} inside the sandbox: {why if program else 'unknown error'} (is it "
            "installed, and is its folder visible there? a recipe adds folders with `sandbox.read_only`)")


def _tail(path: Path, limit: int = 400) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return text[-limit:].replace("\n", " | ") or "(no stderr)"


class EpisodeStopper:
    """Routes the proxy's on_budget_exceeded(episode_id, reason) to the running episode it names."""

    def __init__(self) -> None:
        self.running: dict[str, HarnessEpisode] = {}

    def __call__(self, episode_id: str, reason: str) -> None:
        episode = self.running.get(episode_id)
        if episode is not None:
            episode.stop(reason, "budget_exceeded")


async def run_episode(recipe: Recipe, installed: Installed, spec: EpisodeSpec, count_calls: CallCounter,
                      stopper: EpisodeStopper | None = None) -> EpisodeOutcome:
    episode = HarnessEpisode(recipe, installed, spec, count_calls)
    if stopper is not None:
        stopper.running[spec.episode_id] = episode
    try:
        return await episode.run()
    finally:
        if stopper is not None:
            stopper.running.pop(spec.episode_id, None)
