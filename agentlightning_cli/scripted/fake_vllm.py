"""A scripted stand-in for vLLM's OpenAI server, byte-compatible with vLLM 0.32's chat-completions wire format.

Non-stream bodies are vLLM's full `model_dump()` (nulls included); stream chunks follow its
`model_dump_json(exclude_unset=True)` shapes: the first chunk carries `prompt_token_ids`, each later chunk
`choices[0].token_ids` and `logprobs`, then a usage chunk (with `stream_options.include_usage`) and `[DONE]`.

Replies come from a script: a list of turns (picked by how many assistant messages the request already
holds, so concurrent conversations stay deterministic) or a callable(request_body) -> turn. A turn is a
string, or {"content", "tool_calls": [{"name", "arguments"}], "reasoning", "finish_reason"}, or
{"error": {"status", "message"}}. Run in a thread (`FakeVLLM(script).start()`) or as
`python -m agentlightning_cli.scripted.fake_vllm --port P --script FILE`.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from aiohttp import web

from agentlightning_cli.scripted import fake_tokens as tok
from agentlightning_cli.scripted.fake_chunks import chat_response, stream_events

Turn = str | dict[str, Any]


@dataclass
class FakeScript:
    turns: list[Turn] = field(default_factory=lambda: ["Hello from the fake model."])
    reply: Callable[[dict], Turn] | None = None
    """Overrides `turns` when set."""
    status: int | None = None
    """Answer every chat request with this HTTP error status (failure injection)."""
    delay_s: float = 0.0
    """Wait before answering (before the first byte for streams)."""
    capacity: int | None = None
    """Requests served at once (their delay_s running); the others queue, as on a model server whose batch is
    full. None: no limit."""
    drop_after_events: int | None = None
    """Streams: close the connection abruptly after this many events."""
    stream_events: int | None = None
    """Streams: spread the completion over about this many content events (default: one per token)."""
    event_delay_s: float = 0.0
    served_models: list[str] = field(default_factory=lambda: ["base"])
    any_model: bool = False
    """Answer whatever model name is asked (vLLM itself answers 404 for names it does not serve)."""
    max_model_len: int = 4096

    def turn_for(self, body: dict) -> dict:
        if self.reply is not None:
            turn = self.reply(body)
        else:
            done = sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
            turn = self.turns[min(done, len(self.turns) - 1)]
        return {"content": turn} if isinstance(turn, str) else dict(turn)

    @classmethod
    def from_file(cls, path: str) -> "FakeScript":
        import yaml

        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
        if isinstance(data, list):
            data = {"turns": data}
        return cls(**data)


def _error(status: int, message: str) -> web.Response:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.json_response(body, status=status)


class FakeVLLM:
    def __init__(self, script: FakeScript | None = None, host: str = "127.0.0.1", port: int = 0):
        self.script = script or FakeScript()
        self.host, self.port = host, port
        self.requests: list[dict] = []
        """Every chat request body received, in arrival order (tests inspect what the proxy sent)."""
        self.adapters: dict[str, str] = {}
        self.events: list[str] = []
        """Engine-level requests in arrival order, as "sleep level=1", "wake_up", "load NAME", "unload NAME"."""
        self.sleeping = False
        self._capacity: asyncio.Semaphore | None = None
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_post("/v1/load_lora_adapter", self.load_adapter)
        app.router.add_post("/v1/unload_lora_adapter", self.unload_adapter)
        # vLLM's sleep mode (development endpoints: vLLM serves them with VLLM_SERVER_DEV_MODE=1).
        app.router.add_post("/sleep", self.sleep)
        app.router.add_post("/wake_up", self.wake_up)
        app.router.add_get("/is_sleeping", self.is_sleeping)
        return app

    async def sleep(self, request: web.Request) -> web.Response:
        level = int(request.query.get("level", "1"))
        self.events.append(f"sleep level={level}")
        self.sleeping = True
        return web.json_response({"status": "sleeping", "level": level})

    async def wake_up(self, request: web.Request) -> web.Response:
        self.events.append("wake_up")
        self.sleeping = False
        return web.json_response({"status": "awake", "tags": None})

    async def is_sleeping(self, request: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": self.sleeping})

    async def start_async(self) -> "FakeVLLM":
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop_async(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start(self) -> "FakeVLLM":
        """Serve from a background thread with its own event loop (usable from sync and async tests)."""
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self.start_async())  # type: ignore[union-attr]
            ready.set()
            self._loop.run_forever()  # type: ignore[union-attr]

        self._thread = threading.Thread(target=run, name="fake-vllm", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake vLLM did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop_async(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)  # type: ignore[union-attr]
        self._loop.close()
        self._loop = None

    def __enter__(self) -> "FakeVLLM":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not valid JSON")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' is required")
        self.requests.append(body)
        if self.sleeping:  # a sleeping engine has no weights on the device: a request now is alight's bug
            return _error(500, "the engine is sleeping")
        script = self.script
        if script.capacity is not None and self._capacity is None:
            self._capacity = asyncio.Semaphore(script.capacity)
        if script.delay_s:
            if self._capacity is not None:
                async with self._capacity:
                    await asyncio.sleep(script.delay_s)
            else:
                await asyncio.sleep(script.delay_s)
        if script.status:
            return _error(script.status, f"injected failure {script.status}")
        turn = script.turn_for(body)
        if "error" in turn:
            return _error(int(turn["error"].get("status", 500)), str(turn["error"].get("message", "scripted error")))
        model = body.get("model") or script.served_models[0]
        if not script.any_model and model not in script.served_models and model not in self.adapters:
            return _error(404, f"The model `{model}` does not exist.")
        prompt_ids = tok.render_prompt(body["messages"], body.get("tools"))
        request_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if not body.get("stream"):
            return web.json_response(chat_response(body, turn, prompt_ids, request_id, created, model))
        resp = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        events = stream_events(body, turn, prompt_ids, request_id, created, model, script.stream_events)
        for n, event in enumerate(events):
            if script.drop_after_events is not None and n >= script.drop_after_events:
                request.transport.abort()  # type: ignore[union-attr]
                return resp
            await resp.write(event)
            if script.event_delay_s:
                await asyncio.sleep(script.event_delay_s)
        await resp.write_eof()
        return resp

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        if "messages" in body:
            ids = tok.render_prompt(body["messages"], body.get("tools"), body.get("add_generation_prompt", True))
        else:
            ids = tok.text_ids(str(body.get("prompt", "")))
        out: dict[str, Any] = {"count": len(ids), "max_model_len": self.script.max_model_len, "tokens": ids}
        out["token_strs"] = [tok.token_text(i) for i in ids] if body.get("return_token_strs") else None
        return web.json_response(out)

    async def models(self, request: web.Request) -> web.Response:
        now = int(time.time())
        data = [{"id": m, "object": "model", "created": now, "owned_by": "vllm", "root": m, "parent": None,
                 "max_model_len": self.script.max_model_len} for m in self.script.served_models]
        data += [{"id": n, "object": "model", "created": now, "owned_by": "vllm", "root": p,
                  "parent": self.script.served_models[0], "max_model_len": self.script.max_model_len}
                 for n, p in self.adapters.items()]
        return web.json_response({"object": "list", "data": data})

    async def load_adapter(self, request: web.Request) -> web.Response:
        body = await request.json()
        name = body["lora_name"]
        self.events.append(f"load {name}")
        if self.sleeping:
            return _error(500, "the engine is sleeping: wake it before loading an adapter")
        if name in self.adapters and not body.get("load_inplace"):
            return _error(400, f"The lora adapter '{name}' has already been loaded. If you want to load the "
                               "adapter in place, set 'load_inplace' to True.")
        self.adapters[name] = body.get("lora_path", "")
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def unload_adapter(self, request: web.Request) -> web.Response:
        name = (await request.json())["lora_name"]
        self.events.append(f"unload {name}")
        if self.adapters.pop(name, None) is None:
            return _error(404, f"The lora adapter '{name}' cannot be found.")
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")


def main(argv: list[str] | None = None) -> None:
    import argparse
    import importlib

    parser = argparse.ArgumentParser(description="Scripted fake vLLM chat-completions server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--script", help="YAML/JSON file: a list of turns or FakeScript fields")
    parser.add_argument("--reply", help="module:function taking the request body and returning a turn")
    args = parser.parse_args(argv)
    script = FakeScript.from_file(args.script) if args.script else FakeScript()
    if args.reply:
        mod, _, fn = args.reply.partition(":")
        script.reply = getattr(importlib.import_module(mod), fn)
    fake = FakeVLLM(script, args.host, args.port)

    async def serve() -> None:
        await fake.start_async()
        print(f"fake vLLM listening on {fake.url}", flush=True)  # the real port, also with --port 0
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass

if __name__ == "__main__":
    main()
