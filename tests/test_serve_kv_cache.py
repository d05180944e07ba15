"""The CPU KV-cache size follows the context a run serves (serve/kv_cache.py). That vLLM really starts with it at a
long context is shown by the suite's shared tiny server (tests/vllm_support.py: 64k tokens in float32, which the
old fixed 256 MiB could not hold: vLLM refused to start, "To serve at least one request ...")."""

from __future__ import annotations

import json
from pathlib import Path

from agentlightning_cli.serve.kv_cache import FLOOR_BYTES, MARGIN, cache_dtype_bytes, cpu_kv_cache_bytes

TINY = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "hidden_size": 256}
SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}


def _model(tmp_path: Path, config: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_one_whole_sequence_of_the_context_fits_with_room_for_block_rounding(tmp_path: Path) -> None:
    tiny = _model(tmp_path, TINY)
    # 2 (K, V) x 4 layers x 2 KV heads x 64 dims x 4 bytes = 4,096 bytes a token in float32.
    got = cpu_kv_cache_bytes(tiny, 65536, ["--dtype", "float32"], None)
    assert got == int(4096 * 65536 * MARGIN) > FLOOR_BYTES  # 256 MiB exactly held 65,408 tokens, not 65,536
    assert cpu_kv_cache_bytes(tiny, 131072, ["--dtype=float32"], None) == int(4096 * 131072 * MARGIN)
    # dtype auto: vLLM casts a float32 checkpoint to 16 bits, and the cache follows: half, here under the floor.
    assert cache_dtype_bytes([]) == 2 and cpu_kv_cache_bytes(tiny, 65536, [], None) == FLOOR_BYTES


def test_head_dim_from_the_hidden_size_and_a_long_harness_context_on_a_real_models_shape(tmp_path: Path) -> None:
    smol = _model(tmp_path, SMOLLM2)  # head_dim = 576 / 9 = 64: 2 x 30 x 3 x 64 x 2 = 23,040 bytes a token
    assert cpu_kv_cache_bytes(smol, 8192, [], None) == FLOOR_BYTES  # 207 MiB: a short context keeps the floor
    assert cpu_kv_cache_bytes(smol, 98304, [], None) == int(23040 * 98304 * MARGIN)  # Claude Code's 96k: ~2.3 GiB


def test_a_configured_size_wins_and_an_unreadable_config_keeps_the_floor(tmp_path: Path) -> None:
    assert cpu_kv_cache_bytes(_model(tmp_path, TINY), 65536, ["--dtype", "float32"], 123) == 123
    assert cpu_kv_cache_bytes(tmp_path / "missing", 65536, [], None) == FLOOR_BYTES
    assert cpu_kv_cache_bytes(_model(tmp_path, {"model_type": "odd"}), 65536, [], None) == FLOOR_BYTES
    # A multimodal model's language half carries the layout.
    assert cpu_kv_cache_bytes(_model(tmp_path, {"text_config": TINY}), 65536, ["--dtype", "float32"], None) == int(
        4096 * 65536 * MARGIN)
