"""vLLM servers alight did not start, trained between rounds: `alight run --upstream URL [--upstream URL ...]
--model DIR --rounds N` (e.g. vLLM on GPU nodes, the head training).

The trainer trains on DIR (the model the servers serve); each round's adapter is written to the run folder's
`adapters/round-N/` and loaded on every server over vLLM's own API before the proxy switches to it, and unloaded
from all once its requests are done, as with servers alight starts (policy.PolicyServer). What the servers need:
`--enable-lora`, a `--max-lora-rank` of at least the training rank (train.lora_rank; 32 for a real model), the
environment VLLM_ALLOW_RUNTIME_LORA_UPDATING=1, and the run folder at the same path (a shared filesystem): vLLM
reads an adapter from the path it is given.
"""

from __future__ import annotations

from pathlib import Path

from agentlightning_cli.errors import AlightError
from agentlightning_cli.local_http import is_loopback
from agentlightning_cli.serve.adapters import AdapterClient

UNKEYED = ("{urls}: reached over the network with no API key: anyone who reaches {them} can load or unload adapters, "
           "and replace policy-rN in the middle of a round")
KEY_FIX = ("start vLLM with --api-key KEY (or VLLM_API_KEY=KEY in its environment) and give alight the same key: "
           "ALIGHT_SERVE__API_KEY=KEY (serve.api_key)")


def unkeyed_servers(urls: list[str], api_key: str | None, trains: bool) -> str | None:
    """Servers alight did not start, beyond loopback, without an API key: AlightError for a run that trains (it
    loads its adapters there), else the warning to print; None when they are on loopback or keyed."""
    remote = [u for u in urls if not is_loopback(u)]
    if api_key or not remote:
        return None
    what = UNKEYED.format(urls=", ".join(remote), them="them" if len(remote) > 1 else "it")
    if trains:
        raise AlightError(what, KEY_FIX)
    return f"{what}; {KEY_FIX}"


class RemotePolicy:
    """The part of PolicyServer a run's rounds use (adapter_dir, load_as, unload, sleeps), over given servers."""

    starts_servers = False
    """Nothing to watch or stop: the servers are the user's (alight run's vLLM watch is for its own)."""

    def __init__(self, run_dir: Path, base_urls: list[str], served_model: str, model: Path,
                 api_key: str | None = None):
        self.run_dir = Path(run_dir)
        self.api_key = api_key
        """The servers' API key (serve.api_key): sent with every adapter call, and by the proxy on every request."""
        self.base_urls = list(base_urls)
        self.policy: str | None = served_model
        """Round 0 samples the servers' own model (no adapter); later rounds their adapters."""
        self.model = Path(model)
        self._loaded: set[str] = set()

    def adapter_dir(self, round_index: int) -> Path:
        return self.run_dir / "adapters" / f"round-{round_index}"

    def load_as(self, name: str, path: Path) -> str:
        for url in self.base_urls:
            try:
                AdapterClient(url, api_key=self.api_key).load(name, path)
            except AlightError as exc:
                raise AlightError(f"{url}: {exc.message}",
                                  "the servers need --enable-lora, a --max-lora-rank of at least train.lora_rank, "
                                  "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1, and this run's folder at the same path "
                                  f"({self.run_dir})") from exc
        self._loaded.add(name)
        self.policy = name
        return name

    def unload(self, name: str) -> None:
        if name not in self._loaded:
            return  # the servers' own model (round 0's policy) is theirs, never unloaded
        for url in self.base_urls:
            AdapterClient(url, api_key=self.api_key).unload(name)
        self._loaded.discard(name)

    @property
    def sleeps(self) -> bool:
        return False
