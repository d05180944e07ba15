"""Store benchmark: one 100-call agent episode whose prompt grows ~500 tokens per call.

Each call's prompt = previous prompt + previous completion + new tool-output tokens, and each request body
is a JSON chat request that resends the whole conversation (as every harness does). Reports bytes on disk
for token ids and request bodies against a naive full-copy layout and against the targets, plus write and
read-back speed. Usage: python bench/store.py [--calls 100] [--growth 500] [--out bench/results/store.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import tempfile
import time
from pathlib import Path

import zstandard

from agentlightning_cli.store import CallRecord, Store, codec, deltas
from agentlightning_cli.store.codec import common_prefix_len

# Word list with a Zipf-like draw: text that compresses like prose/code (~3x with zstd), not like noise.
_WORDS = [f"{stem}{suffix}" for stem in ("def", "self", "return", "import", "value", "error", "test", "file",
          "line", "path", "class", "data", "result", "config", "assert", "print", "lambda", "index", "token",
          "request", "None", "True", "False", "list", "dict", "open", "read", "write", "status", "patch")
          for suffix in ("", "_a", "_id", "s", "_map", "_path", "()", ":", "=", ".get", "_count", "[0]")]


def _text(rng: random.Random, n_tokens: int) -> tuple[str, list[int]]:
    """n_tokens words of pseudo-code, and one token id per word (ids in a 150k vocabulary)."""
    picks = [min(int(rng.paretovariate(1.1)) - 1, len(_WORDS) - 1) for _ in range(n_tokens)]
    picks = [(p * 7919 + rng.randrange(3)) % len(_WORDS) if rng.random() < 0.3 else p for p in picks]
    return " ".join(_WORDS[p] for p in picks), [(p * 2654435761 + 17) % 150_000 for p in picks]


def build_episode(calls: int, growth: int, seed: int = 7) -> list[dict]:
    """Per call: prompt ids, completion ids, logprobs, client body and upstream body (bytes)."""
    rng = random.Random(seed)
    system, system_ids = _text(rng, 2000)  # a harness's system prompt + tool docs: ~2k tokens up front
    task, task_ids = _text(rng, 150)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    prompt = system_ids + [1, 2] + task_ids + [3]
    out = []
    for i in range(calls):
        completion_text, completion = _text(rng, growth // 4)
        completion = completion + [4]
        client = {"model": "agent-model", "messages": messages, "temperature": 1.0, "stream": True,
                  "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]}
        upstream = dict(client, model="policy-r0", return_token_ids=True, logprobs=True)
        out.append({
            "prompt": list(prompt), "completion": completion,
            "logprobs": [-rng.random() * 3 for _ in completion],
            "client": json.dumps(client).encode(), "upstream": json.dumps(upstream).encode(),
        })
        tool_text, tool_ids = _text(rng, growth - len(completion) - 3)
        messages = messages + [{"role": "assistant", "content": completion_text},
                               {"role": "tool", "content": tool_text}]
        prompt = prompt + completion + [5] + tool_ids + [6, 7]
    return out


def _sum_lengths(db: Path, expr: str, episode_id: str) -> int:
    with sqlite3.connect(db) as conn:
        sql = f"SELECT COALESCE(SUM({expr}), 0) FROM calls WHERE episode_id = ?"
        return conn.execute(sql, (episode_id,)).fetchone()[0]


def _file_bytes(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]


def _write(store: Store, episode: list[dict]) -> tuple[str, float]:
    ep = store.create_episode(None, None, "bench", 0, "bench", "key")
    t0 = time.perf_counter()
    for call in episode:
        now = time.time()
        store.add_call(CallRecord(
            episode_id=ep.id, protocol="openai-chat", method="POST", path="/v1/chat/completions", status="ok",
            http_status=200, stream=True, client_request=call["client"], upstream_request=call["upstream"],
            response=b"data: {}\n\n", started_at=now, ended_at=now, prompt_token_ids=call["prompt"],
            completion_token_ids=call["completion"], completion_logprobs=call["logprobs"]))
    return ep.id, time.perf_counter() - t0


def delta_side_by_side(episode: list[dict], repeat: int) -> dict:
    """µs and bytes per body for each delta kind on the same bodies, interleaved (best of `repeat`): the
    dictionary frame every delta used to be, and what the store writes now (splice, or dictionary when the
    body was rewritten rather than appended to)."""
    pairs = [(c[k], p[k]) for k in ("client", "upstream") for p, c in zip(episode, episode[1:])]
    kinds = {"dictionary": codec.compress_delta, "store_now": deltas.encode}
    best = dict.fromkeys(kinds, float("inf"))
    for _ in range(repeat):
        for name, encode in kinds.items():
            t0 = time.perf_counter()
            for data, base in pairs:
                encode(data, base)
            best[name] = min(best[name], (time.perf_counter() - t0) / len(pairs))
    sizes = {name: sum(len(encode(d, b)) for d, b in pairs) for name, encode in kinds.items()}
    return {name: {"us_per_body": best[name] * 1e6, "bytes": sizes[name]} for name in kinds}


def run(calls: int, growth: int, repeat: int) -> dict:
    """Sizes from one episode; times are the best of `repeat` runs (the machine is shared and noisy)."""
    episode = build_episode(calls, growth)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "store")
        episode_id, write_s = _write(store, episode)
        for n in range(repeat - 1):  # into other files, so alight.db holds exactly one episode
            with Store.open(Path(tmp) / f"repeat-{n}") as other:
                write_s = min(write_s, _write(other, episode)[1])
        read_s = read_last_s = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            back = store.get_calls(episode_id)
            read_s = min(read_s, time.perf_counter() - t0)
            t0 = time.perf_counter()
            store.get_call(back[-1].id)
            read_last_s = min(read_last_s, time.perf_counter() - t0)
        exact = all(b.prompt_token_ids == c["prompt"] and b.completion_token_ids == c["completion"]
                    and b.completion_logprobs == c["logprobs"] and b.client_request == c["client"]
                    and b.upstream_request == c["upstream"] for b, c in zip(back, episode, strict=True))
        store.close()
        db = Path(tmp) / "store" / "alight.db"
        ids_stored = _sum_lengths(db, "LENGTH(prompt_tail) + LENGTH(completion_ids)", episode_id)
        logprobs_stored = _sum_lengths(db, "LENGTH(completion_logprobs)", episode_id)
        bodies_stored = _sum_lengths(db, "LENGTH(client_request) + LENGTH(upstream_request)", episode_id)
        naive_db = Path(tmp) / "naive.db"
        with sqlite3.connect(naive_db) as conn:
            conn.execute("CREATE TABLE calls (prompt BLOB, completion BLOB, client BLOB, upstream BLOB)")
            conn.executemany("INSERT INTO calls VALUES (?, ?, ?, ?)", [
                (json.dumps(c["prompt"]).encode(), json.dumps(c["completion"]).encode(), c["client"], c["upstream"])
                for c in episode])
        file_store, file_naive = _file_bytes(db), _file_bytes(naive_db)

    last = episode[-1]
    unique_tokens = len(last["prompt"]) + len(last["completion"])  # every token of the episode appears here
    ids_unique = 4 * unique_tokens
    ids_naive = sum(4 * (len(c["prompt"]) + len(c["completion"])) for c in episode)
    zstd = zstandard.ZstdCompressor(level=3)
    bodies_unique = len(zstd.compress(last["client"])) + len(zstd.compress(last["upstream"]))
    new_content = sum(len(c[k]) - _common_prefix(c[k], p[k]) for k in ("client", "upstream")
                      for p, c in zip([{"client": b"", "upstream": b""}, *episode], episode))
    bodies_naive = sum(len(c["client"]) + len(c["upstream"]) for c in episode)
    bodies_naive_zstd = sum(len(zstd.compress(c["client"])) + len(zstd.compress(c["upstream"])) for c in episode)
    return {
        "definitions": {
            "token_ids.unique_bytes": "4 bytes x unique tokens; unique tokens = final prompt + final completion"
                                      " (every token of the episode appears in the last call)",
            "token_ids.stored_bytes": "prompt tails + completion ids as stored (logprobs reported apart)",
            "request_bodies.unique_bytes_zstd_final": "zstd level 3 of the final (longest) client request plus"
                                                      " that of the final upstream request",
            "request_bodies.new_content_bytes_raw": "sum over calls and both kinds of the bytes after the common"
                                                    " prefix with the previous body (uncompressed)",
            "naive": "every call keeps its full prompt ids (4 B each) and full request bodies, uncompressed",
            "db_file_bytes": "whole alight.db (this one episode, logprobs and indexes included) after checkpoint",
            "delta_encode": "µs (best of repeat) and total bytes to delta-encode every body against the previous"
                            " one: dictionary = zstd with the base as dictionary (every delta before splice"
                            " frames); store_now = deltas.encode",
        },
        "calls": calls, "prompt_growth_tokens": growth, "repeat": repeat,
        "logprobs_stored_bytes": logprobs_stored, "final_prompt_tokens": len(last["prompt"]),
        "read_back_exact": exact,
        "token_ids": {"stored_bytes": ids_stored, "unique_bytes": ids_unique, "naive_bytes": ids_naive,
                      "ratio_vs_unique": ids_stored / ids_unique, "target_ratio": 1.3,
                      "naive_over_stored": ids_naive / ids_stored},
        "request_bodies": {"stored_bytes": bodies_stored, "unique_bytes_zstd_final": bodies_unique,
                           "new_content_bytes_raw": new_content, "naive_bytes": bodies_naive,
                           "naive_zstd_each_bytes": bodies_naive_zstd,
                           "ratio_vs_unique": bodies_stored / bodies_unique, "target_ratio": 2.0,
                           "naive_over_stored": bodies_naive / bodies_stored},
        "db_file_bytes": file_store, "naive_db_file_bytes": file_naive,
        "calls_per_second": calls / write_s, "write_seconds": write_s,
        "read_episode_seconds": read_s, "read_last_call_seconds": read_last_s,
        "delta_encode": delta_side_by_side(episode, repeat),
    }


def _common_prefix(a: bytes, b: bytes) -> int:
    return common_prefix_len(a, b, unit=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--growth", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3, help="best-of-N for the timings")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "store.json")
    args = parser.parse_args()
    r = run(args.calls, args.growth, args.repeat)
    ids, bodies = r["token_ids"], r["request_bodies"]
    rows = [
        ("token ids", ids["stored_bytes"], ids["unique_bytes"], ids["naive_bytes"], ids["ratio_vs_unique"], 1.3),
        ("request bodies", bodies["stored_bytes"], bodies["unique_bytes_zstd_final"], bodies["naive_bytes"],
         bodies["ratio_vs_unique"], 2.0),
    ]
    print(f"{'what':<16}{'stored B':>12}{'unique B':>12}{'naive B':>13}{'stored/unique':>15}{'target':>8}  ok")
    for name, stored, unique, naive, ratio, target in rows:
        print(f"{name:<16}{stored:>12,}{unique:>12,}{naive:>13,}{ratio:>15.2f}{target:>8.1f}  {ratio <= target}")
    print(f"token ids: unique = 4 B x tokens of the final prompt + completion; logprobs (float64) stored apart:"
          f" {r['logprobs_stored_bytes']:,} B")
    print(f"bodies: unique = zstd -3 of the final client + upstream request; raw new content per call summed:"
          f" {bodies['new_content_bytes_raw']:,} B; each body zstd'd alone: {bodies['naive_zstd_each_bytes']:,} B")
    print(f"whole alight.db: {r['db_file_bytes']:,} B; a naive SQLite layout (ids as JSON, full bodies):"
          f" {r['naive_db_file_bytes']:,} B")
    print(f"writes: {r['calls_per_second']:.0f} calls/s;"
          f" read back whole episode: {r['read_episode_seconds'] * 1000:.0f} ms;"
          f" last call alone: {r['read_last_call_seconds'] * 1000:.0f} ms; exact: {r['read_back_exact']}")
    d = r["delta_encode"]
    print("delta encode per body, same bodies interleaved: " + "; ".join(
        f"{name} {v['us_per_body']:.0f} µs, {v['bytes']:,} B" for name, v in d.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
