"""Store summaries for browsing: episode lists with call counts and token totals, call lists without bodies."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from agentlightning_cli.store import Store
from agentlightning_cli.testing.call_bodies import Step, conversation

STEPS = [Step(text="Look first.", tool=("bash", {"command": "ls"}), tool_output="a.py b.py"),
         Step(tool=("bash", {"command": "cat a.py"}), tool_output="print(1)", status="upstream_error"),
         Step(tool=("bash", {"command": "cat a.py"}), tool_output="print(1)"),
         Step(text="Done: nothing to fix.")]


def test_episode_summaries_count_calls_tokens_and_rounds(tmp_path: Path):
    with Store.open(tmp_path) as store:
        run = store.create_run("r", {})
        r0 = store.create_round(run.id, 0, "policy-r0", None)
        r1 = store.create_round(run.id, 1, "policy-r1", "/a/1")
        e1 = store.create_episode(run.id, r0.id, "t1", 0, "mini-swe-agent", "k1")
        e2 = store.create_episode(run.id, r1.id, "t1", 0, "codex", "k2")
        empty = store.create_episode(run.id, r1.id, "t2", 0, "codex", "k3")
        loose = store.create_episode(None, None, None, 0, None, "k4")
        calls1 = store.add_calls(conversation(e1.id, "openai-chat", "Fix it.", STEPS))
        calls2 = store.add_calls(conversation(e2.id, "openai-responses", "Fix it.", STEPS[:1], seed=3))
        store.add_calls(conversation(loose.id, "anthropic-messages", "Hi.", STEPS[3:], seed=4))
        store.update_episode(e1.id, status="done", reward=1.0, reward_detail={"passed": 2}, outcome="finished")

        summaries = {s.episode.id: s for s in store.episode_summaries(run_id=run.id)}
        assert set(summaries) == {e1.id, e2.id, empty.id}
        s1 = summaries[e1.id]
        assert s1.episode == store.get_episode(e1.id) and s1.round_index == 0
        assert s1.calls == 4 and s1.failed_calls == 1
        assert s1.prompt_tokens == sum(len(c.prompt_token_ids or []) for c in calls1)
        assert s1.completion_tokens == sum(len(c.completion_token_ids or []) for c in calls1)
        assert s1.first_call_at == calls1[0].started_at and s1.last_call_at == calls1[-1].ended_at
        assert summaries[e2.id].round_index == 1 and summaries[e2.id].calls == 1
        assert summaries[e2.id].completion_tokens == len(calls2[0].completion_token_ids)
        none = summaries[empty.id]
        assert (none.calls, none.prompt_tokens, none.first_call_at) == (0, 0, None)
        assert [s.episode.id for s in store.episode_summaries(round_id=r1.id)] == sorted([e2.id, empty.id])
        assert len(store.episode_summaries()) == 4
        assert store.episode_counts() == {run.id: 3, None: 1}


def test_call_summaries_match_the_full_calls_without_decoding_bodies(tmp_path: Path):
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        store.add_calls(conversation(ep.id, "anthropic-messages", "Fix it.", [*STEPS[:1], STEPS[2], STEPS[3]]))
        full = store.get_calls(ep.id)
        summaries = store.call_summaries(ep.id)
        assert [s.seq for s in summaries] == [0, 1, 2]
        for s, c in zip(summaries, full):
            for name in ("id", "episode_id", "protocol", "method", "path", "status", "http_status", "stream",
                         "client_model", "model", "finish_reason", "usage", "sampling", "dropped", "started_at",
                         "first_byte_at", "ended_at", "error"):
                assert getattr(s, name) == getattr(c, name), name
            assert s.prompt_len == len(c.prompt_token_ids) and s.completion_len == len(c.completion_token_ids)
            assert s.request_size == len(c.client_request) and s.response_size == len(c.response)
        # Each prompt starts with the previous call's prompt + completion: the merge a trainer relies on.
        assert summaries[1].prompt_base_seq == 0
        assert summaries[1].prompt_prefix_len == len(full[0].prompt_token_ids) + len(full[0].completion_token_ids)
        assert store.call_responses(ep.id) == {c.seq: c.response for c in full}
        assert store.call_summaries("ep-unknown") == []


def test_data_version_changes_when_another_connection_commits(tmp_path: Path):
    with Store.open(tmp_path) as store:
        before = store.data_version()
        assert store.data_version() == before  # our own reads change nothing
        other = sqlite3.connect(tmp_path / "alight.db")
        other.execute("INSERT INTO runs VALUES ('run-x', 'x', '{}', 0, 'running')")
        other.commit()
        other.close()
        assert store.data_version() != before
        # Each thread has its own connection, and sees the other commits the same way.
        seen = []
        thread = threading.Thread(target=lambda: seen.append(store.get_run("x")))
        thread.start()
        thread.join()
        assert seen[0].name == "x"


# calls columns that migrations after m005 add: a store made before them has none of them (m009: continuation)
LATER_CALL_COLUMNS = ("continuation",)


def test_m004_backfills_completion_len_of_calls_written_before_it(tmp_path: Path, monkeypatch):
    from agentlightning_cli.store import calls as call_rows
    from agentlightning_cli.store import migrations

    encode = call_rows.encode_call

    def encode_without_completion_len(*args, **kwargs):  # what an alight before m004 wrote
        row, ids, bases = encode(*args, **kwargs)
        del row["completion_len"]
        for column in LATER_CALL_COLUMNS:
            row.pop(column, None)
        return row, ids, bases

    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", [m for m in migrations.MIGRATIONS if m[0] < "m004"])
        patch.setattr(call_rows, "encode_call", encode_without_completion_len)
        with Store.open(tmp_path) as store:
            ep = store.create_episode(None, None, None, 0, None, "k")
            store.add_calls(conversation(ep.id, "openai-chat", "Fix it.", STEPS))
    with Store.open(tmp_path) as store:  # applies m004
        calls = store.get_calls(ep.id)
        assert [s.completion_len for s in store.call_summaries(ep.id)] == [
            None if c.completion_token_ids is None else len(c.completion_token_ids) for c in calls]
        assert store.episode_summaries()[0].completion_tokens == sum(len(c.completion_token_ids or []) for c in calls)


def test_episode_list_reads_the_covering_index_not_the_call_rows(tmp_path: Path):
    with Store.open(tmp_path) as store:
        plan = store._conn().execute("EXPLAIN QUERY PLAN SELECT episode_id, COUNT(*), SUM(status != 'ok'),"
                                     " SUM(prompt_len), SUM(completion_len), MIN(started_at), MAX(ended_at)"
                                     " FROM calls GROUP BY episode_id").fetchall()
        assert any("COVERING INDEX calls_summary" in row[-1] for row in plan), plan


def test_summaries_by_id(tmp_path: Path):
    with Store.open(tmp_path) as store:
        eps = [store.create_episode(None, None, f"t{i}", 0, None, f"k{i}") for i in range(3)]
        calls = store.add_calls(conversation(eps[1].id, "openai-chat", "Fix it.", STEPS[:2]))
        assert [s.episode.id for s in store.episode_summaries_by_id([eps[2].id, "ep-none", eps[1].id])] == sorted(
            [eps[1].id, eps[2].id])
        assert store.episode_summaries_by_id([eps[1].id])[0].calls == 2
        found = store.call_summaries_by_id([calls[1].id, "call-none", calls[0].id])
        assert [c.id for c in found] == [calls[0].id, calls[1].id] and found[1].status == "upstream_error"


def _aggregate(conn: sqlite3.Connection) -> dict:
    """What m005's table must equal: the sums over the calls themselves."""
    return {row[0]: tuple(row[1:]) for row in conn.execute(
        "SELECT episode_id, COUNT(*), SUM(status != 'ok'), SUM(COALESCE(prompt_len, 0)),"
        " SUM(COALESCE(completion_len, 0)), MIN(started_at), MAX(ended_at) FROM calls GROUP BY episode_id")}


