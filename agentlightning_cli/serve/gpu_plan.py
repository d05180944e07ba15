"""Where vLLM and the trainer run on a GPU machine, and how much of a shared GPU vLLM may take: one plan, computed
before anything starts, from the GPUs this process may see, the settings and the model's size.

- No GPU: nothing to plan (vLLM on CPU, training on CPU).
- One GPU: vLLM and training share it. With sleep mode (the default there) vLLM sleeps while the trainer trains,
  so it may keep most of the GPU (0.9); without it, vLLM gets what the trainer leaves: the base weights in bf16,
  the activations of one forward pass (trainer_bytes) and 2 GiB of CUDA context and buffers. A plan that cannot
  fit both is refused up front, naming the model's size, the fraction and the settings to change, instead of
  failing after a round.
- Several GPUs: vLLM on `serve.devices` (default: the first `serve.tensor_parallel_size` GPUs), training on
  `train.devices` (default: the last GPUs vLLM does not take). Training takes one GPU per training process
  (`train.processes`, or the num_processes of `train.accelerate_config`, per machine): accelerate gives each
  rank one of them. A plan without that many is refused before anything starts, naming the devices: N ranks on
  one GPU would each load the model there and fail in the first round.

Device numbers in settings count the GPUs this process may see (CUDA_VISIBLE_DEVICES, if set, else the driver's
list); the plan turns them into the values each process gets in its own CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlightning_cli.errors import AlightError

GIB = 1024 ** 3
CONTEXT_BYTES = 2 * GIB  # CUDA context, cuBLAS workspace, LoRA buffers: what a process holds beyond its tensors
SLEEPING_FRACTION = 0.9  # vLLM's share of a GPU it gives back (sleep level 1) whenever the trainer runs
# The trainer's activations grow with the tokens of one forward pass (rows per pass x row length), by about this
# many bytes per token per layer per unit of width (gradient checkpointing on, bf16, LoRA). Measured on an H200
# (bench/results/gpu.json): a Qwen2.5-7B-shaped model 5.9 (linear from 4k to 32k tokens per pass), a 1B one
# (16 x 2048) 7.7-8.6; the larger, rounded up, so the estimate stays above both.
ACTIVATION_BYTES_PER_LAYER_WIDTH = 8


@dataclass(frozen=True)
class Gpu:
    id: str
    """What CUDA_VISIBLE_DEVICES names it by (an index or a UUID)."""
    total_bytes: int
    name: str = ""
    driver: str = ""


@dataclass
class GpuPlan:
    serve_devices: list[str] = field(default_factory=list)
    """vLLM's CUDA_VISIBLE_DEVICES ([]: no GPU, leave it alone)."""
    train_devices: list[str] = field(default_factory=list)
    """The trainer's GPUs, one per training process (alight's own CUDA_VISIBLE_DEVICES, set before torch starts
    CUDA; accelerate's ranks inherit it and take one each); []: no training on a GPU."""
    shared: bool = False
    sleep: bool = False
    gpu_memory_utilization: float | None = None
    lines: list[str] = field(default_factory=list)
    """What was decided and why, for the log and the run's snapshot."""

    @property
    def train_device(self) -> str | None:
        """The first training GPU (the one a single training process uses); None: CPU."""
        return self.train_devices[0] if self.train_devices else None


def visible_gpus() -> list[Gpu]:
    """The GPUs this process may use: the driver's list (nvidia-smi), narrowed by CUDA_VISIBLE_DEVICES."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,memory.total,name,driver_version",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    gpus = []
    for line in out.stdout.strip().splitlines() if out.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[2].isdigit():
            gpus.append((parts[0], parts[1], int(parts[2]) * 1024 ** 2, parts[3], parts[4] if len(parts) > 4 else ""))
    wanted = os.environ.get("CUDA_VISIBLE_DEVICES")
    if wanted is not None:
        keep = [w.strip() for w in wanted.split(",") if w.strip()]
        gpus = [g for w in keep for g in gpus if w in (g[0], g[1])]
    return [Gpu(index, total, name, driver) for index, _, total, name, driver in gpus]


def weights_bytes(model_dir: Path) -> int:
    """The model's weights as stored (safetensors, else .bin): what vLLM and the trainer each load in bf16."""
    folder = Path(model_dir)
    files = list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))
    return sum(f.stat().st_size for f in files)


