"""Proof that learning happens, on CPU: the real vLLM serving the tiny model, the real recording proxy, rounds
of sampling -> GRPO + LoRA (train_round) -> hot swap of the adapter, and the mean reward climbs.

The toy task: reward = share of reply tokens from a target set. Which set matters for a random 4M-parameter
model: its final RMSNorm fixes the hidden state's length, so an adapter can move all logits at once only along
directions of the (tied) embedding space. The target set is the half of the vocabulary whose embedding points
along one fixed random direction: the base model samples it ~50% of the time (rewards vary inside every group),
and a LoRA can raise that share. Sampling at temperature 0.3 (and training at it, as recorded) amplifies
what the adapter can reach. Seeds are fixed (vLLM per-request seeds, the trainer's seed); per-round means are
printed. A separate check: the trained adapter, loaded into vLLM, gives a rewarded reply a higher logprob.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import pytest

from agentlightning_cli.config import load_settings
from agentlightning_cli.proxy.server import Proxy
from agentlightning_cli.serve.policy import PolicyServer
from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.store import Store
from agentlightning_cli.train.round_step import train_round

pytestmark = pytest.mark.vllm
ROUNDS = 4  # sampled rounds; training between them (3 adapters)
ATTEMPTS = 8
PROMPTS = ["say hello to the world", "fix the bug in the file", "list the files please", "run the tests now"]
TEMPERATURE = 0.3
MAX_TOKENS = 16
MARGIN = 0.15  # a round's mean share has a standard error of ~0.02 (512 nearly independent tokens)


def projections(model_dir: Path):
    """Each token's (tied) embedding projected on a fixed random direction."""
    import torch
    from safetensors.torch import load_file

    emb = load_file(str(model_dir / "model.safetensors"))["model.embed_tokens.weight"].float()
    return emb @ torch.randn(emb.shape[1], generator=torch.Generator().manual_seed(0))


def target_set(model_dir: Path) -> set[int]:
    return set((projections(model_dir) > 0).nonzero().flatten().tolist())


def post(url: str, body: dict, key: str | None = None) -> dict:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def reply_logprob(vllm_url: str, model: str, prompt_ids: list[int], reply: list[int]) -> float:
    """vLLM's own logprob of `reply` after `prompt_ids` under adapter `model` (prompt_logprobs of one request)."""
    out = post(f"{vllm_url}/v1/completions", {"model": model, "prompt": prompt_ids + reply, "max_tokens": 1,
                                              "prompt_logprobs": 0, "temperature": TEMPERATURE})
    scored = out["choices"][0]["prompt_logprobs"][len(prompt_ids):]
    return sum(entry[str(tok)]["logprob"] for entry, tok in zip(scored, reply))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_rounds_of_grpo_with_hot_swap_raise_the_reward(tmp_path: Path, tiny: Path):
    target = target_set(tiny)
    settings = load_settings(flags={
        "runs_dir": str(tmp_path / "runs"),
        "serve": {"max_model_len": 1024, "max_lora_rank": 8, "max_loras": 3, "startup_timeout_s": 300},
        "train": {"lora_rank": 8, "learning_rate": 4e-2, "batch_size": 8, "grad_accum": 2, "epochs": 3, "seed": 0},
    })
    run_dir = tmp_path / "runs" / "learn"
    store = Store.open(run_dir)
    run = store.create_run("learn", settings.model_dump(mode="json"))
    means: list[float] = []
    with PolicyServer(settings, run_dir, tiny) as policy:
        tok_prompt = {}

        async def one_episode(proxy: Proxy, round_id: str, r: int, task: int, attempt: int) -> None:
            key = f"key-{r}-{task}-{attempt}"
            ep = store.create_episode(run.id, round_id, f"task-{task}", attempt, "one-call", key)
            proxy.register_episode(ep.id, key)
            body = {"model": "anything", "messages": [{"role": "user", "content": PROMPTS[task]}],
                    "max_tokens": MAX_TOKENS, "temperature": TEMPERATURE, "seed": 1000 * r + 10 * task + attempt}
            await asyncio.to_thread(post, proxy.episode_base_url(ep.id) + "/chat/completions", body, key)
            await proxy.drain()
            (call,) = store.get_calls(ep.id)
            assert call.model == f"policy-r{r}"  # every call records the adapter that served it
            tok_prompt[task] = call.prompt_token_ids
            reply = [t for t in call.completion_token_ids if t != 2 and t < 4096] or [0]
            share = sum(t in target for t in reply) / len(reply)
            store.update_episode(ep.id, status="done", outcome="finished", reward=share)

        async def main() -> None:
            proxy = Proxy(store, policy.base_url, settings.proxy, policy=policy.policy)
            await proxy.start("127.0.0.1", 0)
            adapter = policy.adapter_dir(0)
            try:
                for r in range(ROUNDS):
                    rnd = store.create_round(run.id, r, policy.policy, str(adapter))
                    await asyncio.gather(*(one_episode(proxy, rnd.id, r, task, attempt)
                                           for task in range(len(PROMPTS)) for attempt in range(ATTEMPTS)))
                    rewards = [e.reward for e in store.list_episodes(run.id, rnd.id)]
                    means.append(sum(rewards) / len(rewards))
                    store.finish_round(rnd.id, "done")
                    print(f"round {r}: mean reward {means[-1]:.3f} ({len(rewards)} episodes)", flush=True)
                    if r == ROUNDS - 1:
                        break
                    await proxy.pause()
                    await proxy.drain()
                    out = policy.adapter_dir(r + 1)
                    report = await asyncio.to_thread(train_round, store, run.id, r, base_model=tiny,
                                                     settings=settings, out_dir=out)
                    assert report.steps > 0 and report.temperature == TEMPERATURE
                    started = time.perf_counter()
                    old = policy.policy
                    proxy.set_policy(policy.load(r + 1, out))
                    proxy.resume()
                    policy.unload(old)
                    print(f"  trained {report.steps} steps in {report.seconds:.1f} s; adapter live"
                          f" {time.perf_counter() - started:.2f} s after training", flush=True)
                    adapter = out
            finally:
                await proxy.stop()

        asyncio.run(main())
        print("per-round mean reward:", [round(m, 3) for m in means])
        assert means[-1] > means[0] + MARGIN, means
        assert all(s.loss is not None for s in store.list_train_steps(run.id))
        # the trained adapter, served by vLLM, scores a rewarded reply higher than the round-0 policy did
        # the most rewarded-looking reply: the target tokens furthest along the direction (vLLM's prompt logprobs
        # are before temperature, so the change is smaller than what sampling at 0.3 sees)
        rewarded = projections(tiny).argsort(descending=True)[:MAX_TOKENS].tolist()
        trained = policy.policy
        reloaded = policy.load(ROUNDS + 10, policy.adapter_dir(0))  # round 0's (zero) adapter, under a new name
        before = reply_logprob(policy.base_url, reloaded, tok_prompt[0], rewarded)
        after = reply_logprob(policy.base_url, trained, tok_prompt[0], rewarded)
        print(f"logprob of a rewarded reply: {before:.2f} (round 0) -> {after:.2f} (trained)")
        assert after > before + 1.0
    store.close()
