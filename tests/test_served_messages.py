"""Which requests the proxy renders in-process (proxy/served_messages.py through LocalTokenIO.shape_key), and what a
message's structure records. That the in-process render then equals the server's is
tests/test_continuation_proxy.py's work, on a real vLLM."""

from __future__ import annotations

import pytest

from agentlightning_cli.proxy.local_token_io import LocalTokenIO, structure
from agentlightning_cli.proxy.served_messages import served_conversation, served_tools

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
CALL = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
BASE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"}]


def key(messages, **rest):
    return LocalTokenIO(tokens=None).shape_key({"model": "m", "messages": messages, "tools": TOOLS, **rest},
                                               True, True)


def test_tool_conversations_are_local_and_what_the_server_prepares_otherwise_is_not():
    assert key(BASE) is not None
    assert key([*BASE, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": ""}]}])
    not_local = {
        "an image part": [*BASE, {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        "a part with another key": [*BASE, {"role": "user", "content": [
            {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}]}],
        "reasoning on a turn": [*BASE[:2], {**BASE[2], "reasoning": "r"}, BASE[3]],
        "arguments as an object": [*BASE[:2], {**BASE[2], "tool_calls": [
            {**CALL, "function": {"name": "bash", "arguments": {"cmd": "ls"}}}]}, BASE[3]],
        "a tool call of another type": [*BASE[:2], {**BASE[2], "tool_calls": [{**CALL, "type": "custom"}]}, BASE[3]],
        "a developer turn": [{"role": "developer", "content": "d"}, *BASE[1:]],
        "the billing line the server strips": [{"role": "system", "content": "x-anthropic-billing-header: a\nb"},
                                               *BASE[1:]],
        "tool calls on a user turn": [*BASE, {"role": "user", "content": "u", "tool_calls": [CALL]}],
    }
    for why, messages in not_local.items():
        assert key(messages) is None, why
    assert key(BASE, chat_template_kwargs={"x": 1}) is None  # changes the prompt: never local
    assert LocalTokenIO(tokens=None).shape_key({"model": "m", "messages": BASE, "tools": [
        {**TOOLS[0], "function": {**TOOLS[0]["function"], "defer_loading": True}}]}, True, True) is None


@pytest.mark.parametrize("content_format", ["openai", "string"])
def test_messages_and_tools_take_the_servers_form(content_format):
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": ""}, {"type": "text", "text": "b"}]
    messages = [*BASE, {"role": "tool", "tool_call_id": "c1", "content": parts},
                {"role": "assistant", "content": "", "tool_calls": [
                    {**CALL, "function": {"name": "bash", "arguments": "not json"}},
                    {**CALL, "function": {"name": "bash", "arguments": "[1]"}},
                    {**CALL, "function": {"name": "bash", "arguments": ""}}]},
                {"role": "assistant", "content": "done", "tool_calls": []},
                {"role": "user", "name": "n", "content": parts}]
    served = served_conversation(messages, content_format)
    openai = content_format == "openai"
    assert served[0] == {"role": "system", "content": [{"type": "text", "text": "s"}] if openai else "s"}
    assert served[2] == {"role": "assistant", "content": [] if openai else "",
                         "tool_calls": [{**CALL, "function": {"name": "bash", "arguments": {"cmd": "ls"}}}]}
    assert served[3] == {"role": "tool", "content": "out", "tool_call_id": "c1"}
    assert served[4]["content"] == ("a\n\nb" if openai else "a\nb")  # tool results joined in both formats
    assert [c["function"]["arguments"] for c in served[5]["tool_calls"]] == [{}, {}, {}]
    assert "tool_calls" not in served[6]  # an empty list is dropped
    assert served[7] == {"role": "user", "content": parts if openai else "a\nb", "name": "n"}
    assert list(served[3]) == ["role", "content", "tool_call_id"] and list(served[7]) == ["role", "content", "name"]
    assert served_tools([{"type": "function", "function": {"name": "f"}}]) == [
        {"type": "function", "function": {"name": "f", "description": None, "parameters": None}}]


def test_a_structure_tells_tool_turns_apart_and_leaves_text_turns_as_before():
    text = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]
    assert structure(text) == frozenset({("system", True, False), ("user", False, False),
                                         ("assistant", False, False), ("user", False, True)})
    two_calls = [*BASE[:2], {**BASE[2], "tool_calls": [CALL, CALL]}, BASE[3]]
    empty_content = [*BASE[:2], {**BASE[2], "content": ""}, BASE[3]]
    assert len({structure(BASE), structure(two_calls), structure(empty_content)}) == 3
