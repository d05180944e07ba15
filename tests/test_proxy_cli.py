"""`alight proxy` as a user runs it: a separate process, ad-hoc episodes, a banner, Ctrl-C stops it cleanly."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai
from google import genai
from google.genai import types as genai_types

from agentlightning_cli.store import Store
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _banner(proc: subprocess.Popen) -> str:
    """The proxy's banner, read from its stderr up to its last line (Ctrl-C stops)."""
    banner = []
    while not any("Ctrl-C" in line for line in banner):
        line = proc.stderr.readline()
        assert line, f"proxy exited early: {''.join(banner)}"
        banner.append(line)
    return "".join(banner)


def test_alight_proxy_records_ad_hoc_episodes_and_stops_on_ctrl_c(tmp_path):
    alight = shutil.which("alight", path=str(Path(sys.executable).parent))
    port, store_dir = _free_port(), tmp_path / "store"
    with FakeVLLM(FakeScript(turns=["hi from upstream"])) as fake:
        proc = subprocess.Popen([alight, "proxy", "--upstream", fake.url, "--port", str(port), "--store",
                                 str(store_dir)], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            text = _banner(proc)
            assert f"http://127.0.0.1:{port}/e/<episode>/v1" in text and "ad-hoc" in text
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/e/demo-1/v1", api_key="s3cret", max_retries=0)
            reply = client.chat.completions.create(model="base", messages=[{"role": "user", "content": "hey"}])
            assert reply.choices[0].message.content == "hi from upstream"
            intruder = openai.OpenAI(base_url=client.base_url, api_key="other", max_retries=0)
            try:
                intruder.chat.completions.create(model="base", messages=[{"role": "user", "content": "hey"}])
                raise AssertionError("a second key was accepted")
            except openai.AuthenticationError:
                pass
            # Google's SDK at the Gemini base URL the banner prints
            assert f"GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:{port}/e/demo-1" in text
            gem = genai.Client(api_key="s3cret", http_options=genai_types.HttpOptions(
                base_url=f"http://127.0.0.1:{port}/e/gem-1", retry_options=genai_types.HttpRetryOptions(attempts=1)))
            assert gem.models.generate_content(model="base", contents="hey").text == "hi from upstream"
        finally:
            proc.send_signal(signal.SIGINT)
            started = time.monotonic()
            code = proc.wait(20)
        assert code == 130 and time.monotonic() - started < 15  # Ctrl-C: clean stop, then the CLI's 130
    with Store.open(store_dir) as store:
        [call] = store.get_calls("demo-1")
        assert call.status == "ok" and call.model == "base"
        assert json.loads(call.client_request)["messages"][0]["content"] == "hey"
        [gem_call] = store.get_calls("gem-1")
        assert gem_call.protocol == "gemini-generate-content" and gem_call.status == "ok"


def test_alight_proxy_rejects_an_upstream_that_is_not_a_url(tmp_path):
    alight = shutil.which("alight", path=str(Path(sys.executable).parent))
    done = subprocess.run([alight, "proxy", "--upstream", "localhost:8000", "--store", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "--upstream must be an http://" in done.stderr


def test_alight_proxy_spreads_ad_hoc_episodes_over_several_upstreams(tmp_path):
    alight = shutil.which("alight", path=str(Path(sys.executable).parent))
    port, store_dir = _free_port(), tmp_path / "store"
    with FakeVLLM(FakeScript(turns=["from a"])) as a, FakeVLLM(FakeScript(turns=["from b"])) as b:
        proc = subprocess.Popen([alight, "proxy", "--upstream", a.url, "--upstream", b.url + "/v1", "--port",
                                 str(port), "--store", str(store_dir)], stderr=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert f"-> {a.url}, {b.url}" in _banner(proc)
            answers = []
            for episode in ("one", "two"):
                client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/e/{episode}/v1", api_key="k", max_retries=0)
                for _ in range(2):  # an episode stays where its first call went
                    reply = client.chat.completions.create(model="base", messages=[{"role": "user", "content": "x"}])
                    answers.append(reply.choices[0].message.content)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(20)
    assert answers == ["from a", "from a", "from b", "from b"]
