"""vLLM lifecycle (vllm.py), the policy server with its round adapters (policy.py, adapters.py), the embedded
tiny model (tiny_model.py) and what `alight serve` prints (banner.py). The command itself is commands/serve.py.

May import: config, errors, process. Never the proxy, the harness package or commands/.
"""
