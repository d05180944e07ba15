"""`alight harness check NAME`: the real harness, the real proxy and store, a scripted upstream, one step.

The scripted model asks the harness to run one shell command that writes out.txt, then to finish. The check
passes when the file holds the expected text, the calls were recorded under the episode with token ids, and
the harness's own report says it finished.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentlightning_cli.harness import EpisodeSpec, EpisodeStopper, run_episode, store_call_counter
from agentlightning_cli.harnesses.install import Installed
from agentlightning_cli.recipes import Recipe

SMOKE_POLICY = "policy-r0"
SMOKE_PROMPT = "Create a file named out.txt in the current directory with the exact text the task requires."


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SmokeEnvironment:
    """A store, the scripted upstream and the proxy, started together and stopped together."""

    run_dir: Path
    reply: Callable[[dict], dict] | None = None
    """The scripted model; ignored when `upstream_url` points at a real server."""
    proxy_settings: Any = None
    upstream_url: str | None = None
    policy: str = SMOKE_POLICY
    fake: Any = None
    store: Any = None
    proxy: Any = None
    stopper: EpisodeStopper = field(default_factory=EpisodeStopper)

    async def __aenter__(self) -> "SmokeEnvironment":
        from agentlightning_cli.config import ProxySettings
        from agentlightning_cli.proxy import Proxy
        from agentlightning_cli.store import Store
        from agentlightning_cli.testing.fake_vllm import FakeScript, FakeVLLM

        if self.upstream_url is None:
            self.fake = FakeVLLM(FakeScript(reply=self.reply, served_models=[self.policy])).start()
        self.store = Store.open(self.run_dir)
        upstream = self.upstream_url or self.fake.url
        self.proxy = Proxy(self.store, upstream, self.proxy_settings or ProxySettings(), policy=self.policy)
        self.proxy.on_budget_exceeded = self.stopper
        await self.proxy.start("127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.proxy.stop()
        if self.fake is not None:
            self.fake.stop()
        self.store.close()

    def new_episode(self, recipe: Recipe, workspace: Path, prompt: str = SMOKE_PROMPT, **limits: Any) -> EpisodeSpec:
        key = "ek-" + secrets.token_urlsafe(24)
        episode = self.store.create_episode(None, None, "smoke", 0, recipe.name, key, workspace=str(workspace))
        self.proxy.register_episode(episode.id, key)
        workspace.mkdir(parents=True, exist_ok=True)
        return EpisodeSpec(episode_id=episode.id, prompt=prompt, workspace=workspace,
                           base_url=self.proxy.episode_base_url(episode.id, recipe.protocol), api_key=key,
                           run_dir=self.run_dir, **limits)

    async def run(self, recipe: Recipe, installed: Installed, spec: EpisodeSpec):
        return await run_episode(recipe, installed, spec, store_call_counter(self.store), self.stopper)


async def smoke_check(recipe: Recipe, installed: Installed, run_dir: Path | None = None, timeout_s: float = 300) -> CheckReport:
    from agentlightning_cli.testing.harness_scripts import OUT_FILE, OUT_TEXT, tool_then_finish

    run_dir = Path(run_dir or tempfile.mkdtemp(prefix=f"alight-check-{recipe.name}-"))
    started = time.monotonic()
    prompt = f"{SMOKE_PROMPT} The file must contain: {OUT_TEXT}"
    async with SmokeEnvironment(run_dir, tool_then_finish(None)) as env:
        spec = env.new_episode(recipe, run_dir / "workspace", prompt, timeout_s=timeout_s, max_turns=5)
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
