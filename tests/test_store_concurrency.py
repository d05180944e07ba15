"""Concurrent writers (threads, asyncio tasks, processes) and crash safety under SIGKILL, on real SQLite files."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from agentlightning_cli.store import Store

# Deterministic calls shared by this process and the writer subprocesses: call i of conversation `tag`
# extends call i-1 (prompt + completion + new tokens; the body resends every message), like a harness.
CALLS_SOURCE = r'''
import json, random
from agentlightning_cli.store import CallRecord

def piece(tag, j):
    rng = random.Random(f"{tag}/{j}")
    completion = [rng.getrandbits(32) for _ in range(rng.randrange(0, 30))]
    tool = [rng.getrandbits(32) for _ in range(rng.randrange(1, 60))]
    text = (f"{tag} message {j} " * rng.randrange(1, 40) + rng.randbytes(64).hex()).encode()
    return completion, tool, text

def call_data(tag, i):
    prompt = [random.Random(tag).getrandbits(32) for _ in range(100)]
    messages = [b'"system prompt ' + tag.encode() * 200 + b'"']
    for j in range(i):
        completion, tool, text = piece(tag, j)
        prompt += completion + tool
        messages.append(json.dumps(text.decode()).encode())
    completion = piece(tag, i)[0]
    body = b'{"model":"m","messages":[' + b",".join(messages) + b'],"stream":true}'
    return prompt, completion, body

def make_record(episode_id, tag, i):
    prompt, completion, body = call_data(tag, i)
    return CallRecord(episode_id=episode_id, protocol="openai-chat", method="POST", path="/v1/chat/completions",
                      status="ok", http_status=200, stream=True, client_request=body,
                      upstream_request=body + b" ", response=tag.encode() + b"%d" % i,
                      started_at=float(i), ended_at=float(i) + 0.5, prompt_token_ids=prompt,
                      completion_token_ids=completion, completion_logprobs=[-0.25] * len(completion))
'''
calls_module: dict = {}
exec(CALLS_SOURCE, calls_module)
make_record, call_data = calls_module["make_record"], calls_module["call_data"]

WRITER = CALLS_SOURCE + r'''
import sys
from agentlightning_cli.store import Store
run_dir, episode_id, tag, start, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
with Store.open(run_dir) as store:
    i = start
    while count < 0 or i < start + count:
        call = store.add_call(make_record(episode_id, tag, i))
        print(call.seq, flush=True)
        i += 1
'''


def assert_exact(call, tag: str, i: int) -> None:
    prompt, completion, body = call_data(tag, i)
    assert call.prompt_token_ids == prompt and call.completion_token_ids == completion
    assert call.client_request == body and call.upstream_request == body + b" "
    assert call.response == tag.encode() + b"%d" % i and call.completion_logprobs == [-0.25] * len(completion)


def check_shared_episode(calls, tags: list[str], per_writer: int) -> None:
    """Seqs are 0..n-1 exactly once, and each writer's calls appear complete and in its own order."""
    assert [c.seq for c in calls] == list(range(len(tags) * per_writer))
    for tag in tags:
        mine = [c for c in calls if c.response.startswith(tag.encode() + b"")]
        mine = [c for c in mine if c.response[len(tag):].isdigit()]
        assert len(mine) == per_writer
        for i, call in enumerate(mine):
            assert_exact(call, tag, i)


def test_threads_write_one_episode_and_their_own(tmp_path: Path):
    with Store.open(tmp_path) as store:
        shared = store.create_episode(None, None, None, 0, None, "k").id
        own = {f"t{n}": store.create_episode(None, None, None, n, None, "k").id for n in range(6)}
        errors: list[BaseException] = []

        def write(tag: str) -> None:
            try:
                for i in range(12):
                    store.add_call(make_record(shared, tag, i))
                    store.add_call(make_record(own[tag], tag, i))
            except BaseException as exc:  # noqa: BLE001 - surfaced by the assert below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(tag,)) for tag in own]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        check_shared_episode(store.get_calls(shared), list(own), 12)
        for tag, episode_id in own.items():
            calls = store.get_calls(episode_id)
            assert [c.seq for c in calls] == list(range(12))
            for i, call in enumerate(calls):
                assert_exact(call, tag, i)


