"""The scripted multi-turn chat agent of bench/continuation.py, as its own process (every real harness is one: in
the proxy's process its HTTP and JSON work would compete with the proxy's for the interpreter and count as the
proxy's latency). Each reply goes back exactly as the client got it, then a new "Repeat exactly: ..." turn
(tests/test_continuation_proxy.py's agent).

    ALIGHT_KEY=ek-... python bench/chat_agent.py BASE_URL TURNS OFFSET
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request

SYSTEM = "You are a helpful assistant. Repeat the user's sentence exactly."
SENTENCES = ("The quick brown fox jumps over the lazy dog.", "Paris is the capital of France.",
             "The sky is blue on a sunny day.", "Cats like to sleep in the sun.", "Rivers flow down to the sea.",
             "Apples grow on trees in the autumn.", "Rain falls from grey clouds.", "The train leaves at nine tonight.")


def chat_turns(base_url: str, key: str, turns: int, offset: int) -> None:
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Repeat exactly: {SENTENCES[offset % 8]}"}]
    for i in range(turns):
        body = {"model": "gpt-4o", "messages": messages, "temperature": 0.7, "max_tokens": 64}
        request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request, timeout=1800) as resp:
            reply = json.loads(resp.read())["choices"][0]["message"]
        messages = [*messages, {"role": "assistant", "content": reply.get("content")},
                    {"role": "user", "content": f"Repeat exactly: {SENTENCES[(offset + i + 1) % 8]}"}]


if __name__ == "__main__":
    base_url, turns, offset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    chat_turns(base_url, os.environ["ALIGHT_KEY"], turns, offset)
