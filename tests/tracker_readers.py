"""Read what alight logged back with each tracker's own reader: TensorBoard's EventAccumulator, MLflow's
MlflowClient, trackio's SQLiteStorage (in a subprocess: TRACKIO_DIR is read when trackio is imported), and wandb's
offline run files through wandb's own protobuf records. Each returns {metric: [(step, value), ...]} in log order.

wandb 0.31 no longer ships a Python reader for its offline `.wandb` files (wandb.sdk.internal.datastore is gone;
its Go core reads them), so `wandb_history` walks the file's framing (a 7-byte `:W&B` header, then the LevelDB log
format: 32 KiB blocks of records with a 7-byte header, FULL/FIRST/MIDDLE/LAST) and parses each record with wandb's
own `wandb_internal_pb2.Record`.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def mlflow_metrics(uri: str, run_id: str) -> dict[str, list[tuple[int, float]]]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    return {key: [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key),
                                                     key=lambda m: (m.step, m.timestamp))]
            for key in run.data.metrics}


def mlflow_runs(uri: str) -> list[str]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    return [r.info.run_id for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def trackio_metrics(trackio_dir: Path, project: str, run: str) -> dict[str, list[tuple[int, float]]]:
    code = ("import json, sys; from trackio.sqlite_storage import SQLiteStorage as S;"
            " print(json.dumps({'runs': S.get_runs(sys.argv[1]), 'logs': S.get_logs(sys.argv[1], sys.argv[2])},"
            " default=str))")
    out = subprocess.run([sys.executable, "-c", code, project, run], capture_output=True, text=True, check=True,
                         env={"TRACKIO_DIR": str(trackio_dir), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    data = json.loads(out.stdout.strip().splitlines()[-1])
    found: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row in data["logs"]:
        for key, value in row.items():
            if key not in ("step", "timestamp") and isinstance(value, (int, float)):
                found[key].append((row["step"], value))
    found["__runs__"] = data["runs"]  # type: ignore[assignment]
    return dict(found)


def _records(path: Path):
    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    pos, pending, block = 7, b"", 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
            pending = b""


def wandb_history(wandb_dir: Path) -> tuple[set[str], dict[str, list[tuple[int, float]]]]:
    """(the run ids in every offline run folder, {metric: [(alight/step, value)]}) over the folders in time order."""
    from wandb.proto import wandb_internal_pb2 as pb

    ids: set[str] = set()
    found: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for path in sorted(wandb_dir.glob("offline-run-*/run-*.wandb")):
        for raw in _records(path):
            record = pb.Record()
            record.ParseFromString(raw)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.add(record.run.run_id)
            elif kind == "history":
                row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                for key, value in row.items():
                    if not key.startswith("_") and key != "alight/step" and isinstance(value, (int, float)):
                        found[key].append((row["alight/step"], value))
    return ids, dict(found)
