#!/usr/bin/env bash
# Quickstart: install alight into ./.venv and mini-SWE-agent into ALIGHT_HOME, then the main job: `alight run` on
# the example task set (examples/tasks/) with the embedded tiny model on CPU vLLM, 2 attempts per task, ending
# in the summary table. The tiny model is random, so every reward is 0; the point is the whole loop: workspaces,
# the real harness through the recording proxy, hidden tests, rewards, the store under runs/quickstart/.
# Its answers are capped at 64 tokens (a random model rarely stops by itself) and mini-SWE-agent at 3 steps.
# Run it again to resume; Ctrl-C stops everything. Extra arguments go to `alight run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/alight harness install mini-swe-agent
ALIGHT_PROXY__SAMPLING__MAX_TOKENS_CAP="${ALIGHT_PROXY__SAMPLING__MAX_TOKENS_CAP:-64}" \
  exec .venv/bin/alight run --task-set examples/tasks/tasks.jsonl --harness mini-swe-agent --attempts 2 \
  --max-turns 3 --name quickstart "$@"
