#!/usr/bin/env bash
# Quickstart: install alight into ./.venv, then run the main job on the embedded default (a tiny local model on
# CPU vLLM). Until `alight run` lands, the main job is `alight serve`: vLLM + the recording proxy, printing the
# base URL and the exact settings for each harness; every call is recorded under runs/quickstart/. Ctrl-C stops.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/alight serve --run quickstart "$@"