def test_m005_episode_call_stats_backfilled_then_kept_by_the_trigger(tmp_path: Path, monkeypatch):
    from agentlightning_cli.store import calls as call_rows
    from agentlightning_cli.store import migrations

    encode = call_rows.encode_call

    def encode_as_before(*args, **kwargs):  # what an alight before m005 wrote
        row, ids, bases = encode(*args, **kwargs)
        for column in LATER_CALL_COLUMNS:
            row.pop(column, None)
        return row, ids, bases

    with monkeypatch.context() as patch:  # calls written by an alight before m005
        patch.setattr(migrations, "MIGRATIONS", [m for m in migrations.MIGRATIONS if m[0] < "m005"])
        patch.setattr(call_rows, "encode_call", encode_as_before)
        with Store.open(tmp_path) as store:
            ep = store.create_episode(None, None, None, 0, None, "k")
            store.add_calls(conversation(ep.id, "openai-chat", "Fix it.", STEPS[:2]))
    with Store.open(tmp_path) as store:  # applies m005 (backfill), then the trigger adds calls as they come
        conn = sqlite3.connect(tmp_path / "alight.db")
        stats = lambda: {r[0]: tuple(r[1:]) for r in conn.execute("SELECT * FROM episode_call_stats")}  # noqa: E731
        assert stats() == _aggregate(conn) and stats()[ep.id][:2] == (2, 1)
        other = store.create_episode(None, None, None, 0, None, "k2")
        store.add_calls(conversation(other.id, "anthropic-messages", "Hi.", STEPS, start=1.0, seed=2))
        store.add_calls(conversation(ep.id, "openai-chat", "Fix it.", STEPS[2:], start=2_000_000_000.0, seed=1))
        assert stats() == _aggregate(conn) and stats()[ep.id][:2] == (4, 1) and stats()[other.id][:2] == (4, 1)
        by_id = {s.episode.id: s for s in store.episode_summaries()}
        assert (by_id[ep.id].calls, by_id[ep.id].failed_calls, by_id[ep.id].last_call_at) == (
            4, 1, _aggregate(conn)[ep.id][5])
        conn.close()
