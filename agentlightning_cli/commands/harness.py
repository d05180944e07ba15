"""`alight harness list/install/check`: settings resolved, the work done, data returned (cli.py only renders).

`check` runs the real harness for one scripted step through the real proxy and store (the
smoke environment, commands/smoke_env.py, which goes through commands/lifecycle.py)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentlightning_cli.config import EpisodeLimits, Settings, load_settings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.harness import install as installs
from agentlightning_cli.harness import recipe as recipes
from agentlightning_cli.harness.install import Installed
from agentlightning_cli.harness.recipe import Recipe


@dataclass
class CheckReport:
    harness: str
    protocol: str
    version: str
    ok: bool
    outcome: dict[str, Any]
    calls: int
    calls_with_token_ids: int
    tool_executed: bool
    out_txt: str | None
    run_dir: str
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    exposed: list[str] = field(default_factory=list)
    """Protected paths the sandbox showed the harness (only with --unsafe-expose-protected-paths)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def smoke_check(recipe: Recipe, installed: Installed, run_dir: Path | None = None, timeout_s: float = 300,
                      sandbox: str | None = None, limits: EpisodeLimits | None = None) -> CheckReport:
    """One scripted step of the real harness; `sandbox`/`limits` None: the settings'."""
    from agentlightning_cli.scripted.harness_scripts import OUT_FILE, OUT_TEXT, text_then_finish, tool_then_finish
    from agentlightning_cli.commands.smoke_env import SMOKE_PROMPT, SmokeEnvironment

    run_dir = Path(run_dir or tempfile.mkdtemp(prefix=f"alight-check-{recipe.name}-"))
    started = time.monotonic()
    prompt = f"{SMOKE_PROMPT} The file must contain: {OUT_TEXT}"
    script = tool_then_finish(None) if recipe.tool_calls else text_then_finish()  # how the harness reads actions
    async with SmokeEnvironment(run_dir, script) as env:
        spec = env.new_episode(recipe, run_dir / "workspace", prompt, timeout_s=timeout_s, max_turns=5,
                               sandbox=sandbox, limits=limits)
        outcome = await env.run(recipe, installed, spec)
        calls = await asyncio.to_thread(env.store.get_calls, spec.episode_id)
    out = spec.workspace / OUT_FILE
    text = out.read_text(errors="replace") if out.is_file() else None
    with_ids = sum(1 for c in calls if c.prompt_token_ids and c.completion_token_ids)
    problems = []
    if outcome.status != "finished":
        problems.append(f"outcome {outcome.status}: {outcome.reason}")
    if text is None or text.strip() != OUT_TEXT:
        problems.append(f"{OUT_FILE} {'missing' if text is None else 'has unexpected content ' + repr(text[:80])}")
    if len(calls) < 2:
        problems.append(f"expected at least 2 recorded calls (tool call, then finish), got {len(calls)}")
    if with_ids < len(calls):
        problems.append(f"{len(calls) - with_ids} recorded call(s) lack token ids")
    return CheckReport(
        harness=recipe.name, protocol=recipe.protocol, version=installed.version, ok=not problems,
        outcome=outcome.to_dict(), calls=len(calls), calls_with_token_ids=with_ids,
        tool_executed=text is not None, out_txt=text, run_dir=str(run_dir), problems=problems,
        seconds=round(time.monotonic() - started, 2),
    )


def _override(settings: Settings, name: str) -> tuple[str | None, str | None, float | None]:
    o = settings.harness.get(name)
    return (o.python, o.version, o.timeout_s) if o else (None, None, None)


def list_harnesses(settings: Settings | None = None, extra: list[str] | None = None) -> list[dict[str, Any]]:
    """The shipped recipes, then each recipe named in `extra` (a path or a name)."""
    settings = settings or load_settings()
    found_recipes = [recipes.load_path(path) for path in recipes.available().values()]
    found_recipes += [recipes.load(name) for name in extra or []]
    return [_row(recipe, settings) for recipe in found_recipes]


def _row(recipe: Recipe, settings: Settings) -> dict[str, Any]:
    _, version, _ = _override(settings, recipe.name)
    found = installs.layout(recipe, settings.home, version)
    spec = recipe.install
    return {
        "name": recipe.name, "description": recipe.description, "protocol": recipe.protocol,
        "kind": spec.kind if spec else installs.EXTERNAL, "package": spec.package if spec else None,
        "version": found.version, "installed": installs.is_installed(recipe, settings.home, version),
        "install_dir": None if found.external else str(found.dir),
        "command": str(found.executable) if found.external else recipe.command[0],
        "recipe": recipe.source, "max_turns": recipe.max_turns, "env": recipe.shown_env(),
    }


