#!/usr/bin/env python3
"""A small script agent: the kind of harness a user keeps in their own repo and runs with a recipe that has no
`install` (an external recipe). It speaks OpenAI chat completions with one `shell` tool, runs the commands the
model asks for in its working directory (the workspace), and stops when the model answers without a tool call.

Standard library only, so any python3 runs it. Configured like a harness: the base URL and key from
OPENAI_BASE_URL / OPENAI_API_KEY, the prompt from --prompt-file, --max-turns. Its report is JSON lines on
stdout: {"event": "finished", ...}, {"event": "turn_limit"} or {"event": "error", "message": ...}.
"""

import argparse
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

SHELL_TOOL = {"type": "function", "function": {
    "name": "shell", "description": "Run a shell command in the working directory; returns its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


def chat(base_url, api_key, model, messages):
    body = json.dumps({"model": model, "messages": messages, "tools": [SHELL_TOOL]}).encode()
    req = urllib.request.Request(f"{base_url.rstrip('/')}/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())["choices"][0]["message"]


def run_tool(call):
    try:
        command = json.loads(call["function"]["arguments"])["command"]
    except (KeyError, TypeError, ValueError):
        return "error: the call needs a JSON object with a `command` string"
    proc = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    return f"exit code {proc.returncode}\n{proc.stdout}{proc.stderr}"[-4000:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt-file", required=True)
    parser.add_argument("--max-turns", type=int, default=10)
    args = parser.parse_args()
    with open(args.prompt_file, encoding="utf-8") as fh:
        messages = [{"role": "user", "content": fh.read()}]
    base_url, api_key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
    model = os.environ.get("AGENT_MODEL", "policy")
    for turn in range(1, args.max_turns + 1):
        try:
            message = chat(base_url, api_key, model, messages)
        except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
            print(json.dumps({"event": "error", "message": f"model call failed: {exc}"}), flush=True)
            return 1
        calls = message.get("tool_calls") or []
        messages.append({"role": "assistant", "content": message.get("content"), **({"tool_calls": calls} if calls else {})})
        if not calls:
            print(json.dumps({"event": "finished", "turns": turn, "answer": message.get("content")}), flush=True)
            return 0
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": run_tool(call)})
    print(json.dumps({"event": "turn_limit", "turns": args.max_turns}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