async def test_asyncio_tasks_write_through_to_thread(tmp_path: Path):
    with Store.open(tmp_path) as store:
        episode_id = store.create_episode(None, None, None, 0, None, "k").id
        tags = [f"a{n}" for n in range(5)]

        async def write(tag: str) -> None:
            for i in range(8):
                await asyncio.to_thread(store.add_call, make_record(episode_id, tag, i))

        await asyncio.gather(*(write(tag) for tag in tags))
        check_shared_episode(store.get_calls(episode_id), tags, 8)


def spawn(run_dir: Path, episode_id: str, tag: str, start: int, count: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(run_dir), episode_id, tag, str(start), str(count)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_processes_write_one_episode_and_their_own(tmp_path: Path):
    with Store.open(tmp_path) as store:
        shared = store.create_episode(None, None, None, 0, None, "k").id
        own = {f"p{n}": store.create_episode(None, None, None, n, None, "k").id for n in range(3)}
    procs = [spawn(tmp_path, shared, tag, 0, 15) for tag in own]
    procs += [spawn(tmp_path, episode_id, tag, 0, 15) for tag, episode_id in own.items()]
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    with Store.open(tmp_path) as store:
        check_shared_episode(store.get_calls(shared), list(own), 15)
        for tag, episode_id in own.items():
            calls = store.get_calls(episode_id)
            assert [c.seq for c in calls] == list(range(15))
            for i, call in enumerate(calls):
                assert_exact(call, tag, i)


def test_sigkill_mid_stream_never_corrupts_committed_calls(tmp_path: Path):
    with Store.open(tmp_path) as store:
        done = store.create_episode(None, None, None, 0, None, "k").id
        for i in range(5):
            store.add_call(make_record(done, "done", i))
        victim = store.create_episode(None, None, None, 1, None, "k").id
    committed = 0
    for round_ in range(4):  # kill at a different point of the write stream each time
        proc = spawn(tmp_path, victim, "victim", committed, -1)
        reported = []
        while len(reported) < 6 + 3 * round_:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            reported.append(int(line))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert reported == list(range(committed, committed + len(reported)))
        with sqlite3.connect(tmp_path / "alight.db") as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        with Store.open(tmp_path) as store:
            calls = store.get_calls(victim)
            assert [c.seq for c in calls] == list(range(len(calls))) and len(calls) >= committed + len(reported)
            for call in calls:
                assert_exact(call, "victim", call.seq)
            assert [c.seq for c in store.get_calls(done)] == list(range(5))
            for call in store.get_calls(done):
                assert_exact(call, "done", call.seq)
        committed = len(calls)


HALF_WRITER = r'''
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE episodes SET status = 'half-written' WHERE id = ?", (sys.argv[2],))
conn.execute("DELETE FROM calls WHERE episode_id = ? AND seq = 0", (sys.argv[2],))
print("in transaction", flush=True)
time.sleep(60)
'''


def test_writer_killed_inside_its_transaction_leaves_nothing_behind(tmp_path: Path):
    with Store.open(tmp_path) as store:
        episode_id = store.create_episode(None, None, None, 0, None, "k").id
        for i in range(3):
            store.add_call(make_record(episode_id, "kept", i))
    proc = subprocess.Popen([sys.executable, "-c", HALF_WRITER, str(tmp_path / "alight.db"), episode_id],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "in transaction\n"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    with Store.open(tmp_path) as store:
        assert store.get_episode(episode_id).status == "pending"
        assert store.add_call(make_record(episode_id, "kept", 3)).seq == 3  # the dead writer's lock is gone
        for call in store.get_calls(episode_id):
            assert_exact(call, "kept", call.seq)
