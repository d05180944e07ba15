"""The GPU check, prepared for a machine with one CUDA GPU (≤ 10 minutes): the trainer side of `alight run
--rounds` next to the share of the GPU vLLM would hold, for the embedded tiny model and a ~1.1B model built on the
spot from a config with random weights (no weights are carried; vLLM is not needed). Per model, two rounds each
trained in a new thread as `alight run` trains them, round 2 continuing round 1's adapter:

- GPU memory: held by "vLLM" (a block of `--hold` of the GPU, as serve.gpu_memory_utilization would take without
  sleep mode), the trainer's peak next to it, and what stays allocated after each round (should be the held block
  alone: the trainer's memory released);
- bf16 training speed (tokens/s per optimizer step, as the store records it) and seconds per round;
- that round 2 continued round 1's adapter;
- the trainer's peak for a Qwen2.5-7B-shaped model (random weights) against the tokens of one forward pass, the
  measurement behind the memory plan's activation rate (serve/gpu_plan.py);
- the GPU plan for a 7B and a 72B model on this machine's GPUs, as `alight run` would read them.

Prints a table and writes bench/results/gpu.json. Without a usable GPU it says so and exits 2. On a machine with
torch but without TRL and alight's own dependencies, carry them as wheels (no vLLM is needed).

    python bench/gpu_check.py [--hold 0.5] [--big-layers 16] [--rows-per-round 16] [--prompt-tokens 3000]
                              [--shape-7b 2x2048,2x4096,2x8192,4x8192] [--out FILE]
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


def random_model(out: Path, tiny: Path, **shape) -> Path:
    """A Qwen2 model of `shape` (Qwen2Config's arguments) with random bf16 weights, built on the GPU and saved with
    the tiny model's tokenizer (vocabulary 4096), so the synthetic rows (ids below 4000) fit it."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(torch_dtype="bfloat16", **shape)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.save_pretrained(str(out))
    del model
    torch.cuda.empty_cache()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (tiny / name).exists():
            shutil.copy(tiny / name, out / name)
    return out


def big_model(out: Path, tiny: Path, layers: int) -> Path:
    """~1B parameters (16 layers at 2048 wide), vocabulary 4096."""
    return random_model(out, tiny, vocab_size=4096, hidden_size=2048, intermediate_size=8192, num_hidden_layers=layers,
                        num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
                        tie_word_embeddings=True)


def check_model(label: str, base: Path, hold: float, rows: int, prompt: int, work: Path) -> dict:
    import torch
    from safetensors.torch import load_file

    from agentlightning_cli.config import Settings
    from agentlightning_cli.serve.gpu_plan import model_shape, trainer_bytes, weights_bytes
    from agentlightning_cli.store import Store
    from trainer_cpu import synthetic_round, train_in_new_thread

    params = sum(t.numel() for t in load_file(str(next(base.glob("*.safetensors")))).values())
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
        synthetic_round(store, run.id, index, rng, tasks=2, attempts=rows // 2, prompt=prompt, vocab=4000,
                        adapter_path=str(adapter) if adapter else None)
        torch.cuda.reset_peak_memory_stats()
        report, seconds = train_in_new_thread(store, run.id, index, base, settings,
                                              work / f"{label}-adapter-{index + 1}")
        steps = store.list_train_steps(run.id, index)
        left = torch.cuda.memory_allocated() - baseline
        # cuBLAS keeps a workspace per handle in the caching allocator from the first matrix product on (the
        # first model to train pays it): what is left once it is cleared is what the trainer itself kept.
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        torch.cuda.empty_cache()
        rounds.append({
            "round": index, "rows": report.rows, "steps": report.steps, "seconds": round(seconds, 1),
            "tokens_per_s": [round(s.tokens_per_s, 1) for s in steps if s.tokens_per_s],
            "peak_trainer_mb": round((torch.cuda.max_memory_allocated() - baseline) / MB),
            "peak_trainer_reserved_mb": round((torch.cuda.max_memory_reserved() - int(hold * total)) / MB),
            "left_allocated_mb": round(left / MB),
            "left_without_cublas_workspace_mb": round((torch.cuda.memory_allocated() - baseline) / MB),
            "reserved_after_empty_cache_mb": round((torch.cuda.memory_reserved() - int(hold * total)) / MB),
            "continued": report.base_adapter,
        })
        adapter = report.adapter_dir
    store.close()
    del held
    torch.cuda.empty_cache()
    weights = weights_bytes(base)
    settings.serve.max_model_len = prompt + 160  # the longest synthetic row: the plan's row limit for these rows
    return {"model": label, "params_m": round(params / 1e6, 1), "weights_mb": round(weights / MB),
            "plan_trainer_estimate_mb": round(trainer_bytes(settings, weights, model_shape(base))[0] / MB),
            "prompt_tokens": prompt, "gpu_total_mb": round(total / MB), "held": hold,
            "rounds": rounds, "round2_continued_round1": rounds[1]["continued"] == str(work / f"{label}-adapter-1")}


def memory_by_tokens(work: Path, tiny: Path, shapes: list[tuple[int, int]]) -> dict:
    """The trainer's peak GPU memory for a model of Qwen2.5-7B's shape (28 layers, 3584 wide, vocabulary 152,064;
    random bf16 weights) against the rows in one forward pass: (rows per pass, row length) per entry, each row a
    500-token prompt and one long completion (a multi-call row is trained on almost all of itself)."""
    import torch

    from agentlightning_cli.config import Settings
    from agentlightning_cli.serve.gpu_plan import weights_bytes
    from agentlightning_cli.store import Store
    from trainer_cpu import synthetic_round, train_in_new_thread

    base = random_model(work / "7b", tiny, vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                        num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                        max_position_embeddings=32768, tie_word_embeddings=False)
    out = {"weights_mb": round(weights_bytes(base) / MB), "layers": 28, "hidden": 3584, "intermediate": 18944,
           "vocab": 152064, "runs": []}
    baseline = torch.cuda.memory_allocated()
    for index, (per_pass, length) in enumerate(shapes):
        store = Store.open(work / f"7b-{index}")
        run = store.create_run("7b", {})
        settings = Settings()
        settings.train.batch_size, settings.train.grad_accum = per_pass, 1
        settings.serve.max_model_len = length + 64
        synthetic_round(store, run.id, 0, random.Random(index), tasks=1, attempts=per_pass, calls=1, prompt=500,
                        answer=length - 502, vocab=4000)
        torch.cuda.reset_peak_memory_stats()
        try:
            report, seconds = train_in_new_thread(store, run.id, 0, base, settings, work / f"7b-adapter-{index}")
            entry = {"rows_per_pass": per_pass, "row_tokens": length, "rows": report.rows, "seconds": round(seconds, 1),
                     "peak_mb": round((torch.cuda.max_memory_allocated() - baseline) / MB),
                     "peak_reserved_mb": round(torch.cuda.max_memory_reserved() / MB)}
        except SystemExit as exc:
            entry = {"rows_per_pass": per_pass, "row_tokens": length, "failed": str(exc)}
        store.close()
        torch.cuda.empty_cache()
        out["runs"].append(entry)
        print(f"7B shape: {per_pass} row(s) x {length} tokens per pass: {entry}", flush=True)
    return out


def out_of_memory(work: Path, tiny: Path, layers: int, prompt: int) -> dict:
    """A real CUDA out-of-memory in training, as a first GPU user meets it: the 1B model with all but its weights and
    1 GiB of the GPU taken. The round must end with alight's message and the settings to change (not a raw torch
    error); once that error is dropped, nothing the failed round made may stay allocated; and the same round must
    then train in the same process once the memory is there (what rerunning the command does)."""
    import gc
    import threading

    import torch

    from agentlightning_cli.config import Settings
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.serve.gpu_plan import weights_bytes
    from agentlightning_cli.store import Store
    from agentlightning_cli.train.round_step import train_round
    from trainer_cpu import synthetic_round

    base = big_model(work / "oom-1b", tiny, layers)
    store = Store.open(work / "oom")
    run = store.create_run("oom", {})
    settings = Settings()
    settings.train.batch_size, settings.train.grad_accum = 4, 2
    synthetic_round(store, run.id, 0, random.Random(0), tasks=2, attempts=8, prompt=prompt, vocab=4000)

    def train(out_dir: Path) -> dict:
        result: dict = {}

        def body() -> None:
            try:
                result["report"] = train_round(store, run.id, 0, base_model=base, settings=settings, out_dir=out_dir,
                                               log=lambda m: None)
            except BaseException as exc:  # noqa: BLE001 - kept to be looked at, then dropped
                result["error"] = exc

        thread = threading.Thread(target=body)
        thread.start()
        thread.join()
        return result

    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info()[0]
    hold = torch.empty(free - weights_bytes(base) - 2 ** 30, dtype=torch.uint8, device="cuda")
    baseline = torch.cuda.memory_allocated()
    result = train(work / "oom-adapter-a")
    error = result.pop("error", None)
    out: dict = {"free_mb_left_to_the_trainer": round((free - hold.numel()) / MB),
                 "error_type": type(error).__name__ if error else None,
                 "alight_error": isinstance(error, AlightError),
                 "message": getattr(error, "message", str(error) if error else None),
                 "hint": getattr(error, "hint", None),
                 "caused_by": type(error.__cause__).__name__ if error is not None and error.__cause__ else None,
                 "allocated_while_the_error_lives_mb": round((torch.cuda.memory_allocated() - baseline) / MB)}
    cause = getattr(error, "__cause__", None)
    if cause is not None:
        import traceback

        out["raised_at"] = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}"
                            for f in traceback.extract_tb(cause.__traceback__)[-8:]]
        chain, seen = [], cause.__context__
        while seen is not None and len(chain) < 5:
            chain.append(type(seen).__name__)
            seen = seen.__context__
        out["context_chain"] = chain
    out["holders"] = holders_of_large_cuda_tensors()
    del error, result
    gc.collect()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    out["left_after_the_error_is_dropped_mb"] = round((torch.cuda.memory_allocated() - baseline) / MB)
    del hold
    torch.cuda.empty_cache()
    again = train(work / "oom-adapter-b")
    out["retrained"] = "report" in again
    if "report" in again:
        out["retrained_rows"], out["retrained_steps"] = again["report"].rows, again["report"].steps
    else:
        out["retrain_error"] = repr(again.get("error"))[:500]
    store.close()
    print(f"out of memory: {out}", flush=True)
    return out


