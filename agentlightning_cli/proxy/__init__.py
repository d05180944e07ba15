"""The recording proxy between a harness and vLLM (see server.py)."""

from agentlightning_cli.proxy.server import Proxy

__all__ = ["Proxy"]
