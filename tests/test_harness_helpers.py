"""Helper calls (issue 37): the calls a harness makes beside its agent's turns under model names of their own are
served by the policy, labelled `helper`, and left out of training by default (train/helper_calls.py).

The real Gemini CLI, with its next-speaker check switched back on (the recipe turns it off), asks
`gemini-3-flash-preview` for a JSON verdict after its last turn; a google-genai call into the same episode asks
`gemini-3-pro-preview` for free text at temperature 1, as Gemini CLI's chat compression does. The scripted upstream
answers all of them; the trainer's row collection keeps the agent's calls only and counts both helpers, and `alight
inspect show` marks them. The next-speaker check is also greedy and JSON-constrained (the trainer would drop it anyway);
the compression-like call is one only the label keeps out.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from harness_support import installed, scripted

from agentlightning_cli.config import Settings
from agentlightning_cli.harness.env import EpisodeSpec
from agentlightning_cli.scripted.harness_scripts import OUT_FILE, OUT_TEXT
from agentlightning_cli.store import Store
from agentlightning_cli.testing.proxy_env import SmokeEnvironment
from agentlightning_cli.train.round_step import collect_rows, helper_rule
from agentlightning_cli.train.rows import RowContext

pytestmark = pytest.mark.harness
NEXT_SPEAKER = "gemini-3-flash-preview"
COMPRESSION = "gemini-3-pro-preview"


def _episode(env, run_id: str, round_id: str, attempt: int, recipe, workspace: Path) -> EpisodeSpec:
    """An episode of the run's round, registered with the proxy (SmokeEnvironment's own episodes have no run)."""
    key = "ek-" + secrets.token_urlsafe(16)
    ep = env.store.create_episode(run_id, round_id, "t", attempt, recipe.name, key, workspace=str(workspace))
    env.proxy.register_episode(ep.id, key)
    workspace.mkdir(parents=True)
    return EpisodeSpec(episode_id=ep.id, prompt=f"Create {OUT_FILE} containing: {OUT_TEXT}", workspace=workspace,
                       base_url=env.proxy.episode_base_url(ep.id, recipe.protocol), api_key=key,
                       run_dir=env.run_dir, proxy_socket=env.proxy.unix_path,
                       proxy_listeners=env.proxy.listeners_path or None, timeout_s=240)


def _compression_like_call(spec: EpisodeSpec) -> None:
    from google import genai
    from google.genai import types

    client = genai.Client(api_key=spec.api_key, http_options=types.HttpOptions(
        base_url=spec.base_url, api_version="v1beta", retry_options=types.HttpRetryOptions(attempts=1)))
    reply = client.models.generate_content(model=COMPRESSION, contents="Summarise the conversation so far.",
                                           config=types.GenerateContentConfig(temperature=1.0))
    assert reply.text


def alight(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentlightning_cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


async def test_gemini_cli_helper_calls_are_labelled_and_left_out_of_training(tmp_path: Path) -> None:
    recipe, inst = installed("gemini-cli")
    settings = "home/.gemini/settings.json"
    assert '"skipNextSpeakerCheck": true' in recipe.files[settings]
    recipe.files[settings] = recipe.files[settings].replace('"skipNextSpeakerCheck": true',
                                                            '"skipNextSpeakerCheck": false')
    async with SmokeEnvironment(tmp_path / "run", scripted(recipe)) as env:
        run = env.store.create_run("r", {"harness": recipe.name, "harness_model": recipe.model})
        rnd = env.store.create_round(run.id, 0, "policy-r0", None)
        episodes = []
        for attempt in range(2):  # one group, rewards 0 and 1: something to train
            spec = _episode(env, run.id, rnd.id, attempt, recipe, tmp_path / f"ws-{attempt}")
            outcome = await env.run(recipe, inst, spec)
            assert outcome.status == "finished", (outcome.reason, Path(outcome.stderr_path).read_text()[-2000:])
            await asyncio.to_thread(_compression_like_call, spec)
            env.store.update_episode(spec.episode_id, status="done", outcome="finished", reward=float(attempt))
            episodes.append(spec.episode_id)
        calls = {ep: env.store.get_calls(ep) for ep in episodes}
    asked = {ep: [c.client_model for c in cs] for ep, cs in calls.items()}
    for ep, models in asked.items():
        # The agent's two turns (the shell call, then its answer), its next-speaker check, the SDK's call.
        assert models[:2] == [recipe.model, recipe.model] and models[-1] == COMPRESSION, models
        assert set(models[2:-1]) == {NEXT_SPEAKER}, models
        assert all(c.status == "ok" and c.protocol == "gemini-generate-content" for c in calls[ep])
    helpers = sum(len(models) - 2 for models in asked.values())

    # The trainer's own row collection, with the rule as train_round applies it from the run's snapshot (the
    # scripted ids are one per character of a ~49 KB request: too long to train here; test_helper_calls.py trains).
    store = Store.open(env.run_dir)
    try:
        ctx = RowContext()
        helper_rule(ctx, store.get_run(run.id).config, Settings().train)
        report = collect_rows(store, episodes, ctx, "strict")
    finally:
        store.close()
    assert report.dropped["helper_calls"] == helpers, report.dropped
    assert not report.dropped["constrained_calls"] and not report.dropped["greedy_calls"], report.dropped
    trained = {cid for row in report.rows for cid in row.call_ids}
    assert trained == {c.id for cs in calls.values() for c in cs if c.client_model == recipe.model}, report.rows

    shown = alight(tmp_path, "inspect", "show", episodes[0], "--run", str(env.run_dir))
    assert shown.returncode == 0, shown.stderr
    seqs = ", ".join(str(i) for i in range(2, len(asked[episodes[0]])))
    assert f"helper calls (another model name than the harness's 'policy'; not trained unless" \
           f" train.helper_calls: train): seq {seqs}" in shown.stdout, shown.stdout
    assert shown.stdout.count("trains nothing: helper call: it asked for model") == len(asked[episodes[0]]) - 2
    sdk_call = calls[episodes[0]][-1].id
    detail = alight(tmp_path, "inspect", "show", sdk_call, "--run", str(env.run_dir))
    assert f"helper call: asked for '{COMPRESSION}', not the harness's 'policy'" in detail.stdout, detail.stdout
