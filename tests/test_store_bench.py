"""The store benchmark runs, reads back exactly and meets its storage targets (a short episode here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_store_benchmark_meets_targets(tmp_path: Path):
    out = tmp_path / "store.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "store.py"), "--calls", "30", "--repeat", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "token ids" in result.stdout and "request bodies" in result.stdout
    data = json.loads(out.read_text())
    assert data["read_back_exact"] is True and data["calls"] == 30
    assert data["token_ids"]["ratio_vs_unique"] <= 1.3
    assert data["request_bodies"]["ratio_vs_unique"] <= 2.0
    assert data["token_ids"]["naive_over_stored"] > 5 and data["calls_per_second"] > 0
