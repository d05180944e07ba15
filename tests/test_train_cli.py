"""`alight train` on runs with nothing to train says why (and exits 1); the chat template choice for serving."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning_cli.errors import AlightError
from agentlightning_cli.serve.template_choice import choose_template
from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.train.round_step import NothingToTrain, train_round
from train_support import call_record, new_run, record_exact_round, record_round, small_settings


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def alight_train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentlightning_cli", "train", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def test_empty_run_and_missing_base_model_explain_themselves(tmp_path: Path, tiny: Path):
    store, run = new_run(tmp_path)
    store.create_round(run.id, 0, "policy-r0", None)
    with pytest.raises(NothingToTrain, match="round 0 of run 'r' has no episodes"):
        train_round(store, run.id, 0, base_model=tiny, settings=small_settings(), out_dir=tmp_path / "a")
    with pytest.raises(NothingToTrain, match="has no round 3"):
        train_round(store, run.id, 3, base_model=tiny, settings=small_settings(), out_dir=tmp_path / "a")
    with pytest.raises(AlightError, match="base model not found") as err:
        train_round(store, run.id, 0, base_model=tmp_path / "nope", settings=small_settings(), out_dir=tmp_path / "a")
    assert "--base-model" in err.value.hint
    store.close()
    result = alight_train(tmp_path, "r", "--base-model", str(tiny))
    assert result.returncode == 1 and "has no episodes in any round" in result.stderr
    result = alight_train(tmp_path, "r", "--round", "0", "--base-model", str(tmp_path / "nope"))
    assert result.returncode == 1 and "base model not found" in result.stderr


def test_runs_without_rewards_variance_or_token_ids_explain_themselves(tmp_path: Path, tiny: Path):
    store, run = new_run(tmp_path)
    record_round(store, run.id, 0, rewards=lambda task, attempt: None)
    with pytest.raises(NothingToTrain, match="none of the 8 episodes of round 0 has a reward.*no reward: 8"):
        train_round(store, run.id, 0, base_model=tiny, settings=small_settings(), out_dir=tmp_path / "a")
    record_round(store, run.id, 1, rewards=lambda task, attempt: 1.0)
    with pytest.raises(NothingToTrain, match="every group of round 1 has equal rewards.*zero variance groups: 2"):
        train_round(store, run.id, 1, base_model=tiny, settings=small_settings(), out_dir=tmp_path / "a")
    record_round(store, run.id, 2, ids=False)
    with pytest.raises(NothingToTrain, match="no calls with token ids.*no token ids: 16"):
        train_round(store, run.id, 2, base_model=tiny, settings=small_settings(), out_dir=tmp_path / "a")
    assert not (tmp_path / "a").exists()  # nothing half-written
    store.close()
    result = alight_train(tmp_path, str(tmp_path / "runs" / "r"), "--round", "1", "--base-model", str(tiny))
    assert result.returncode == 1 and "equal rewards" in result.stderr and "attempts per task" in result.stderr


def test_template_choice(tmp_path: Path, tiny: Path):
    from transformers import AutoTokenizer
    from trl import chat_template_utils

    # the embedded tiny model's template is prefix-preserving: auto keeps it
    assert choose_template("auto", tiny, tmp_path).choice == "model"
    assert choose_template("model", tiny, tmp_path).path is None
    # a template that drops past thinking (Qwen3's) is not: auto serves TRL's training variant, written to a file
    qwen3 = tmp_path / "qwen3"
    tok = AutoTokenizer.from_pretrained(str(tiny))
    tok.chat_template = chat_template_utils.qwen3_chat_template
    tok.save_pretrained(qwen3)
    choice = choose_template("auto", qwen3, tmp_path / "run")
    assert choice.choice == "training" and choice.path == tmp_path / "run" / "chat_template.jinja"
    assert choice.path.read_text() == chat_template_utils.qwen3_training_chat_template
    # a non-preserving template TRL does not know: auto keeps the model's, `training` refuses
    odd = tmp_path / "odd"
    tok.chat_template = ("{% for m in messages %}{% if m.role != 'assistant' or loop.last %}"
                         "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tok.save_pretrained(odd)
    kept = choose_template("auto", odd, tmp_path / "odd-run")
    assert kept.choice == "model" and "no training variant" in kept.reason
    with pytest.raises(AlightError, match="no prefix-preserving training template"):
        choose_template("training", odd, tmp_path / "odd-run")
    custom = tmp_path / "mine.jinja"
    custom.write_text("{{ messages }}")
    assert choose_template(str(custom), tiny, tmp_path).path == custom
    with pytest.raises(AlightError, match="neither model, training, auto nor a file"):
        choose_template(str(tmp_path / "missing.jinja"), tiny, tmp_path)


def test_serve_adapter_is_checked_and_fits_vllms_rank_limit(tmp_path: Path, tiny: Path):
    from agentlightning_cli.config import Settings
    from agentlightning_cli.serve.adapters import make_adapter
    from agentlightning_cli.serve.policy import PolicyServer

    settings = Settings()
    settings.serve.adapter = tmp_path / "nope"
    with pytest.raises(AlightError, match="no adapter_config.json") as err:
        PolicyServer(settings, tmp_path / "run", tiny).start()  # refused before vLLM starts
    assert "alight train" in err.value.hint
    adapter = make_adapter(tiny, tmp_path / "r16", rank=16)
    settings.serve.adapter = adapter
    (tmp_path / "run").mkdir()
    policy = PolicyServer(settings, tmp_path / "run", tiny)

    def where_vllm_starts(*args, **kwargs):
        raise StopIteration  # everything before vLLM's start (the adapter's check, the rank limit) has happened

    policy.vllm.start = where_vllm_starts
    with pytest.raises(StopIteration):
        policy.start()
    assert settings.serve.max_lora_rank == 16 and not (tmp_path / "run" / "adapters" / "round-0").exists()


def test_alight_train_trains_the_last_round_and_prints_a_summary(tmp_path: Path, tiny: Path):
    import json

    store, run = new_run(tmp_path)
    record_round(store, run.id, 0)
    store.close()
    result = alight_train(tmp_path, "r", "--base-model", str(tiny), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # stdout is only the JSON: the trainer's own log lines stay off it
    adapter = tmp_path / "runs" / "r" / "adapters" / "round-1"  # trained on round 0: serves round 1
    assert report["adapter_dir"] == str(adapter) and (adapter / "adapter_model.safetensors").is_file()
    assert (report["rows"], report["calls"], report["calls_per_row"], report["merge_rule"]) == (8, 16, 2.0, "strict")
    assert report["steps"] >= 1 and report["break_reasons"] == {} and report["metrics"][0]["loss"] is not None
    text = alight_train(tmp_path, str(tmp_path / "runs" / "r"), "--round", "0", "--base-model", str(tiny),
                        "--out", str(tmp_path / "again"))
    assert text.returncode == 0, text.stderr
    assert "rows        8 from 16 calls (2.00 calls per row, merge=strict)" in text.stdout
    assert "breaks      none" in text.stdout and "(fresh LoRA)" in text.stdout
    assert "clip fraction " in text.stdout and "importance  mean " in text.stdout


@pytest.mark.parametrize("command", ["run", "serve"])
def test_alight_train_run_uses_the_model_and_row_limit_the_run_served(tmp_path: Path, tiny: Path, command: str):
    """`alight run --model DIR` / `alight serve --model DIR` record DIR and the context vLLM was sized to; `alight
    train RUN` (no --base-model) trains an adapter on DIR and drops rows past that run's limit, and says so."""
    import json

    from agentlightning_cli.commands import lifecycle, run as run_command
    from agentlightning_cli.commands.run_checks import RunOptions
    from agentlightning_cli.config import Settings

    settings = Settings(home=tmp_path / "home", runs_dir=tmp_path / "runs")  # the default tiny model is not DIR
    settings.serve.max_model_len = 25  # record_round: 20-token first calls, 31-token second ones
    run_dir = tmp_path / "runs" / "r"
    if command == "run":
        opts = RunOptions(task_set=tmp_path / "tasks.yaml", harness="mini-swe-agent", model=tiny)
        store, run = run_command._open(settings, "r", run_dir, opts, "mini-swe-agent", tiny)
    else:
        store, run, _ = lifecycle.open_run(settings, "r", model=tiny)
    record_round(store, run.id, 0)
    store.close()
    result = alight_train(tmp_path, "r", "--json")  # today's settings: serve.max_model_len 4096, no serve.model
    assert result.returncode == 0, result.stderr
    adapter = json.loads((tmp_path / "runs" / "r" / "adapters" / "round-1" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(tiny.resolve())
    assert f"base model {tiny.resolve()} (the model the run served)" in result.stderr
    assert "rows up to 25 tokens (the run's serve.max_model_len)" in result.stderr
    report = json.loads(result.stdout)
    assert report["rows"] == 8 and report["dropped"]["over_long_rows"] == 8  # each episode's second call


def test_a_round_sampled_greedily_says_so(tmp_path: Path, tiny: Path):
    store, run = new_run(tmp_path)
    rnd = store.create_round(run.id, 0, "policy-r0", None)
    for attempt in range(2):
        ep = store.create_episode(run.id, rnd.id, "t", attempt, "h", "k")
        store.add_call(call_record(ep.id, [1, 300, 2], [400 + attempt, 2], temperature=0.0))
        store.update_episode(ep.id, status="done", outcome="finished", reward=float(attempt))
    with pytest.raises(NothingToTrain, match="greedy calls: 2") as err:
        train_round(store, run.id, 0, base_model=tiny, settings=small_settings(), out_dir=tmp_path / "a")
    assert "temperature 0" in err.value.hint


def test_alight_train_and_inspect_count_conversations_forks_and_breaks_of_exact_continuation(tmp_path: Path,
                                                                                             tiny: Path):
    """Exact continuation's records (two interleaved conversations + a fork per episode, as the proxy writes them):
    one row per conversation, whatever came between, its fork packed in as a branch (train.forks = pack; the
    trainer attends along the tree: tests/test_train_packed_forks.py); `alight train` (JSON and text) and `alight
    inspect` (stats, episode) count conversations, forks by reason and breaks per 100 calls of every kind."""
    import json

    from agentlightning_cli.commands.train import render
    from agentlightning_cli.train.round_step import TrainReport

    store, run = new_run(tmp_path)
    record_exact_round(store, run.id, 0, attempts=2)
    episode = store.list_episodes(run_id=run.id)[0].id
    store.close()
    result = alight_train(tmp_path, "r", "--base-model", str(tiny), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["rows"], report["calls"]) == (8, 24)  # 4 episodes x 2 conversations, each fork packed in
    assert report["break_reasons"] == {"fork/edited": 4}
    counts = {"mode": "exact", "calls": 24, "exact_calls": 24, "render_calls": 0, "conversations": 8,
              "forks": {"edited": 4}, "fallbacks": {}, "breaks": {"fork/edited": 4},
              "breaks_per_100_calls": {"fork/edited": 16.67}, "breaks_per_100_calls_total": 16.67}
    assert report["conversations"] == counts
    # The text summary `alight train` prints for the same report (commands/train.render, as the CLI calls it).
    fields = {k: v for k, v in report.items() if k != "calls_per_row"}
    text = render(TrainReport(**{**fields, "adapter_dir": Path(report["adapter_dir"])}))
    assert ("conversations exact: 8 conversations in 24 calls; forks edited 4; fallbacks none; breaks per 100"
            " calls fork/edited 16.67") in text, text
    inspect = [sys.executable, "-m", "agentlightning_cli", "inspect"]
    stats = subprocess.run([*inspect, "stats", "r", "--json"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["rounds"][0]["conversations"] == counts
    shown = subprocess.run([*inspect, "stats", "r"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "round 0 trained: conversations exact: 8 conversations in 24 calls" in shown.stdout, shown.stdout
    ep = subprocess.run([*inspect, "show", episode, "--run", "r", "--json"], cwd=tmp_path, capture_output=True,
                        text=True, timeout=300)
    assert ep.returncode == 0, ep.stderr
    rows = json.loads(ep.stdout)["rows"]
    assert [r["calls"] for r in rows["rows"]] == [[0, 2, 4, 5], [1, 3]]
    assert [r["branches"] for r in rows["rows"]] == [1, 0]
    shown = subprocess.run([*inspect, "show", episode, "--run", "r"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert "row 0: calls 0, 2, 4, 5 — " in shown.stdout and ", 1 fork packed in" in shown.stdout, shown.stdout
    assert rows["conversations"] == {**counts, "calls": 6, "exact_calls": 6, "conversations": 2, "forks": {"edited": 1},
                                     "breaks": {"fork/edited": 1}, "breaks_per_100_calls": {"fork/edited": 16.67}}


def test_calls_sampled_by_another_model_stop_before_training_naming_the_call(tmp_path: Path, tiny: Path):
    """The demo run's calls hold ids up to ~32k (another tokenizer); the tiny model has 4,096: a clear error
    naming the episode, the call and the id, not an IndexError from inside the forward pass."""
    from agentlightning_cli.testing.inspect_store import build_demo_run

    build_demo_run(tmp_path / "runs" / "demo")
    result = alight_train(tmp_path, "demo", "--round", "1", "--base-model", str(tiny))
    assert result.returncode == 1, result.stderr[-2000:]
    assert "outside the vocabulary of" in result.stderr and "(4096 ids)" in result.stderr, result.stderr[-2000:]
    assert "first call call-" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs" / "demo" / "adapters").exists()  # nothing trained, nothing written
