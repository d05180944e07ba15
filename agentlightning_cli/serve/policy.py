"""The policy server: vLLM serving a base model with the current round's LoRA adapter under `policy-r{n}`.

Used by `alight serve` and `alight run`. Round 0 is a zero-initialised adapter (identical to the base model),
so from the first request on, every call goes to an adapter name and never to the base model.
"""

from __future__ import annotations

from pathlib import Path

from agentlightning_cli.config import Settings
from agentlightning_cli.serve.adapters import AdapterClient, make_adapter, policy_name
from agentlightning_cli.serve.vllm import VLLMServer


def resolve_model(settings: Settings, model: Path | str | None = None) -> Path:
    """--model / serve.model if given (any local HF directory), else the embedded tiny model, built once."""
    chosen = model or settings.serve.model
    if chosen:
        return Path(chosen).expanduser().resolve()
    from agentlightning_cli.serve.tiny_model import ensure_tiny_model

    return ensure_tiny_model(Path(settings.home).expanduser())


class PolicyServer:
    """vLLM + adapters for one run directory. A context manager; stop() is idempotent and leaves no process."""

    def __init__(self, settings: Settings, run_dir: Path, model: Path | str | None = None, port: int | None = None):
        self.settings = settings
        self.run_dir = Path(run_dir)
        self.model = resolve_model(settings, model)
        self.vllm = VLLMServer(self.model, settings.serve, self.run_dir / "logs" / "vllm.log", port=port)
        self.adapters: AdapterClient | None = None
        self.policy: str | None = None

    @property
    def base_url(self) -> str:
        return self.vllm.base_url

    def __enter__(self) -> "PolicyServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def adapter_dir(self, round_index: int) -> Path:
        return self.run_dir / "adapters" / f"r{round_index}"

    def start(self) -> "PolicyServer":
        r0 = self.adapter_dir(0)
        if not (r0 / "adapter_config.json").is_file():
            make_adapter(self.model, r0, rank=self.settings.serve.max_lora_rank)
        self.vllm.start(warm_up=False)
        try:
            self.adapters = AdapterClient(self.vllm.base_url)
            self.load(0, r0)
            # Warm up through the adapter: the first LoRA request pays for slot setup, not a harness call.
            self.vllm.warm_up(self.policy)
        except BaseException:
            self.vllm.stop()
            raise
        return self

    def load(self, round_index: int, path: Path) -> str:
        """Load a new round's adapter (a new directory) under a new name; returns the name. Unload old ones
        only after the proxy has drained requests that use them (see `unload`)."""
        name = policy_name(round_index)
        self.adapters.load(name, path)
        self.policy = name
        return name

    def unload(self, name: str) -> None:
        self.adapters.unload(name)

    def stop(self) -> None:
        self.vllm.stop()
