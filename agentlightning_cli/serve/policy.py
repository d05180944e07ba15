"""The policy server: vLLM serving a base model with the current round's LoRA adapter under `policy-r{n}`.

Used by `alight serve` and `alight run`. Round 0 is a zero-initialised adapter (identical to the base model),
so from the first request on, every call goes to an adapter name and never to the base model.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from agentlightning_cli.config import Settings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.local_http import is_loopback_host
from agentlightning_cli.serve.adapters import (AdapterClient, adapter_rank, make_adapter, policy_name, rank_limit_for,
                                               training_rank)
from agentlightning_cli.serve.vllm import VLLMServer, beyond_loopback, post_json, sleep_mode


BUILT_IN = ("tiny", "smollm2")
"""Model names alight builds itself into ALIGHT_HOME/models/ (`alight model tiny|smollm2`); a folder of the same
name in the current directory wins over the built-in."""


def resolve_model(settings: Settings, model: Path | str | None = None) -> Path:
    """--model / serve.model if given (a local HF directory, a built-in name: tiny, smollm2, or a Hugging Face Hub
    id such as Qwen/Qwen2.5-Coder-7B-Instruct), else the embedded tiny model; a built-in is built once, a Hub model
    downloaded once into the Hub cache and read from there afterwards, offline too."""
    chosen = str(model or settings.serve.model or "tiny")
    home = Path(settings.home).expanduser()
    if chosen in BUILT_IN and Path(chosen).is_dir():
        return Path(chosen).resolve()
    if chosen == "smollm2":
        import sys

        from agentlightning_cli.serve.smollm2 import ensure_smollm2

        return ensure_smollm2(home, log=lambda line: print(f"alight: smollm2: {line}", file=sys.stderr, flush=True))
    if chosen == "tiny":
        from agentlightning_cli.serve.tiny_model import ensure_tiny_model

        return ensure_tiny_model(home)
    if not Path(chosen).expanduser().exists() and HUB_ID.fullmatch(chosen):
        return hub_model(chosen)
    return Path(chosen).expanduser().resolve()


HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


def hub_model(repo_id: str) -> Path:
    """A Hub model's folder in the Hub cache: the cached snapshot when there is one (no network), else downloaded
    once (weights, config, tokenizer). Offline without a cached copy: one clear error."""
    import sys

    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise AlightError(f"model {repo_id}: a Hugging Face Hub id needs huggingface_hub ({exc})",
                          "pip install 'agentlightning-cli[train]', or pass a local model directory") from None
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached yet (or partly): fetch it
        pass
    print(f"alight: fetching {repo_id} from the Hugging Face Hub (once; cached)", file=sys.stderr, flush=True)
    try:
        return Path(snapshot_download(repo_id))
    except Exception as exc:  # noqa: BLE001 - offline, unknown id, gated model: one clear error
        raise AlightError(f"model {repo_id}: not a local folder, not in the Hub cache, and the download failed: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                          "pass a local model directory, or check the id, your network and HF_TOKEN for gated "
                          "models (HF_HUB_OFFLINE=1 forbids downloads)") from None


class PolicyServer:
    """vLLM + adapters for one run directory. A context manager; stop() is idempotent and leaves no process."""

    starts_servers = True
    """alight run watches these servers (serve/remote_policy.RemotePolicy: servers it did not start)."""

    def __init__(self, settings: Settings, run_dir: Path, model: Path | str | None = None, port: int | None = None,
                 trains: bool = False):
        self.settings = settings
        self.trains = trains
        """Whether rounds train between them (alight run --rounds > 1): the GPU plan then places the trainer."""
        self.gpu_plan = None  # serve/gpu_plan.GpuPlan once started
        self.run_dir = Path(run_dir)
        self.model = resolve_model(settings, model)
        replicas = max(1, settings.serve.replicas)
        self.api_key = vllm_api_key(settings)
        logs = self.run_dir / "logs"
        # serve.replicas: one vLLM server each (its own port, log and GPUs); the proxy keeps an episode on one.
        self.servers = [VLLMServer(self.model, settings.serve, logs / ("vllm.log" if i == 0 else f"vllm-{i}.log"),
                                   port=port if i == 0 else None, api_key=self.api_key) for i in range(replicas)]
        self.vllm = self.servers[0]
        self.policy: str | None = None
        self.template_choice = None  # serve/template_choice.TemplateChoice once started

    @property
    def base_url(self) -> str:
        return self.vllm.base_url

    @property
    def base_urls(self) -> list[str]:
        """Every replica's URL (serve.replicas), the proxy's upstreams."""
        return [server.base_url for server in self.servers]

    def exit_code(self, url: str) -> int | None:
        """The exit code of the replica serving `url`, None while it runs (the proxy keeps an exited one out)."""
        for server in self.servers:
            if server.base_url == url and server.process is not None:
                return server.process.poll()
        return None

    def live(self) -> list[VLLMServer]:
        """The replicas whose process is still running."""
        return [s for s in self.servers if s.process is not None and s.process.poll() is None]

    def __enter__(self) -> "PolicyServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def adapter_dir(self, round_index: int) -> Path:
        return self.run_dir / "adapters" / f"round-{round_index}"

    def start(self) -> "PolicyServer":
        r0 = self.adapter_dir(0)
        if self.settings.serve.adapter is not None:
            r0 = self._given_adapter(Path(self.settings.serve.adapter))
        elif not (r0 / "adapter_config.json").is_file():
            # The zero adapter at the training rank (train.lora_rank), so round 0's training continues it as set.
            train = self.settings.train
            make_adapter(self.model, r0, rank=training_rank(self.model, self.settings), alpha=train.lora_alpha,
                         target_modules=list(train.target_modules))
        self.first_adapter = r0
        """Round 0's adapter: the zero one in the run folder, or the given one (what round 0's row records, so a
        run with --adapter --rounds N trains on from it)."""
        self._fit_rank(adapter_rank(r0))
        self._plan_gpus()
        self._choose_template()
        try:
            for server in self.servers:
                server.start(warm_up=False)
            self.load(0, r0)
            # Warm up through the adapter: the first LoRA request pays for slot setup, not a harness call.
            for server in self.servers:
                server.warm_up(self.policy)
        except BaseException:
            self.stop()
            raise
        return self

    def _given_adapter(self, path: Path) -> Path:
        """`--adapter DIR` (serve.adapter): a trained adapter served as policy-r0; vLLM's rank limit raised to fit."""
        from agentlightning_cli.serve.given_adapter import check_adapter_base

        return check_adapter_base(path, self.model)

    def _plan_gpus(self) -> None:
        """Where vLLM and the trainer run and vLLM's share of a shared GPU (serve/gpu_plan.py), applied before
        vLLM starts: its GPUs, fraction and sleep mode; the trainer's GPUs become this process's only visible ones
        (training runs in this process or its accelerate ranks, after this, and alight uses CUDA nowhere else)."""
        import os
        import sys

        from agentlightning_cli.serve.gpu_plan import model_shape, plan, visible_gpus, weights_bytes

        gpus = visible_gpus()
        if not gpus:
            return
        self.gpu_plan = chosen = plan(gpus, self.settings, weights_bytes(self.model), self.trains,
                                      model_shape(self.model))
        serve = self.settings.serve
        serve.gpu_memory_utilization = chosen.gpu_memory_utilization
        serve.sleep_between_rounds = "on" if chosen.sleep else "off"
        for server, devices in zip(self.servers, replica_devices(chosen.serve_devices, len(self.servers))):
            server.cuda_devices = devices
        if chosen.train_devices:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(chosen.train_devices)
        for line in chosen.lines:
            print(f"alight: GPU plan: {line}", file=sys.stderr, flush=True)

    def _fit_rank(self, rank: int) -> None:
        """vLLM's --max-lora-rank raised (never lowered) to serve an adapter of `rank`; later rounds keep it."""
        if rank > self.settings.serve.max_lora_rank:
            self.settings.serve.max_lora_rank = rank_limit_for(rank)

    def _choose_template(self) -> None:
        """serve.chat_template -> the --chat-template vLLM gets; the choice is written beside the run's store."""
        from agentlightning_cli.serve.template_choice import choose_template

        choice = choose_template(self.settings.serve.chat_template, self.model, self.run_dir)
        self.vllm.chat_template = choice.path
        self.template_choice = choice
        record = {"choice": choice.choice, "path": str(choice.path) if choice.path else None, "reason": choice.reason}
        (self.run_dir / "chat_template.json").write_text(json.dumps(record) + "\n", encoding="utf-8")

    def load(self, round_index: int, path: Path) -> str:
        """Load a new round's adapter (a new directory) under that round's name; returns the name. Unload old
        ones only after the proxy has drained requests that use them (see `unload`)."""
        return self.load_as(policy_name(round_index), path)

    def load_as(self, name: str, path: Path) -> str:
        """Load an adapter under a given name (a resumed round's recorded policy) on every running replica before
        it becomes the policy (no request goes to a replica without it); returns the name."""
        live = self.live() if len(self.servers) > 1 else self.servers
        if not live:
            raise AlightError("no vLLM replica is running to load the adapter on",
                              f"see {self.run_dir / 'logs'} (vllm*.log); rerun the same command to resume")
        for server in live:
            AdapterClient(server.base_url, api_key=self.api_key).load(name, path)
        self.policy = name
        return name

    def unload(self, name: str) -> None:
        """Unload everywhere (the proxy has drained the requests that used it)."""
        for server in (self.live() if len(self.servers) > 1 else self.servers):
            AdapterClient(server.base_url, api_key=self.api_key).unload(name)

    @property
    def sleeps(self) -> bool:
        """Whether this vLLM was started able to sleep (serve.sleep_between_rounds, as the GPU plan resolved it):
        rounds then sleep it while the trainer trains."""
        return sleep_mode(self.settings.serve)

    def sleep(self, level: int = 1) -> float:
        """vLLM's sleep (level 1: weights to CPU memory, KV cache freed, LoRA buffers kept; level 2 with LoRA
        crashes vLLM). Call only once nothing is in flight (the proxy drained). Returns the seconds it took."""
        started = time.monotonic()
        for server in self.live() or self.servers:
            post_json(f"{server.base_url}/sleep?level={level}", {}, timeout_s=self.settings.serve.startup_timeout_s,
                      api_key=self.api_key)
        return time.monotonic() - started

    def wake_up(self) -> float:
        """Back from sleep, before the next adapter is loaded and requests resume. Returns the seconds it took."""
        started = time.monotonic()
        for server in self.live() or self.servers:
            post_json(f"{server.base_url}/wake_up", {}, timeout_s=self.settings.serve.startup_timeout_s,
                      api_key=self.api_key)
        return time.monotonic() - started

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def replica_devices(devices: list[str], replicas: int) -> list[list[str] | None]:
    """The GPU plan's vLLM devices split evenly among the replicas, in order (each gets len/replicas of them);
    None for each when there are none (CPU)."""
    if not devices:
        return [None] * replicas
    if len(devices) % replicas:
        raise AlightError(f"serve.replicas {replicas} cannot share the {len(devices)} GPU(s) vLLM was given "
                          f"({', '.join(devices)}) evenly",
                          "give serve.devices a multiple of serve.replicas x serve.tensor_parallel_size GPUs")
    size = len(devices) // replicas
    return [devices[i * size:(i + 1) * size] for i in range(replicas)]


def vllm_api_key(settings: Settings) -> str | None:
    """The API key the vLLM servers alight starts get: serve.api_key (or VLLM_API_KEY) when set; else a fresh random
    one whenever vLLM or the proxy listens beyond loopback, so nobody who reaches vLLM can load or unload the policy
    adapters mid-round (a proxy reachable from elsewhere says that the network is shared); else none."""
    import os
    import secrets

    given = settings.serve.api_key or os.environ.get("VLLM_API_KEY") or None
    if given or (is_loopback_host(settings.proxy.host) and not beyond_loopback(settings.serve)):
        return given
    return "vk-" + secrets.token_urlsafe(24)