def install_harness(name: str, force: bool = False, settings: Settings | None = None) -> installs.Installed:
    settings = settings or load_settings()
    recipe = recipes.load(name)
    python, version, _ = _override(settings, recipe.name)
    return installs.install(recipe, settings.home, python=python, version=version, force=force)


def check_harness(name: str, settings: Settings | None = None, unsafe_expose: bool = False,
                  sandbox: str | None = None) -> CheckReport:
    """`sandbox`: --sandbox (None: the `sandbox` setting)."""
    from agentlightning_cli.commands.sandbox_guard import refuse_exposures
    from agentlightning_cli.sandbox.choice import resolve

    settings = settings or load_settings(flags={"sandbox": sandbox})
    settings.sandbox, settings.episode_limits = resolve(sandbox or settings.sandbox, settings.episode_limits)
    recipe = recipes.load(name)
    from agentlightning_cli.rollout.harbor_episode import is_oracle

    if is_oracle(recipe):
        raise AlightError("the oracle harness runs Harbor tasks' own solution/solve.sh and calls no model: there is "
                          "no scripted step to check",
                          "check a Harbor dataset's solutions with `alight tasks check DIR --oracle`")
    _, version, timeout = _override(settings, recipe.name)
    installed = installs.require_installed(recipe, settings.home, version)
    # The same guard as `alight run` (no task set here): refused before the episode starts.
    exposed = refuse_exposures(settings, recipe, installed, allow=unsafe_expose)
    report = asyncio.run(smoke_check(recipe, installed, timeout_s=timeout or 300, sandbox=settings.sandbox,
                                     limits=settings.episode_limits))
    report.exposed = exposed
    return report


def render_list(rows: list[dict[str, Any]], console: Any) -> None:
    """The table `alight harness list` prints."""
    from rich.table import Table

    table = Table("name", "protocol", "version", "installed", "description")
    for r in rows:
        installed = "external" if r["kind"] == "external" else "yes" if r["installed"] else "no"
        table.add_row(r["name"], r["protocol"], r["version"], installed, r["description"])
    console.print(table)


def check_lines(report: CheckReport) -> list[tuple[str, bool]]:
    """What `alight harness check` prints: (line, goes to stderr)."""
    o = report.outcome
    lines = [(f"harness:   {report.harness} {report.version} ({report.protocol})", False),
             (f"calls:     {report.calls} captured, {report.calls_with_token_ids} with token ids", False),
             (f"tool:      {'executed (out.txt written)' if report.tool_executed else 'not executed'}", False),
             (f"outcome:   {o['status']}{' - ' + o['reason'] if o['reason'] else ''} ({o['wall_s']} s)", False),
             (f"run dir:   {report.run_dir}", False)]
    lines += [(f"WARNING:   --unsafe-expose-protected-paths: the harness could read {line}", True)
              for line in report.exposed]
    lines += [(f"problem:   {problem}", True) for problem in report.problems]
    return lines + [("check:     " + ("ok" if report.ok else "FAILED"), False)]


def install_on_nodes(name: str, address: str, force: bool = False) -> list[dict[str, Any]]:
    """`alight harness install NAME --ray-address ADDR`: the same install on every live node that offers episode
    slots, each into its own ALIGHT_HOME, side by side; one entry per node (where it went, or the error)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from agentlightning_cli.rollout.ray_executor import RESOURCE, import_ray

    ray = import_ray()

    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise AlightError(f"cannot join the Ray cluster at {address}: {exc}") from None
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(RESOURCE)]
        if not nodes:
            raise AlightError(f"no node of the Ray cluster at {address} offers the {RESOURCE!r} resource",
                              hint=f"start worker nodes with --resources='{{\"{RESOURCE}\": N}}'")
        task = ray.remote(_install_here)
        refs = [task.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(name, force) for n in nodes]
        out = []
        for node, ref in zip(nodes, refs):
            entry = {"node_id": node["NodeID"], "address": node["NodeManagerAddress"]}
            try:
                entry.update(ray.get(ref))
            except ray.exceptions.RayError as exc:
                entry["error"] = str(getattr(exc, "cause", None) or exc).strip().splitlines()[-1]
            out.append(entry)
        return out
    finally:
        ray.shutdown()


def _install_here(name: str, force: bool) -> dict[str, Any]:
    found = install_harness(name, force=force)
    return {"installed": str(found.executable if found.external else found.dir), "version": found.version}
