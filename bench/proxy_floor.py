"""The floor under `alight proxy`'s CPU: a bare relay with the proxy's own HTTP server and upstream client
(or, with --engine aiohttp, the aiohttp server + client pair the proxy used before), no parsing, no
stripping, no recording. bench/proxy.py sends it the body the proxy would send vLLM (logprobs and token ids
on), so the difference between its CPU per request and the proxy's is the proxy's own work.

    python bench/proxy_floor.py --upstream http://127.0.0.1:8000 --port 0 [--engine lean|aiohttp]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys


async def serve_lean(upstream: str, port: int) -> tuple[int, object]:
    from agentlightning_cli.proxy.http_server import HTTPServer, Request, Response
    from agentlightning_cli.proxy.upstream import UpstreamPool

    pool = UpstreamPool(upstream)

    async def relay(request: Request):
        resp = await pool.post(request.path, request.body)
        try:
            kind = resp.headers.get("content-type", "application/json")
            if not kind.startswith("text/event-stream"):
                return Response(resp.status, await resp.read(), kind)
            out = request.start_stream(resp.status, {"Content-Type": kind})
            async for chunk in resp:
                await out.write(chunk)
            await out.write_eof()
            return out
        finally:
            resp.release()

    server = HTTPServer(relay, 64 << 20)
    _, bound = await server.start("127.0.0.1", port)

    async def close():
        server.stop_listening()
        server.close_connections()
        await pool.close()
    return bound, close


async def serve_aiohttp(upstream: str, port: int) -> tuple[int, object]:
    import aiohttp
    import yarl
    from aiohttp import web

    # As the proxy had it: one pooled session, no cookie jar, no auto headers, no decompression.
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256, ttl_dns_cache=300),
                                    auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                                    skip_auto_headers=("Accept-Encoding", "User-Agent"),
                                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))
    urls: dict[str, yarl.URL] = {}

    async def relay(request: web.BaseRequest) -> web.StreamResponse:
        url = urls.get(request.path) or urls.setdefault(request.path, yarl.URL(upstream + request.path))
        body = await request.read()
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
            kind = resp.headers.get("Content-Type", "application/json")
            if not kind.startswith("text/event-stream"):
                return web.Response(status=resp.status, body=await resp.read(), headers={"Content-Type": kind})
            out = web.StreamResponse(status=resp.status, headers={"Content-Type": kind})
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    runner = web.ServerRunner(web.Server(relay, access_log=None, auto_decompress=False))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close():
        await runner.cleanup()
        await session.close()
    return bound, close


async def serve(upstream: str, port: int, engine: str) -> None:
    bound, close = await (serve_lean if engine == "lean" else serve_aiohttp)(upstream, port)
    print(f"floor relay ({engine}) listening on http://127.0.0.1:{bound} -> {upstream}\nCtrl-C stops.", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--engine", choices=("lean", "aiohttp"), default="lean")
    args = parser.parse_args()
    try:  # the same event loop as `alight proxy`
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.upstream.rstrip("/"), args.port, args.engine))
    sys.exit(0)


if __name__ == "__main__":
    main()
