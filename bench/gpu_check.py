"""The GPU check, prepared for a machine with one CUDA GPU (≤ 10 minutes): the trainer side of `alight run
--rounds` next to the share of the GPU vLLM would hold, for the embedded tiny model and a ~1.1B model built on the
spot from a config with random weights (no weights are carried; vLLM is not needed). Per model, two rounds each
trained in a new thread as `alight run` trains them, round 2 continuing round 1's adapter:

- GPU memory: held by "vLLM" (a block of `--hold` of the GPU, as serve.gpu_memory_utilization would take without
  sleep mode), the trainer's peak next to it, and what stays allocated after each round (should be the held block
  alone: the trainer's memory released);
- bf16 training speed (tokens/s per optimizer step, as the store records it) and seconds per round;
- that round 2 continued round 1's adapter.

Prints a table and writes bench/results/gpu.json. Without a usable GPU it says so and exits 2.

    python bench/gpu_check.py [--hold 0.5] [--big-layers 16] [--rows-per-round 16]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
RESULTS = ROOT / "bench" / "results" / "gpu.json"
MB = 2 ** 20


def big_model(out: Path, tiny: Path, layers: int) -> Path:
    """A Qwen2-shaped model of ~1.1B parameters (16 layers at 2048 wide) with random bf16 weights, saved with the
    tiny model's tokenizer (vocabulary 4096), so the synthetic rows fit both."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(vocab_size=4096, hidden_size=2048, intermediate_size=8192, num_hidden_layers=layers,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
                         tie_word_embeddings=True, torch_dtype="bfloat16")
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.save_pretrained(str(out))
    del model
    torch.cuda.empty_cache()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (tiny / name).exists():
            shutil.copy(tiny / name, out / name)
    return out


def check_model(label: str, base: Path, hold: float, rows: int, work: Path) -> dict:
    import torch

    from agentlightning_cli.config import Settings
    from agentlightning_cli.store import Store
    from trainer_cpu import synthetic_round, train_in_new_thread

    params = sum(p.numel() for p in __import__("safetensors.torch", fromlist=["load_file"]).load_file(
        str(next(base.glob("*.safetensors")))).values())
    total = torch.cuda.mem_get_info()[1]
    held = torch.empty(int(hold * total), dtype=torch.uint8, device="cuda")  # what vLLM would keep
    baseline = torch.cuda.memory_allocated()
    store = Store.open(work / label)
    run = store.create_run(label, {})
    settings = Settings()
    settings.train.batch_size, settings.train.grad_accum = 4, 2
    rng = random.Random(0)
    rounds = []
    adapter = None
    for index in range(2):
        # Round 2 samples round 1's adapter (its row says so), and its training continues it.
        synthetic_round(store, run.id, index, rng, tasks=2, attempts=rows // 2, vocab=4000,
                        adapter_path=str(adapter) if adapter else None)
        torch.cuda.reset_peak_memory_stats()
        report, seconds = train_in_new_thread(store, run.id, index, base, settings,
                                              work / f"{label}-adapter-{index + 1}")
        steps = store.list_train_steps(run.id, index)
        rounds.append({
            "round": index, "rows": report.rows, "steps": report.steps, "seconds": round(seconds, 1),
            "tokens_per_s": [round(s.tokens_per_s, 1) for s in steps if s.tokens_per_s],
            "peak_trainer_mb": round((torch.cuda.max_memory_allocated() - baseline) / MB),
            "left_allocated_mb": round((torch.cuda.memory_allocated() - baseline) / MB),
            "continued": report.base_adapter,
        })
        adapter = report.adapter_dir
    store.close()
    del held
    torch.cuda.empty_cache()
    return {"model": label, "params_m": round(params / 1e6, 1), "gpu_total_mb": round(total / MB), "held": hold,
            "rounds": rounds, "round2_continued_round1": rounds[1]["continued"] == str(work / f"{label}-adapter-1")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hold", type=float, default=0.5, help="share of the GPU held as vLLM's (default 0.5)")
    parser.add_argument("--big-layers", type=int, default=16)
    parser.add_argument("--rows-per-round", type=int, default=16)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        raise SystemExit("bench/gpu_check.py needs torch") from None
    if not torch.cuda.is_available():
        print("bench/gpu_check.py needs a CUDA GPU torch can use (alight doctor says why not)", file=sys.stderr)
        raise SystemExit(2)
    from agentlightning_cli.serve.tiny_model import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="alight-gpu-check-"))
    started = time.perf_counter()
    tiny = build_tiny_model(work / "tiny")
    models = [("tiny", tiny), ("big", big_model(work / "big", tiny, args.big_layers))]
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
               "models": [check_model(label, path, args.hold, args.rows_per_round, work) for label, path in models]}
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(f"{results['device']}, torch {results['torch']} (CUDA {results['cuda']}), {results['seconds']} s")
    print(f"{'model':6} {'params M':>8} {'round':>5} {'rows':>4} {'s':>6} {'tok/s (median)':>14} {'peak MB':>8} "
          f"{'left MB':>7} continued")
    for m in results["models"]:
        for r in m["rounds"]:
            tps = sorted(r["tokens_per_s"])
            print(f"{m['model']:6} {m['params_m']:>8} {r['round']:>5} {r['rows']:>4} {r['seconds']:>6} "
                  f"{(tps[len(tps) // 2] if tps else '-'):>14} {r['peak_trainer_mb']:>8} {r['left_allocated_mb']:>7} "
                  f"{'yes' if r['continued'] else 'no'}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
