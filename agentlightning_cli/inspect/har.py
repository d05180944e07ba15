"""HAR 1.2 export: one entry per call, the request and response as the client saw them, one page per episode.

Readable by mitmproxy (`mitmweb -r FILE.har`), browsers' devtools and other HAR tools. What the store does not
keep is left out or marked: response headers are not recorded, so each response carries only the content type
its protocol implies; request bodies are stored decoded, so content-encoding/length headers are dropped.
Custom `_alight` fields (HAR allows `_`-prefixed ones) carry the episode, round, task and token counts.
The file is written entry by entry, so a run of any size exports in constant memory.
"""

from __future__ import annotations

import base64
from datetime import datetime, timezone
from typing import IO, Any
from urllib.parse import parse_qsl, urlsplit

from agentlightning_cli import __version__
from agentlightning_cli.inspect.export import dumps, episode_context, iter_calls
from agentlightning_cli.inspect.source import RunSource
from agentlightning_cli.store import Call, CallSummary, EpisodeSummary

_STATUS_TEXT = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 413: "Payload Too Large",
                429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
                504: "Gateway Timeout"}
_DROPPED_HEADERS = {"content-length", "content-encoding", "transfer-encoding"}


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds")


def _ms(seconds: float | None) -> float:
    return 0.0 if seconds is None else round(max(seconds, 0.0) * 1000, 3)


def _body(data: bytes | None) -> tuple[str, str | None]:
    """(text, encoding): UTF-8 text as is, anything else base64 (HAR's `encoding` field)."""
    if data is None:
        return "", None
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), "base64"


def _response_type(call: Call) -> str:
    if call.stream and call.http_status == 200 and (call.response or b"").lstrip()[:1] != b"{":
        return "text/event-stream"
    return "application/json"


def entry(source: RunSource, ep: EpisodeSummary, summary: CallSummary, call: Call) -> dict[str, Any]:
    host = call.client_headers.get("host") or "127.0.0.1"
    url = f"http://{host}/e/{call.episode_id}{call.path}"
    headers = [{"name": k, "value": v} for k, v in call.client_headers.items() if k.lower() not in _DROPPED_HEADERS]
    request_text, request_encoding = _body(call.client_request)
    response_text, response_encoding = _body(call.response)
    mime = _response_type(call)
    content: dict[str, Any] = {"size": len(call.response or b""), "mimeType": mime, "text": response_text}
    if response_encoding:
        content["encoding"] = response_encoding
    post: dict[str, Any] = {"mimeType": call.client_headers.get("content-type", "application/json"),
                            "text": request_text}
    if request_encoding:  # HAR 1.2 has no encoding for postData: say so in a comment
        post["comment"] = "not UTF-8: text is base64 of the exact bytes"
    total = _ms(call.ended_at - call.started_at)
    wait = _ms(call.first_byte_at - call.started_at) if call.first_byte_at else total
    context = episode_context(ep, source.run_name(ep.episode.run_id))
    return {
        "pageref": call.episode_id,
        "startedDateTime": iso(call.started_at),
        "time": total,
        "request": {"method": call.method, "url": url, "httpVersion": "HTTP/1.1", "cookies": [], "headers": headers,
                    "queryString": [{"name": k, "value": v} for k, v in parse_qsl(urlsplit(call.path).query)],
                    "postData": post, "headersSize": -1, "bodySize": len(call.client_request)},
        "response": {"status": call.http_status, "statusText": _STATUS_TEXT.get(call.http_status, ""),
                     "httpVersion": "HTTP/1.1", "cookies": [], "headers": [{"name": "content-type", "value": mime}],
                     "content": content, "redirectURL": "", "headersSize": -1, "bodySize": len(call.response or b"")},
        "cache": {},
        "timings": {"blocked": -1, "dns": -1, "connect": -1, "ssl": -1, "send": 0, "wait": wait,
                    "receive": round(max(total - wait, 0.0), 3)},
        "_alight": {"call_id": call.id, "seq": call.seq, "episode_id": call.episode_id, "run": context["run"],
                    "round": context["round"], "task_id": context["task_id"], "attempt": context["attempt"],
                    "harness": context["harness"], "reward": context["reward"], "protocol": call.protocol,
                    "status": call.status, "stream": call.stream, "client_model": call.client_model,
                    "model": call.model, "finish_reason": call.finish_reason, "prompt_tokens": summary.prompt_len,
                    "completion_tokens": summary.completion_len, "usage": call.usage, "sampling": call.sampling,
                    "dropped": call.dropped, "error": call.error},
    }


def page(ep: EpisodeSummary) -> dict[str, Any]:
    e = ep.episode
    title = f"{e.task_id or 'ad-hoc'} attempt {e.attempt} · {e.harness or '-'} · {e.id}"
    return {"startedDateTime": iso(ep.first_call_at or e.created_at), "id": e.id, "title": title, "pageTimings": {}}


def write_har(source: RunSource, episodes: list[EpisodeSummary], out: IO[bytes]) -> int:
    """Stream the HAR document to `out`; returns the number of entries."""
    creator = {"name": "alight", "version": __version__, "comment": f"run {source.name}"}
    out.write(b'{"log":{"version":"1.2","creator":' + dumps(creator) + b',"entries":[')
    count = 0
    with_calls = []
    for ep, summary, call in iter_calls(source, episodes):
        if not with_calls or with_calls[-1] is not ep:
            with_calls.append(ep)
        out.write((b"," if count else b"") + b"\n" + dumps(entry(source, ep, summary, call)))
        count += 1
    out.write(b'\n],"pages":' + dumps([page(ep) for ep in with_calls]) + b"}}\n")
    return count