def model_shape(model_dir: Path) -> tuple[int, int] | None:
    """(layers, width) from the model's config.json (a multimodal model's text_config too); None when unknown."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    config = config.get("text_config", config) if isinstance(config, dict) else {}
    layers, width = config.get("num_hidden_layers"), config.get("hidden_size")
    return (layers, width) if isinstance(layers, int) and isinstance(width, int) else None


def trainer_bytes(settings: Any, model_bytes: int, shape: tuple[int, int] | None) -> tuple[int, str]:
    """What the trainer needs on its GPU at its peak, and how that was counted: the bf16 weights, one forward
    pass's activations (train.batch_size rows per process of up to the row limit, train.max_row_tokens else
    serve.max_model_len, at ACTIVATION_BYTES_PER_LAYER_WIDTH) and CONTEXT_BYTES. Without the model's shape, half
    the weights stands in for the activations."""
    train, serve = settings.train, settings.serve
    rows = max(1, train.batch_size // max(1, getattr(train, "processes", 1) or 1))
    length = getattr(train, "max_row_tokens", None) or serve.max_model_len or 4096
    if shape is None:
        activations, how = model_bytes // 2, "half the weights for activations (the model's shape is unknown)"
    else:
        activations = ACTIVATION_BYTES_PER_LAYER_WIDTH * shape[0] * shape[1] * rows * length
        how = f"{activations / GIB:.1f} GiB of activations for {rows} row(s) x {length} tokens per pass"
    return model_bytes + activations + CONTEXT_BYTES, how


def training_processes(train: Any) -> int:
    """Training processes on this machine: train.processes, or what train.accelerate_config launches here
    (its num_processes over its num_machines). An unreadable config counts as train.processes: accelerate
    itself reports it when the round launches."""
    processes = max(1, getattr(train, "processes", 1) or 1)
    config_path = getattr(train, "accelerate_config", None)
    if not config_path:
        return processes
    try:
        import yaml

        config = yaml.safe_load(Path(config_path).expanduser().read_text()) or {}
        total, machines = int(config.get("num_processes") or processes), int(config.get("num_machines") or 1)
    except Exception:  # unreadable or not YAML: the launch reports it in accelerate's own words
        return processes
    return max(1, total // max(1, machines))


def plan(gpus: list[Gpu], settings: Any, model_bytes: int, trains: bool,
         shape: tuple[int, int] | None = None) -> GpuPlan:
    """The plan for these GPUs (visible_gpus()), settings (serve.devices, train.devices,
    serve.gpu_memory_utilization, serve.sleep_between_rounds, serve.tensor_parallel_size, train.batch_size and
    the row limit) and a model of `model_bytes` and `shape` (model_shape()); `trains`: the run trains between
    rounds. Raises AlightError when the model cannot fit."""
    if not gpus:
        return GpuPlan(lines=["no GPU: vLLM and training run on the CPU"])
    serve, train = settings.serve, settings.train
    count = len(gpus)

    def pick(numbers: list[int], what: str) -> list[Gpu]:
        bad = [n for n in numbers if not 0 <= n < count]
        if bad:
            raise AlightError(f"{what} {numbers}: this machine shows {count} GPU(s) (0..{count - 1})",
                              f"set {what} to GPUs that exist (CUDA_VISIBLE_DEVICES narrows what alight sees)")
        return [gpus[n] for n in numbers]

    tp = serve.tensor_parallel_size or 1
    replicas = getattr(serve, "replicas", 1) or 1
    vllm_gpus = pick(list(serve.devices), "serve.devices") if serve.devices else gpus[:tp * replicas]
    if len(vllm_gpus) < tp * replicas:
        raise AlightError(f"serve.replicas {replicas} x serve.tensor_parallel_size {tp} needs {tp * replicas} GPU(s) "
                          f"for vLLM; it has {len(vllm_gpus)}",
                          "lower serve.replicas or serve.tensor_parallel_size, or give serve.devices more GPUs")
    ranks = training_processes(train) if trains else 1
    free = [g for g in gpus if g not in vllm_gpus]
    if train.devices:
        chosen = pick(list(train.devices), "train.devices")
        if len(chosen) < ranks:
            raise AlightError(
                f"{ranks} training processes need {ranks} GPUs, one each; train.devices {list(train.devices)} "
                f"gives {len(chosen)}", f"list {ranks} GPUs in train.devices, or lower train.processes to "
                f"{len(chosen)}")
        trainers = chosen[:ranks]
    elif len(free) >= ranks:
        trainers = free[len(free) - ranks:]
    elif ranks == 1:
        trainers = vllm_gpus[:1]
    else:
        raise AlightError(
            f"{ranks} training processes need {ranks} GPUs, one each: this machine shows {count} "
            f"(0..{count - 1}), vLLM takes {', '.join(g.id for g in vllm_gpus)} and "
            + (f"{', '.join(g.id for g in free)} {'is' if len(free) == 1 else 'are'} free" if free else "none is free"),
            f"lower train.processes to {max(1, len(free))}, give vLLM fewer GPUs (serve.devices, serve.replicas), "
            "or name the training GPUs in train.devices (vLLM's own, with sleep mode, if they must be shared)")
    out = GpuPlan(serve_devices=[g.id for g in vllm_gpus], train_devices=[g.id for g in trainers] if trains else [])
    out.lines.append(f"vLLM on GPU {', '.join(g.id for g in vllm_gpus)}"
                     + (f"; training on GPU {', '.join(g.id for g in trainers)}"
                        + (f" ({ranks} processes, one GPU each)" if ranks > 1 else "") if trains else ""))
    if train.devices and len(train.devices) > ranks:
        unused = ", ".join(str(n) for n in list(train.devices)[ranks:])
        out.lines.append(f"train.devices {unused} unused: {ranks} training process(es) take one GPU each")
    out.shared = trains and any(g in vllm_gpus for g in trainers)
    out.sleep = serve.sleep_between_rounds == "on" or (serve.sleep_between_rounds == "auto" and out.shared)
    out.gpu_memory_utilization = serve.gpu_memory_utilization
    if not out.shared:
        return out
    trainer = min(trainers, key=lambda g: g.total_bytes)  # each rank holds a whole copy: the smallest GPU decides
    total = trainer.total_bytes
    trainer_needs, counted = trainer_bytes(settings, model_bytes, shape)
    vllm_needs = int(model_bytes * 1.2) + CONTEXT_BYTES     # weights + a KV cache worth having
    size = f"{model_bytes / GIB:.1f} GiB of weights on a {total / GIB:.0f} GiB GPU"
    out.lines.append(f"the trainer needs about {trainer_needs / GIB:.1f} GiB: weights, {counted}, CUDA context")
    # Fewer tokens per pass helps only where the weights leave room for some activations.
    fewer_rows = ("lower train.batch_size (rows per forward pass; raise train.grad_accum to keep the rows per step) "
                  "or the row limit (train.max_row_tokens), " if model_bytes + CONTEXT_BYTES < total else "")
    if out.sleep:
        fraction = out.gpu_memory_utilization or SLEEPING_FRACTION
        if trainer_needs > total or vllm_needs > fraction * total:
            raise AlightError(f"the model does not fit this GPU for both serving and training: {size}; the trainer "
                              f"needs about {trainer_needs / GIB:.1f} GiB ({counted})",
                              f"{fewer_rows}use a smaller model, or a GPU with more memory (train.devices: "
                              "another GPU)")
        out.gpu_memory_utilization = fraction
        out.lines.append(f"one GPU shared: vLLM sleeps while the trainer trains; gpu_memory_utilization {fraction}")
        return out
    if trainer_needs >= total:
        raise AlightError(
            f"the trainer alone does not fit this GPU: {size}; it needs about {trainer_needs / GIB:.1f} GiB "
            f"(weights, {counted}, CUDA context) before vLLM takes any",
            f"{fewer_rows}use a smaller model, or give training its own larger GPU (train.devices)")
    room = total - trainer_needs
    fraction = out.gpu_memory_utilization or round(max(0.0, room / total - 0.01), 2)
    if fraction * total < vllm_needs or (1 - fraction) * total < trainer_needs:
        raise AlightError(
            f"vLLM and the trainer cannot share this GPU without sleep mode: {size}; vLLM at "
            f"gpu_memory_utilization {fraction} leaves {(1 - fraction) * total / GIB:.1f} GiB, the trainer needs about "
            f"{trainer_needs / GIB:.1f} GiB and vLLM about {vllm_needs / GIB:.1f} GiB",
            f"set serve.sleep_between_rounds: on (or auto), give training its own GPU (train.devices), "
            f"{fewer_rows}or use a smaller model")
    out.gpu_memory_utilization = fraction
    out.lines.append(f"one GPU shared without sleep mode: vLLM takes {fraction} of it, the rest is the trainer's")
    return out


def oom_hint(settings: Any) -> str:
    """What to change after the trainer ran out of GPU memory."""
    serve = settings.serve
    return (f"lower train.batch_size (now {settings.train.batch_size}) or train.max_row_tokens; with one GPU set "
            f"serve.sleep_between_rounds: on (now {serve.sleep_between_rounds}) or lower serve.gpu_memory_utilization"
            f" (now {serve.gpu_memory_utilization or 'vLLM default'}); or give training its own GPU (train.devices)."
            " Rerun the same command to resume: the round trains again")
