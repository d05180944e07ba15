"""A vLLM logits processor that makes a real model answer a scripted tool-calling conversation (tests only).

What no model does deterministically: a tiny random model never closes its turn and SmolLM2 writes no valid tool
call. Loaded into a REAL vLLM server (`--logits-processors scripted_logits:ScriptedToolCalls`, this folder on the
server's PYTHONPATH), it leaves every request alone except those whose prompt holds MARKER: for those it forces, token
by token, the reply the script gives for that prompt, everything else in the engine real (prompt ids, prefix cache,
sampling, logprobs, the hermes tool parser, streaming, derender). The reply depends on how many tool results the
prompt holds after the marker: a short text and one hermes tool call for each of the first CALLS calls (3, or the
server's SCRIPTED_TOOL_CALLS), then a final answer; every reply ends its turn (`<|im_end|>`). The text before each
call has spaces, so a template that cuts earlier assistant turns to their last word (tests/templates/
rewrite_history.jinja) rewrites it.
"""

from __future__ import annotations

import json
import os

MARKER = "SCRIPTED-TOOL-EPISODE"
CALLS_ENV = "SCRIPTED_TOOL_CALLS"
CALLS = int(os.environ.get(CALLS_ENV) or 3)
"""Tool calls per conversation before the final answer: 3, or SCRIPTED_TOOL_CALLS from the environment of the
process that imports this module (set it for the vLLM server; bench/continuation.py asks for 7: 8-call episodes)."""
TOOL_RESULT = "<tool_response>"
"""How the chat template renders a tool result (rewrite_history.jinja, SmolLM2's and the tiny model's)."""
FINAL = "All three listings are done and the task is finished."


def tool_call(prompt: str, step: int) -> dict:
    """A call of the shell tool the harness offered (its name as rendered in the prompt's tool list)."""
    command = ["ls -a", "pwd", "echo scripted"][step % 3]
    if '"name": "exec_command"' in prompt:  # Codex's unified exec tool
        return {"name": "exec_command", "arguments": {"cmd": command}}
    if '"name": "Bash"' in prompt:  # Claude Code
        return {"name": "Bash", "arguments": {"command": command, "description": "list files"}}
    return {"name": "shell", "arguments": {"command": ["bash", "-lc", command]}}


def scripted_reply(prompt: str) -> str | None:
    """The reply for this prompt text (None: not a scripted conversation)."""
    at = prompt.find(MARKER)
    if at < 0:
        return None
    done = prompt[at:].count(TOOL_RESULT)
    if done >= CALLS:
        return FINAL + "<|im_end|>"
    call = json.dumps(tool_call(prompt, done))
    return f"Step {done + 1} of the plan: I will run a command now.\n<tool_call>\n{call}\n</tool_call><|im_end|>"


def __getattr__(name: str):
    """`ScriptedToolCalls`, built on first access: only the vLLM server imports vLLM (the test process reads the
    script above without it)."""
    if name != "ScriptedToolCalls":
        raise AttributeError(name)
    global ScriptedToolCalls
    ScriptedToolCalls = _build()
    return ScriptedToolCalls


def _build() -> type:
    from vllm.v1.sample.logits_processor import LogitsProcessor
    from vllm.v1.sample.logits_processor.interface import MoveDirectionality

    class ScriptedToolCalls(LogitsProcessor):
        """Forces the scripted reply's ids on requests whose prompt holds MARKER; others are untouched."""

        def __init__(self, vllm_config, device, is_pin_memory: bool) -> None:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer)
            self.forced: dict[int, tuple[list[int], list[int]]] = {}  # batch index -> (script ids, live output ids)

        def is_argmax_invariant(self) -> bool:
            return False

        def _script(self, prompt_ids: list[int] | None) -> list[int] | None:
            if not prompt_ids:
                return None
            reply = scripted_reply(self.tokenizer.decode(prompt_ids))
            return None if reply is None else self.tokenizer.encode(reply, add_special_tokens=False)

        def update_state(self, batch_update) -> None:
            if not batch_update:
                return
            for index in batch_update.removed:  # order: removed, added, moved (BatchUpdate's contract)
                self.forced.pop(index, None)
            for index, _params, prompt_ids, output_ids in batch_update.added:
                script = self._script(prompt_ids)
                if script is None:
                    self.forced.pop(index, None)
                else:
                    self.forced[index] = (script, output_ids)  # output_ids: the request's live list
            for a, b, how in batch_update.moved:
                entry_a, entry_b = self.forced.pop(a, None), self.forced.pop(b, None)
                if entry_a is not None:
                    self.forced[b] = entry_a
                if entry_b is not None and how == MoveDirectionality.SWAP:
                    self.forced[a] = entry_b

        def apply(self, logits):
            for index, (script, output_ids) in self.forced.items():
                step = len(output_ids)
                token = script[min(step, len(script) - 1)]
                logits[index].fill_(float("-inf"))
                logits[index, token] = 0.0
            return logits

    return ScriptedToolCalls
