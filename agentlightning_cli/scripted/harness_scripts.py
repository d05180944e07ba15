"""Deterministic model scripts that drive each real harness through one shell tool call, then finish.

Used with the fake upstream (`FakeScript(reply=tool_then_finish("codex"))`): the proxy translates every
harness's protocol to chat completions, so the script sees chat requests and answers chat turns. The step is
the number of tool results already in the request, so the script is stateless and concurrent episodes stay
independent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

OUT_FILE = "out.txt"
OUT_TEXT = "written by the scripted model"
WRITE_COMMAND = f"printf '%s\\n' '{OUT_TEXT}' > {OUT_FILE}"
MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@dataclass(frozen=True)
class ShellTool:
    """How a harness names its shell tool and how it wants to be told the task is done."""

    name: str
    arg: str
    extra: dict[str, Any] = field(default_factory=dict)
    finish: dict[str, Any] | None = None
    """The turn that ends the episode; None means a plain text answer."""


SHELL_TOOLS: dict[str, ShellTool] = {
    "claude-code": ShellTool("Bash", "command", {"description": "Write the output file"}),
    "codex": ShellTool("exec_command", "cmd"),
    "openhands": ShellTool(
        "terminal", "command", {"security_risk": "LOW"},
        finish={"tool_calls": [{"name": "finish", "arguments": {"message": "Done."}}]},
    ),
    "mini-swe-agent": ShellTool(
        "bash", "command",
        finish={"tool_calls": [{"name": "bash", "arguments": {"command": MINI_SUBMIT}}]},
    ),
    "opencode": ShellTool("bash", "command", {"description": "Write the output file"}),
    # OpenCode's fork: the same tool (detect() cannot tell them apart, nor needs to).
    "kilo-code": ShellTool("bash", "command", {"description": "Write the output file"}),
    "qwen-code": ShellTool("run_shell_command", "command", {"description": "Write the output file", "is_background": False}),
    # Qwen Code's ancestor: the same tool, reached through the Gemini API (the proxy translates it to chat).
    "gemini-cli": ShellTool("run_shell_command", "command",
                            {"description": "Write the output file", "is_background": False}),
    # Mistral Vibe's shell tool (another `bash`, beside its read_file/write_file/edit/grep/todo tools).
    "mistral-vibe": ShellTool("bash", "command"),
    # testing/script_agent.py, the small agent an external recipe runs (finishes on a plain answer).
    "script-agent": ShellTool("shell", "command"),
}


def _tool_results(body: dict) -> int:
    return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "tool")


def _advertised(body: dict) -> set[str]:
    names = set()
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            names.add(fn["name"])
    return names


def detect(body: dict) -> str | None:
    """Which harness sent this request, judged by its tools (for recipes with names of their own)."""
    names = _advertised(body)
    if "terminal" in names and "finish" in names:
        return "openhands"
    if "bash" in names and "todowrite" in names:  # OpenCode's shell tool has mini-SWE-agent's name
        return "opencode"
    if "bash" in names and "write_file" in names:  # Mistral Vibe: the same name again, its own file tools
        return "mistral-vibe"
    for harness in ("claude-code", "codex", "qwen-code", "mini-swe-agent", "script-agent"):
        if SHELL_TOOLS[harness].name in names:
            return harness
    return None


def _response_schema(body: dict) -> dict | None:
    """The JSON schema a request's reply must follow (chat `response_format`), None for a free reply."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_schema", "json_object"):
        return None
    schema = (fmt.get("json_schema") or {}).get("schema")
    return schema if isinstance(schema, dict) else {}