def holders_of_large_cuda_tensors(limit: int = 3) -> list:
    """For the largest live CUDA tensors (over 16 MB, not this check's own hold), the chain of object types that
    refer to each, two levels up: what keeps memory a failed round should have freed."""
    import gc
    import types

    import torch

    tensors = []
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and obj.is_cuda and obj.dtype != torch.uint8 \
                    and obj.numel() * obj.element_size() > 16 * MB:
                tensors.append(obj)
        except Exception:  # noqa: BLE001 - odd objects in gc's list
            continue
    tensors.sort(key=lambda t: -t.numel() * t.element_size())
    out = []
    for tensor in tensors[:limit]:
        levels = []
        current = [tensor]
        for _ in range(3):
            referrers = []
            for obj in current:
                referrers += [r for r in gc.get_referrers(obj)
                              if r is not current and r is not tensors and not isinstance(r, types.FrameType)
                              or isinstance(r, types.FrameType) and r.f_code.co_name != "holders_of_large_cuda_tensors"]
            levels.append(sorted({type(r).__name__ + (f" {r.f_code.co_name}" if isinstance(r, types.FrameType) else
                                                      "") for r in referrers})[:12])
            current = referrers[:6]
        out.append({"mb": round(tensor.numel() * tensor.element_size() / MB), "referrers": levels})
    del tensors
    return out


