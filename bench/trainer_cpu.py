"""Trainer throughput and memory on CPU with a real model: two train_rounds (GRPO + LoRA, round-start scoring
included) of SmolLM2-135M-Instruct, each in a new thread as `alight run` trains between rounds, on synthetic
rounds shaped like the learning benchmark's traffic (16 episodes in 2 groups, 2 calls each: a ~250-token
prompt, 60-token answers, 40-token observations; sampled at temperature 0.7), once per thread count, each in
its own process, side by side in one run. Reports the second round's speed, the peak resident memory and the
resident memory after each round (what the next round starts from).

The token ids are random (this measures speed, not learning); tokens/s counts prompt + completion tokens per
optimizer step, as the store's train steps do, and the first step no longer includes model loading.

    python bench/trainer_cpu.py [--threads 1,2] [--model smollm2] [--batch-size 4] [--grad-accum 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "trainer_cpu.json"


def _memory_mb() -> tuple[int, int]:
    """(resident now, peak resident) of this process, MB."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]) // 1024, int(status["VmHWM"].split()[0]) // 1024


def synthetic_round(store, run_id: str, index: int, rng: random.Random, tasks: int = 2, attempts: int = 8,
                    calls: int = 2, prompt: int = 250, answer: int = 60, gap: int = 40, vocab: int = 40000,
                    temperature: float = 0.7, adapter_path: str | None = None) -> None:
    """A finished round of tasks x attempts episodes with random ids, each `calls` chained calls (every prompt
    extends the last by its answer and a `gap`), random rewards: the shape of a harness round, for speed only."""
    from agentlightning_cli.store import CallRecord

    rnd = store.create_round(run_id, index, f"policy-r{index}", adapter_path)
    for task in range(tasks):
        for attempt in range(attempts):
            ep = store.create_episode(run_id, rnd.id, f"t{task}", attempt, "h", "k")
            ids = [1] + [rng.randrange(5, vocab) for _ in range(prompt)]
            for _ in range(calls):
                reply = [rng.randrange(5, vocab) for _ in range(answer)] + [2]
                store.add_call(CallRecord(
                    episode_id=ep.id, protocol="openai-chat", method="POST", path="/v1/chat/completions",
                    status="ok", http_status=200, stream=False, client_request=b"{}",
                    sampling={"temperature": temperature}, started_at=1.0, ended_at=2.0, prompt_token_ids=ids,
                    completion_token_ids=reply, completion_logprobs=[-3.0] * len(reply)))
                ids = ids + reply + [rng.randrange(5, vocab) for _ in range(gap)]
            store.update_episode(ep.id, status="done", outcome="finished", reward=float(rng.random()))


def train_in_new_thread(store, run_id: str, index: int, base: Path, settings, out_dir: Path):
    """train_round for round `index` in a new thread, as `alight run` trains between rounds: (report, seconds)."""
    import threading

    from agentlightning_cli.train.round_step import train_round

    result: dict = {}

    def train() -> None:
        started = time.perf_counter()
        result["report"] = train_round(store, run_id, index, base_model=base, settings=settings, out_dir=out_dir,
                                       log=lambda m: None)
        result["seconds"] = time.perf_counter() - started

    thread = threading.Thread(target=train)
    thread.start()
    thread.join()
    if "report" not in result:
        raise SystemExit(f"round {index}'s training failed (its traceback is above)")
    return result["report"], result["seconds"]


def one_round(model: str, batch_size: int, grad_accum: int, rounds: int = 2) -> dict:
    """Runs in the child process: `rounds` train_rounds on a fresh synthetic store, each in a new thread as
    `alight run` trains between rounds; the last round's numbers, and resident memory after every round."""
    from agentlightning_cli.config import Settings
    from agentlightning_cli.serve.policy import resolve_model
    from agentlightning_cli.store import Store

    work = Path(tempfile.mkdtemp(prefix="alight-trainer-cpu-"))
    store = Store.open(work / "run")
    run = store.create_run("bench", {})
    settings = Settings()
    settings.train.batch_size, settings.train.grad_accum = batch_size, grad_accum
    base = resolve_model(settings, model)
    rng = random.Random(0)
    out: dict = {"rss_after_round_mb": []}
    for index in range(rounds):
        synthetic_round(store, run.id, index, rng)
        report, seconds = train_in_new_thread(store, run.id, index, base, settings, work / f"adapter-{index}")
        out["rss_after_round_mb"].append(_memory_mb()[0])
        steps = store.list_train_steps(run.id, index)
        out.update(rows=report.rows, steps=report.steps, round_s=round(seconds, 1),
                   tokens_per_step=steps[0].extra.get("tokens") if steps else None,
                   tokens_per_s=[round(s.tokens_per_s, 1) for s in steps])
    out["peak_rss_mb"] = _memory_mb()[1]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--grad-accum", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_round(args.model, args.batch_size, args.grad_accum)))
        return
    load = os.getloadavg()[0]
    table = []
    for threads in [int(t) for t in args.threads.split(",")]:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, __file__, "--child", "--model", args.model, "--batch-size",
                              str(args.batch_size), "--grad-accum", str(args.grad_accum)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
        table.append({"threads": threads, **json.loads(out.stdout.strip().splitlines()[-1])})
    base = table[0]["round_s"]
    print(f"{'threads':>7} {'rows':>4} {'steps':>5} {'round s':>8} {'tokens/s per step':>24} {'speed-up':>8} "
          f"{'peak MB':>8} {'MB after each round':>20}")
    for row in table:
        print(f"{row['threads']:>7} {row['rows']:>4} {row['steps']:>5} {row['round_s']:>8} "
              f"{str(row['tokens_per_s']):>24} {base / row['round_s']:>7.2f}x {row['peak_rss_mb']:>8} "
              f"{str(row['rss_after_round_mb']):>20}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": args.model, "batch_size": args.batch_size, "grad_accum": args.grad_accum,
                                    "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                                "load_at_start": load},
                                    "rows": table}, indent=2) + "\n")
    print(f"(load {load:.2f} at start on {os.cpu_count()} CPUs; wrote {args.out.relative_to(ROOT)})")


if __name__ == "__main__":
    main()