def schema_answer(schema: dict) -> Any:
    """The simplest value a JSON schema accepts: every required property filled, an enum's first value (Gemini CLI's
    next-speaker check then reads `next_speaker: "user"` and ends the turn)."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {name: schema_answer(props.get(name) or {}) for name in schema.get("required") or props}
    return {"string": "scripted", "integer": 0, "number": 0, "boolean": False, "array": []}.get(kind)


def shell_call(harness: str, command: str) -> dict[str, Any]:
    tool = SHELL_TOOLS[harness]
    args = {tool.arg: command, **tool.extra}
    return {"content": "Running a command.", "tool_calls": [{"name": tool.name, "arguments": json.dumps(args)}]}


def tool_then_finish(harness: str | None = None, command: str = WRITE_COMMAND) -> Callable[[dict], dict[str, Any]]:
    """Step 0: run `command` with the harness's shell tool; step 1+: finish the way the harness expects.

    With harness None the harness is recognised from the tools each request advertises.
    """
    if harness is not None and harness not in SHELL_TOOLS:
        raise KeyError(f"no script for harness {harness!r}; known: {', '.join(SHELL_TOOLS)}")

    def reply(body: dict) -> dict[str, Any]:
        schema = _response_schema(body)
        if schema is not None:  # a helper call that wants JSON (Gemini CLI's next-speaker check): a valid object
            return {"content": json.dumps(schema_answer(schema))}
        name = harness or detect(body)
        if name is None or SHELL_TOOLS[name].name not in _advertised(body):
            # Side requests without the shell tool (titles, summaries): a short text answer.
            return {"content": "Done."}
        if _tool_results(body) == 0:
            return shell_call(name, command)
        finish = SHELL_TOOLS[name].finish
        return dict(finish) if finish else {"content": "Done."}

    return reply


def text_then_finish(command: str = WRITE_COMMAND) -> Callable[[dict], dict[str, Any]]:
    """The same two steps for a harness that reads its command from the reply's text (a recipe with
    `tool_calls: false`, mini-SWE-agent's text mode): a fenced bash block, then mini's submit command. The step is
    the number of earlier assistant turns: text mode sends observations back as user turns, never as tool results.
    Aider, the other text-mode harness, is recognised by its system prompt and answered in its edit format."""

    aider = aider_edit()

    def reply(body: dict) -> dict[str, Any]:
        if is_aider(body):
            return aider(body)
        step = sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
        run = command if step == 0 else MINI_SUBMIT
        return {"content": f"Running a command.\n\n```bash\n{run}\n```"}

    return reply


AIDER_FORMAT = "*file listing*"
"""In Aider's whole-format system prompt (and nowhere else): how a request is known to come from Aider."""
AIDER_NO_FILENAME = "No filename provided before"
"""The start of Aider's own complaint about a file listing without a file name, sent back as a user message."""


def is_aider(body: dict) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "system" and AIDER_FORMAT in str(m.get("content"))
               for m in body.get("messages") or [])


def aider_edit(path: str = OUT_FILE, text: str = OUT_TEXT) -> Callable[[dict], dict[str, Any]]:
    """Aider's two steps (it has no tools and no shell: its "tool" is applying the edits in a reply). A reply that
    Aider applies ends its run after one call, so the first reply is a file listing without the file name line,
    which Aider rejects and reflects back as a user message: its feedback loop runs through the proxy, like a
    tool's result. The second reply is the proper listing, which Aider writes to `path`. The step is whether the
    last user message is that complaint (Aider's request also carries example assistant turns of its own)."""

    def reply(body: dict) -> dict[str, Any]:
        users = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
        reflected = bool(users) and AIDER_NO_FILENAME in str(users[-1].get("content"))
        if not reflected:
            return {"content": f"```\n{text}\n```\n"}
        return {"content": f"Writing the file.\n\n{path}\n```\n{text}\n```\n"}

    return reply


def endless(harness: str | None = None, command: str = "true") -> Callable[[dict], dict[str, Any]]:
    """Always one more shell call: runs a harness into its turn limit, budget or timeout."""
    if harness is not None and harness not in SHELL_TOOLS:
        raise KeyError(f"no script for harness {harness!r}; known: {', '.join(SHELL_TOOLS)}")

    def reply(body: dict) -> dict[str, Any]:
        name = harness or detect(body)
        return shell_call(name, command) if name else {"content": "Done."}

    return reply
