"""A small, realistic run written through the store API, for the inspect tests and demos.

Three rounds (the last still running), two tasks x two attempts per round over three harnesses and their
protocols (chat completions; Anthropic Messages and OpenAI Responses, streamed), tool calls and results, a call
whose prompt rewrote history and one whose prompt resent the previous reply as other ids (token-prefix breaks),
vLLM's token strings beside the logprobs of non-streamed answers, a 120 kB tool output, an upstream error, a failed
episode, rewards that rise per round, and training steps and a round summary (with its break log) as the trainer
writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from agentlightning_cli.store import CallRecord, Store, TrainRound, TrainStep
from agentlightning_cli.testing.call_bodies import Step, conversation

HARNESSES = [("mini-swe-agent", "openai-chat", False), ("claude-code", "anthropic-messages", True),
             ("codex", "openai-responses", True)]
TASKS = {"fix-add": "The function add() in calc.py returns a - b. Make it return a + b.",
         "fix-sub": "sub() in calc.py is wrong for negative numbers; fix it and keep the tests passing."}
BIG_OUTPUT = "\n".join(f"{i:06d}: log line from a very chatty test runner" for i in range(3000))  # ~120 kB


DEMO_PATCH = ("diff --git a/calc.py b/calc.py\nindex 1111111..2222222 100644\n--- a/calc.py\n+++ b/calc.py\n"
              "@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n")

def steps_for(task: str, stream: bool, big: bool = False) -> list[Step]:
    return [
        Step(text="Let me look at the code first.", tool=("bash", {"command": "cat calc.py"}),
             tool_output="def add(a, b):\n    return a - b\n", stream=stream),
        Step(tool=("bash", {"command": "pytest -q"}), tool_output=BIG_OUTPUT if big else "1 failed, 3 passed",
             stream=stream),
        Step(tool=("bash", {"command": "sed -i 's/a - b/a + b/' calc.py"}), tool_output="", stream=stream),
        Step(text=f"Fixed: {task} is done; the tests pass.", stream=stream),
    ]


@dataclass
class DemoRun:
    run_dir: Path
    run_id: str
    episodes: list[str] = field(default_factory=list)  # in creation order
    failed: str = ""  # the failed episode
    streamed_call: str = ""  # a streamed Anthropic call that made a tool call
    broken_prefix_episode: str = ""  # its third call's prompt rewrote history
    reply_break_episode: str = ""  # its third call's prompt resent the second call's reply with another id
    big_call: str = ""  # a call whose prompt holds a 120 kB tool output


_PIECES = [" the", " fix", "def", " add", "(", ")", ":", " return", " a", " +", " b", "\n", " test", "s", " pass",
           " calc", ".py", " Let", " me", " look"]


def token_text(token_id: int) -> str:
    """The string the demo's vLLM reports for a token id (stands in for the model's vocabulary)."""
    return _PIECES[token_id % len(_PIECES)]


def with_token_texts(record: CallRecord) -> None:
    """Add vLLM's `logprobs.content` (token string + logprob per sampled token) to a non-streamed answer, as a
    real upstream with `logprobs: true` returns it."""
    if not record.upstream_response or not record.completion_token_ids:
        return
    data = json.loads(record.upstream_response)
    data["choices"][0]["logprobs"] = {"content": [
        {"token": token_text(t), "logprob": lp, "bytes": list(token_text(t).encode()), "top_logprobs": []}
        for t, lp in zip(record.completion_token_ids, record.completion_logprobs)]}
    record.upstream_response = json.dumps(data).encode()


def build_demo_run(run_dir: Path, name: str = "demo") -> DemoRun:
    with Store.open(run_dir) as store:
        run = store.create_run(name, {"harness": "mixed", "rounds": 3})
        demo = DemoRun(run_dir=run_dir, run_id=run.id)
        clock = 1_750_000_000.0
        trainer_breaks: dict[int, list[dict]] = {0: [], 1: []}
        for r in range(3):
            rnd = store.create_round(run.id, r, f"policy-r{r}", None if r == 0 else f"adapters/round-{r}")
            for t, (task, prompt) in enumerate(TASKS.items()):
                for attempt in range(2):
                    harness, protocol, stream = HARNESSES[(t * 2 + attempt + r) % 3]
                    ep = store.create_episode(run.id, rnd.id, task, attempt, harness, f"key-{r}-{t}-{attempt}",
                                              workspace=f"/tmp/ws/{task}-{r}-{attempt}")
                    demo.episodes.append(ep.id)
                    steps = steps_for(task, stream, big=(r, t, attempt) == (0, 0, 0))
                    failed = (r, t, attempt) == (1, 1, 1)
                    if failed:
                        steps = [*steps[:1], Step(tool=("bash", {"command": "pytest"}), status="upstream_error",
                                                  stream=stream)]
                    records = conversation(ep.id, protocol, prompt, steps, start=clock, policy=f"policy-r{r}",
                                           seed=len(demo.episodes))
                    for record in records:
                        with_token_texts(record)
                    if (r, t, attempt) == (0, 1, 0):  # the harness rewrote its history before the third call
                        ids = records[2].prompt_token_ids
                        records[2].prompt_token_ids = ids[:10] + [7] + ids[11:]
                        demo.broken_prefix_episode = ep.id
                    if (r, t, attempt) == (1, 1, 0):  # the third call resent the second's reply token 2 as id 7
                        ids, at = records[2].prompt_token_ids, len(records[1].prompt_token_ids) + 2
                        records[2].prompt_token_ids = ids[:at] + [7] + ids[at + 1:]
                        demo.reply_break_episode = ep.id
                    calls = store.add_calls(records)
                    if ep.id in (demo.broken_prefix_episode, demo.reply_break_episode):
                        trainer_breaks[r].append({"episode_id": ep.id, "call_id": calls[2].id,
                                                  "reason": "edited" if r == 0 else "retokenised"})
                    if protocol == "anthropic-messages" and stream and not demo.streamed_call:
                        demo.streamed_call = calls[0].id
                    if (r, t, attempt) == (0, 0, 0):
                        demo.big_call = calls[2].id
                    end = records[-1].ended_at
                    if failed:
                        demo.failed = ep.id
                        store.update_episode(ep.id, status="failed", outcome="harness_error", exit_code=1,
                                             error="harness exited 1: LLM error after 2 calls", started_at=clock,
                                             ended_at=end + 1)
                    elif r < 2 or attempt == 0:
                        if ep.id == demo.broken_prefix_episode:  # what the agent changed, as the rollout keeps it
                            patch = DEMO_PATCH.encode()
                            store.set_patch(ep.id, patch, 1, len(patch))
                        reward = 1.0 if (r + t + attempt) % 3 != 2 or r == 2 else 0.0
                        reward = reward if r > 0 or attempt == 0 else 0.0
                        store.update_episode(ep.id, status="done", outcome="finished", exit_code=0, reward=reward,
                                             reward_detail={"passed": int(reward * 4), "failed": 4 - int(reward * 4)},
                                             started_at=clock, ended_at=end + 1)
                    else:
                        store.update_episode(ep.id, status="running", started_at=clock)
                    clock = end + 5
            if r < 2:
                store.finish_round(rnd.id, "done")
                store.add_train_steps([TrainStep(run_id=run.id, round_idx=r, step=s, loss=0.9 / (s + 2 * r),
                                                 reward_mean=0.4 + 0.2 * r, reward_std=0.3, rows=4, merged_calls=12)
                                       for s in range(1, 6)])
                store.put_train_round(TrainRound(run_id=run.id, round_idx=r, rows=5, calls=15, steps=5, seconds=12.5,
                                                 merge_rule="strict", break_reasons={"edited": 1},
                                                 dropped={"zero_variance_groups": 0}, adapter_dir=f"adapters/round-{r + 1}",
                                                 detail={"breaks": trainer_breaks[r]}))
    return demo
