#!/usr/bin/env python3
"""The smallest harness: ONE chat call through alight's proxy, the reply written to reply.json in the workspace.

Run by the external recipe one_call.yaml (no `install`): learning through `alight run --rounds` on CPU.
Standard library only. The base URL and key come from OPENAI_BASE_URL / OPENAI_API_KEY, as the recipe sets them.
It asks vLLM for the reply's token ids (`return_token_ids`, which the proxy passes back to a client that asks) so
the reward can score tokens rather than re-tokenised text. The sampling seed is derived from the episode id, so a
resumed episode samples the same reply (a new run has new episode ids, hence new seeds: its run id is random).
Temperature and max_tokens are left to alight's settings (proxy.sampling). Its report: {"event": "finished"} on stdout.
"""

import argparse
import hashlib
import json
import os
import sys
import urllib.request


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt-file", required=True)
    parser.add_argument("--episode", required=True, help="the episode id: the sampling seed is derived from it")
    parser.add_argument("--out", default="reply.json")
    args = parser.parse_args()
    with open(args.prompt_file, encoding="utf-8") as fh:
        prompt = fh.read().strip()
    seed = int(hashlib.sha256(args.episode.encode()).hexdigest()[:8], 16) % (2 ** 31)
    body = {"model": "policy", "messages": [{"role": "user", "content": prompt}], "seed": seed,
            "return_token_ids": True}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            choice = json.loads(resp.read())["choices"][0]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        print(json.dumps({"event": "error", "message": f"model call failed: {exc}"}), flush=True)
        return 1
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"content": choice["message"].get("content"), "token_ids": choice.get("token_ids")}, fh)
    print(json.dumps({"event": "finished"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
