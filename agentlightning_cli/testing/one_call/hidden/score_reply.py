#!/usr/bin/env python3
"""Reward for the one-call task set: the share of the reply's tokens that are in the target set.

Copied into the workspace (hidden file) after the agent is gone, next to target_ids.json, which the test writes:
{"target": [ids...], "ignore": [ids not counted, e.g. end of sequence], "vocab": size}. Ids at or past `vocab`
(added special tokens) are not counted either; an empty reply scores as one non-target token.
Prints {"reward": share, "tokens": n} as its final JSON line.
"""

import json

with open("target_ids.json", encoding="utf-8") as fh:
    spec = json.load(fh)
target, ignore, vocab = set(spec["target"]), set(spec.get("ignore", [])), spec.get("vocab")
with open("reply.json", encoding="utf-8") as fh:
    ids = json.load(fh).get("token_ids") or []
reply = [t for t in ids if t not in ignore and (vocab is None or t < vocab)] or [-1]
print(json.dumps({"reward": sum(t in target for t in reply) / len(reply), "tokens": len(reply)}))