def plans_here(gpus: list | None = None) -> dict:
    """The GPU plan `alight run --rounds` makes on this machine's GPUs (the driver's list, as alight reads it, or
    `gpus`) for a 7B and a 72B model in bf16 at the default settings (4 rows x 4096 tokens per pass), with sleep
    mode (the default) and without: what it decides, or its refusal."""
    from agentlightning_cli.config import Settings
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.serve.gpu_plan import plan, visible_gpus

    gpus = visible_gpus() if gpus is None else gpus
    out = {"visible_gpus": [{"id": g.id, "total_mb": round(g.total_bytes / MB), "name": g.name, "driver": g.driver}
                            for g in gpus]}
    for label, size, shape in (("7B", 15.2e9, (28, 3584)), ("72B", 145.4e9, (80, 8192))):
        for sleep in ("auto", "off"):
            settings = Settings()
            settings.serve.sleep_between_rounds = sleep
            try:
                decided = plan(gpus, settings, int(size), trains=True, shape=shape)
                out[f"{label} sleep {sleep}"] = {"gpu_memory_utilization": decided.gpu_memory_utilization,
                                                  "sleep": decided.sleep, "lines": decided.lines}
            except AlightError as exc:
                out[f"{label} sleep {sleep}"] = {"refused": exc.message, "hint": exc.hint}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hold", type=float, default=0.5, help="share of the GPU held as vLLM's (default 0.5)")
    parser.add_argument("--big-layers", type=int, default=16)
    parser.add_argument("--rows-per-round", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=3000,
                        help="first-prompt tokens of each synthetic episode (rows grow ~140 past it; default 3000)")
    parser.add_argument("--shape-7b", default="2x2048,2x4096,2x8192,4x8192",
                        help="rows-per-pass x row-tokens runs of a 7B-shaped model ('' skips them)")
    parser.add_argument("--parts", default="models,plans,shape7b,oom",
                        help="which checks to run (default all): models (tiny and 1B over two rounds), plans, shape7b "
                             "(the 7B shape's memory by tokens), oom (a real out-of-memory and the recovery)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"where the JSON goes (default {RESULTS})")
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
    parts = set(args.parts.split(","))
    results: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
                     "models": []}
    if "models" in parts:
        models = [("tiny", tiny), ("big", big_model(work / "big", tiny, args.big_layers))]
        results["models"] = [check_model(label, path, args.hold, args.rows_per_round, args.prompt_tokens, work)
                             for label, path in models]
    if "plans" in parts:
        results["plans"] = plans_here()
    if "shape7b" in parts and args.shape_7b:
        shapes = [tuple(int(n) for n in item.split("x")) for item in args.shape_7b.split(",")]
        results["memory_by_tokens_7b"] = memory_by_tokens(work, tiny, shapes)
    if "oom" in parts:
        results["out_of_memory"] = out_of_memory(work, tiny, args.big_layers, args.prompt_tokens)
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(f"{results['device']}, torch {results['torch']} (CUDA {results['cuda']}), {results['seconds']} s")
    print(f"{'model':6} {'params M':>8} {'round':>5} {'rows':>4} {'s':>6} {'tok/s (median)':>14} {'peak MB':>8} "
          f"{'plan MB':>7} {'left MB':>7} {'left w/o cuBLAS':>15} continued")
    for m in results["models"]:
        for r in m["rounds"]:
            tps = sorted(r["tokens_per_s"])
            print(f"{m['model']:6} {m['params_m']:>8} {r['round']:>5} {r['rows']:>4} {r['seconds']:>6} "
                  f"{(tps[len(tps) // 2] if tps else '-'):>14} {r['peak_trainer_reserved_mb']:>8} "
                  f"{m['plan_trainer_estimate_mb']:>7} {r['left_allocated_mb']:>7} "
                  f"{r['left_without_cublas_workspace_mb']:>15} {'yes' if r['continued'] else 'no'}")
    for name, decided in results.get("plans", {}).items():
        if name != "visible_gpus":
            print(f"plan {name}: " + (f"refused: {decided['refused']}" if "refused" in decided else
                                      f"gpu_memory_utilization {decided['gpu_memory_utilization']}, "
                                      f"sleep {decided['sleep']}"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
