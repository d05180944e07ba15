"""Serving: the vLLM process, LoRA adapters, the embedded tiny model and `alight serve`."""
