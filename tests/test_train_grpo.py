"""GRPO + LoRA on stored rows with the real TRL trainer and the embedded tiny model: the adapter it writes, the
metrics it stores, continuing from the previous round's adapter, importance weights, and the direction it
moves the policy (a rewarded completion's logprob goes up, a punished one's down)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.train.round_step import train_round
from train_support import call_record, new_run, record_round, small_settings

torch = pytest.importorskip("torch")  # the train extra is part of every install; this only names the dependency


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_importance_weights_truncate_mask_and_sequence_mode():
    from agentlightning_cli.train.stored_trainer import importance_weights

    trainer = torch.tensor([[-1.0, -1.0, -5.0, 0.0]])
    vllm = torch.tensor([[-1.5, -3.0, -1.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = importance_weights(trainer, vllm, mask, "token_truncate", 3.0)
    assert w[0, 0].item() == pytest.approx(torch.exp(torch.tensor(0.5)).item())
    assert w[0, 1].item() == pytest.approx(3.0)  # exp(2) truncated at the cap
    assert w[0, 2].item() == pytest.approx(torch.exp(torch.tensor(-4.0)).item())  # small weights stay small
    assert w[0, 3].item() == 1.0  # masked gap token: no correction
    seq = importance_weights(trainer, vllm, mask, "sequence_truncate", 3.0)
    assert seq[0, :3].tolist() == pytest.approx([torch.exp(torch.tensor(-1.5)).item()] * 3)
    assert importance_weights(trainer, vllm, mask, "none", 3.0).tolist() == [[1.0] * 4]


def test_round_writes_a_vllm_adapter_metrics_and_summary_then_the_next_round_continues_it(tmp_path: Path, tiny: Path):
    store, run = new_run(tmp_path)
    record_round(store, run.id, 0)
    settings = small_settings(batch_size=2)  # 4 rows per optimizer step: 2 steps
    out0 = tmp_path / "runs" / "r" / "adapters" / "round-0"
    report = train_round(store, run.id, 0, base_model=tiny, settings=settings, out_dir=out0, log=lambda m: None)
    assert report.steps == 2 and report.rows == 8 and report.calls == 16 and report.calls_per_row == 2.0
    assert report.break_reasons == {} and report.base_adapter is None and report.temperature == 1.0
    config = json.loads((out0 / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["peft_type"] == "LORA" and not config.get("modules_to_save")
    assert "lm_head" not in config["target_modules"]
    from safetensors import safe_open

    with safe_open(str(out0 / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
        first = {k: f.get_tensor(k) for k in keys}
    assert keys and all(".default." not in k and ("lora_A" in k or "lora_B" in k) for k in keys)
    assert any(t.abs().sum() > 0 for k, t in first.items() if "lora_B" in k)  # trained: B moved off zero
    assert oct((out0 / "adapter_model.safetensors").stat().st_mode & 0o777) == "0o644"
    steps = store.list_train_steps(run.id, 0)
    assert [s.step for s in steps] == [1, 2]
    assert all(s.loss is not None and s.grad_norm is not None and s.rows == 4 and s.merged_calls == 8 for s in steps)
    assert all(s.tokens_per_s > 0 and 0 <= s.reward_mean <= 1 for s in steps)
    assert sum(s.reward_mean for s in steps) / 2 == pytest.approx(0.5)  # every episode once: rewards 0,1,0,1
    summary = store.get_train_round(run.id, 0)
    assert (summary.rows, summary.calls, summary.steps, summary.merge_rule) == (8, 16, 2, "strict")
    assert summary.adapter_dir == str(out0)

    # round 1 is served by round 0's adapter and continues it: same rank even if the setting changed
    record_round(store, run.id, 1, adapter_path=str(out0), seed=1)
    out1 = out0.parent / "round-1"
    again = train_round(store, run.id, 1, base_model=tiny, settings=small_settings(lora_rank=16, batch_size=2), out_dir=out1,
                        log=lambda m: None)
    assert again.base_adapter == str(out0)
    assert json.loads((out1 / "adapter_config.json").read_text())["r"] == 8
    with safe_open(str(out1 / "adapter_model.safetensors"), "pt") as f:
        second = {k: f.get_tensor(k) for k in f.keys()}
    assert second.keys() == first.keys()
    moved = [float((second[k] - first[k]).abs().max()) for k in first]
    # started from round 0's weights (a fresh LoRA would have re-drawn every A), then moved a little
    assert 0 < max(moved) < max(float(t.abs().max()) for t in first.values())


def test_training_raises_the_rewarded_completion_and_lowers_the_punished_one(tmp_path: Path, tiny: Path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    store, run = new_run(tmp_path)
    rnd = store.create_round(run.id, 0, "policy-r0", None)
    prompt = [1, 300, 301, 302, 303, 2]
    good, bad = [410, 411, 412, 413, 2], [520, 521, 522, 523, 2]
    for attempt in range(8):
        ep = store.create_episode(run.id, rnd.id, "t", attempt, "h", "k")
        rewarded = attempt % 2 == 0
        store.add_call(call_record(ep.id, prompt, good if rewarded else bad, [-8.3] * 5))
        store.update_episode(ep.id, status="done", outcome="finished", reward=1.0 if rewarded else 0.0)
    out = tmp_path / "adapter"
    train_round(store, run.id, 0, base_model=tiny, settings=small_settings(epochs=3, learning_rate=2e-2),
                out_dir=out, log=lambda m: None)

    def logp(model, completion: list[int]) -> float:
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1:-1]
        return float(torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(completion)[:, None]).sum())

    base = AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32)
    before = logp(base, good), logp(base, bad)
    trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32), str(out))
    after = logp(trained, good), logp(trained, bad)
    assert after[0] > before[0] + 0.5, (before, after)
    assert after[1] < before[1] - 0.5, (before, after)


def test_group_mean_and_std_are_over_the_episodes_that_produce_rows(tmp_path: Path, tiny: Path):
    """task t: rewards 0, 1 with rows and a third episode scored 1 whose calls have no token ids. Its group's
    baseline is over the two that train: mean 0.5, std 0.707 -> advantages -/+0.707 (with the third it was mean
    0.667, std 0.577 -> -1.155 and +0.577)."""
    store, run = new_run(tmp_path)
    rnd = store.create_round(run.id, 0, "policy-r0", None)
    prompt = [1, 300, 301, 302, 2]
    ids = {}
    for attempt, (reward, has_ids) in enumerate([(0.0, True), (1.0, True), (1.0, False)]):
        ep = store.create_episode(run.id, rnd.id, "t", attempt, "h", "k")
        record = call_record(ep.id, prompt if has_ids else None, [410 + attempt, 2] if has_ids else None)
        if not has_ids:
            record.completion_logprobs = None
        store.add_call(record)
        store.update_episode(ep.id, status="done", outcome="finished", reward=reward)
        ids[attempt] = ep.id
    report = train_round(store, run.id, 0, base_model=tiny, settings=small_settings(batch_size=2, grad_accum=1),
                         out_dir=tmp_path / "adapter", log=lambda m: None)
    assert report.episodes == 2 and report.dropped["no_row_episodes"] == 1 and report.dropped["no_token_ids"] == 1
    advantages = store.get_train_round(run.id, 0).detail["advantages"]
    assert set(advantages) == {ids[0], ids[1]}
    assert advantages[ids[0]] == pytest.approx(-0.5 / (0.5 ** 0.5 + 1e-4), abs=1e-5)
    assert advantages[ids[1]] == pytest.approx(0.5 / (0.5 ** 0.5 + 1e-4), abs=1e-5)


def test_the_ppo_clip_bounds_later_epochs_against_the_round_start_policy(tmp_path: Path, tiny: Path):
    """Old logprobs are the round-start policy's, so at a high learning rate over several epochs the ratio leaves
    [1 - eps, 1 + eps] and TRL's clip fires (clip_fraction > 0); the first step is at ratio 1. Recomputing the old
    logprobs at every step (the old code) kept the ratio at 1 and clip_fraction at 0 throughout."""
    store, run = new_run(tmp_path)
    record_round(store, run.id, 0)  # 8 rows: one generation batch of 4 x 2, one optimizer step per epoch
    report = train_round(store, run.id, 0, base_model=tiny, settings=small_settings(epochs=4, learning_rate=5e-2),
                         out_dir=tmp_path / "adapter", log=lambda m: None)
    steps = store.list_train_steps(run.id, 0)
    assert report.steps == 4 and [s.step for s in steps] == [1, 2, 3, 4]
    clip = [s.clip_fraction for s in steps]
    assert clip[0] == 0.0 and max(clip[1:]) > 0.0, clip
    importance = store.get_train_round(run.id, 0).detail["importance"]
    assert importance == report.importance and importance["tokens"] == 16 * 7  # every sampled token, once
    assert 0 < importance["min"] <= importance["mean"] <= importance["max"] <= 3.0


def test_a_round_sampled_under_the_models_generation_config_trains_with_its_filters(tmp_path: Path, tiny: Path):
    """vLLM ran with --generation-config FOLDER (or auto): unsent keys took its values, so the rows are scored and
    trained under top_p/top_k (the loss's own logprobs too, not only the round-start ones); a repetition penalty
    there leaves every call out, and the error says why."""
    from agentlightning_cli.store import Store
    from agentlightning_cli.train.round_step import NothingToTrain

    folder = tmp_path / "gen"
    folder.mkdir()
    (folder / "generation_config.json").write_text(json.dumps({"temperature": 0.7, "top_p": 0.9, "top_k": 40}))
    store = Store.open(tmp_path / "runs" / "r")
    run = store.create_run("r", {"settings": {"serve": {"model": str(tiny), "generation_config": str(folder)}}})
    record_round(store, run.id, 0)
    for ep in store.list_episodes(run_id=run.id):
        for c in store.get_calls(ep.id):
            assert c.sampling == {"temperature": 1.0}  # record_round sends temperature 1.0: it wins
    lines: list[str] = []
    report = train_round(store, run.id, 0, base_model=tiny, settings=small_settings(batch_size=2),
                         out_dir=tmp_path / "a0", log=lines.append)
    assert report.temperature == 1.0 and report.steps == 2
    assert all(m["loss"] == m["loss"] for m in report.metrics)  # finite through the filtered forward
    assert any("generation_config.json" in line and "top_k 40" in line for line in lines), lines
    assert any("top_p=0.9 top_k=40 (scored as vLLM sampled)" in line for line in lines), lines
    detail = store.list_train_rounds(run.id)[0].detail
    assert detail["sampling"] == {"top_p": 0.9, "top_k": 40, "min_p": 0.0}

    (folder / "generation_config.json").write_text(json.dumps({"repetition_penalty": 1.05}))
    with pytest.raises(NothingToTrain) as err:
        train_round(store, run.id, 0, base_model=tiny, settings=small_settings(), out_dir=tmp_path / "a1",
                    log=lambda m: None)
    assert "penalised calls: 16" in str(err.value) and "penalty" in err.value.hint
