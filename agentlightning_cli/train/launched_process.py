"""One process of a round trained under `accelerate launch` (train/launched.py starts them): each loads the
round's job from FOLDER and trains it with grpo.train (TRL and accelerate shard the rows); the main process
writes each step's metrics to FOLDER/steps.jsonl as it goes and the result to FOLDER/result.json."""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path


def main(folder: str) -> None:
    """One launched process: the same trainer in every process; the main one writes steps and the result."""
    from agentlightning_cli.train.grpo import train

    folder_path = Path(folder)
    with open(folder_path / "job.pkl", "rb") as fh:
        job = pickle.load(fh)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    print(f"alight train: process {rank + 1} of {world} ({len(job.rows)} rows)", file=sys.stderr, flush=True)
    main_process = rank == 0
    if main_process:
        steps = open(folder_path / "steps.jsonl", "a", encoding="utf-8")

        def on_step(entry: dict) -> None:
            steps.write(json.dumps(entry) + "\n")
            steps.flush()

        job.on_step = on_step
    result = train(job)
    if main_process:
        steps.close()
        done = {"steps": result.steps, "metrics": result.metrics, "importance": result.importance}
        partial = folder_path / "result.json.part"
        partial.write_text(json.dumps(done))
        partial.replace(folder_path / "result.json")


if __name__ == "__main__":
    main(sys.argv[1])
