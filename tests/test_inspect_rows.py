"""An episode's training rows as `alight inspect` shows them: the same calls merge as the trainer merges them (its own
rules on the stored ids), each break says where the ids diverge and why (the trainer's label when it recorded one),
and sampled tokens show vLLM's token text where the stored answer has it."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning_cli.inspect.app import InspectApp
from agentlightning_cli.inspect.call_view import CallScreen
from agentlightning_cli.inspect.episode_view import PREFETCH_AFTER_S, EpisodeScreen
from agentlightning_cli.inspect.paged_table import MEASURE, PagedTable
from agentlightning_cli.inspect.row_breaks import episode_rows, first_difference, row_limit, stored_episode_rows
from agentlightning_cli.inspect.tokens import completion_token_texts, end_of_turn_ids, run_tokenizer_file
from agentlightning_cli.store import Store, TrainRound
from agentlightning_cli.testing.call_bodies import Step, conversation
from agentlightning_cli.testing.inspect_store import build_demo_run, token_text
from agentlightning_cli.train.rows import RowContext, build_rows


@pytest.fixture
def demo(tmp_path: Path):
    return build_demo_run(tmp_path / "runs" / "demo")


def _episode(store: Store, episode_id: str):
    return store.episode_summaries_by_id([episode_id])[0]


def test_breaks_say_where_and_why_with_the_trainers_label_and_token_text(demo):
    with Store.open(demo.run_dir) as store:
        s = _episode(store, demo.reply_break_episode)
        rows = stored_episode_rows(store, s.episode.id, s.episode.run_id, s.round_index)
        calls = store.get_calls(s.episode.id)
    assert [r.calls for r in rows.rows] == [[0, 1], [2], [3]] and rows.merge == "strict"
    brk = rows.to_json()["rows"][1]["break"]
    at = len(calls[1].prompt_token_ids) + 2
    assert (brk["where"], brk["at"], brk["reply_token"], brk["previous_call"]) == ("reply", at, 2, 1)
    assert brk["expected_id"] == calls[1].completion_token_ids[2] and brk["got_id"] == 7
    assert brk["expected_text"] == token_text(calls[1].completion_token_ids[2])
    assert brk["trainer_reason"] == "retokenised" and "in call 1's reply (sampled token 2 of 12)" in brk["reason"]

    with Store.open(demo.run_dir) as store:
        s = _episode(store, demo.broken_prefix_episode)
        history = stored_episode_rows(store, s.episode.id, s.episode.run_id, s.round_index).to_json()["rows"][1]
    assert history["break"]["where"] == "history" and history["break"]["at"] == 10
    assert history["break"]["trainer_reason"] == "edited" and history["break"]["expected_text"] is None


def test_rows_are_the_trainers_rows_with_retries_errors_and_temperature(tmp_path: Path):
    steps = [Step(text="Look.", tool=("bash", {"command": "ls"}), tool_output="a.py"),
             Step(tool=("bash", {"command": "cat a.py"}), tool_output="x = 1"),
             Step(tool=("bash", {"command": "pytest"}), tool_output="ok", status="upstream_error"),
             Step(tool=("bash", {"command": "pytest"}), tool_output="1 passed"),
             Step(text="Done.")]
    records = conversation("ep", "openai-chat", "Fix it.", steps)
    retry = dataclasses.replace(records[1], completion_token_ids=[5, 6, 7], completion_logprobs=[-0.1, -0.2, -0.3])
    filtered = dataclasses.replace(records[3], sampling={**records[3].sampling, "top_p": 0.9})
    hot = dataclasses.replace(records[4], sampling={**records[4].sampling, "temperature": 0.7})
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        store.add_calls([dataclasses.replace(r, episode_id=ep.id)
                         for r in [records[0], retry, *records[1:3], filtered, hot]])
        calls = store.get_calls(ep.id)
    rows = episode_rows(calls)
    trainer = build_rows(ep.id, calls, RowContext())
    by_id = {c.id: c.seq for c in calls}
    assert [r.calls for r in rows.rows] == [[by_id[i] for i in r.call_ids] for r in trainer.rows]
    assert rows.skipped == {1: "retried prompt: call 2 sent the same prompt ids again and trains instead",
                            3: "status upstream_error: error calls train nothing"}
    assert rows.rows[-1].calls == [5] and rows.details[rows.rows[-1].index]["where"] == "temperature"
    assert rows.rows[-2].calls == [4] and rows.details[rows.rows[-2].index]["where"] == "sampling"
    assert [r.split for r in trainer.rows][-2:] == ["sampling", "temperature"]
    assert first_difference([1, 2, 3], [1, 2, 4]) == 2 and first_difference(list(range(2000)), list(range(1500))) == 1500


def test_the_runs_row_limit_splits_and_drops_rows_as_the_trainer_does(tmp_path: Path):
    steps = [Step(text="Look.", tool=("bash", {"command": "ls"}), tool_output="a.py " * 40) for _ in range(5)]
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        store.add_calls(conversation(ep.id, "openai-chat", "Fix it.", steps))
        calls = store.get_calls(ep.id)
    limit = len(calls[1].prompt_token_ids) + len(calls[1].completion_token_ids) + 5  # two calls fit, not three
    rows = episode_rows(calls, max_tokens=limit)
    trainer = build_rows(ep.id, calls, RowContext(max_tokens=limit))
    by_id = {c.id: c.seq for c in calls}
    assert [r.calls for r in rows.rows if r.dropped is None] == [[by_id[i] for i in r.call_ids] for r in trainer.rows]
    assert len(rows.rows) > 1 and rows.details[1]["where"] == "length" and str(limit) in rows.rows[1].break_reason
    assert all((r.tokens > limit) == (r.dropped is not None) for r in rows.rows) and any(r.dropped for r in rows.rows)
    assert row_limit({"settings": {"train": {"max_row_tokens": 900}, "serve": {"max_model_len": 4096}}}) == 900
    assert row_limit({"serve": {"max_model_len": 2048}}) == 2048 and row_limit({"harness": "x"}) is None


def test_a_splice_round_joins_at_the_models_end_of_turn_like_the_trainer(tmp_path: Path):
    import json as json_module

    im_end = 31999
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text(json_module.dumps(
        {"added_tokens": [{"id": im_end, "content": "<|im_end|>"}], "model": {"type": "WordLevel", "vocab": {}}}))
    (model / "tokenizer_config.json").write_text(json_module.dumps({"eos_token": "<|im_end|>"}))
    records = conversation("ep", "openai-chat", "Fix it.", [Step(text="Look.", tool=("bash", {"command": "ls"}),
                                                                 tool_output="a.py"), Step(text="Done.")])
    first, second = records
    first.completion_token_ids = [*first.completion_token_ids[:-1], im_end]  # the reply ends its turn
    resent = [5, 6, 7, im_end]  # the client resent the reply as other ids, then the tool result
    second.prompt_token_ids = [*first.prompt_token_ids, *resent, *second.prompt_token_ids[-40:]]
    with Store.open(tmp_path / "run") as store:
        run = store.create_run("r", {"settings": {"serve": {"model": str(model)}}})
        rnd = store.create_round(run.id, 0, "policy-r0", None)
        ep = store.create_episode(run.id, rnd.id, "t", 0, None, "k")
        store.add_calls([dataclasses.replace(r, episode_id=ep.id) for r in records])
        store.put_train_round(TrainRound(run_id=run.id, round_idx=0, rows=1, calls=2, steps=1, seconds=1.0,
                                         merge_rule="splice", break_reasons={}, dropped={}, adapter_dir=None))
        rows = stored_episode_rows(store, ep.id, run.id, 0)
        calls = store.get_calls(ep.id)
        (model / "tokenizer.json").rename(model / "moved.json")  # the model is not on this machine any more
        without = stored_episode_rows(store, ep.id, run.id, 0)
    assert [r.calls for r in without.rows] == [[0], [1]] and "strict rule only" in without.note
    (model / "moved.json").rename(model / "tokenizer.json")
    trainer = build_rows(ep.id, calls, RowContext(eot_ids=frozenset({im_end})), merge="splice")
    assert [r.calls for r in rows.rows] == [[0, 1]] == [[c.seq for c in calls if c.id in r.call_ids] for r in trainer.rows]
    assert rows.rows[0].merge == "splice" and rows.note is None
    assert end_of_turn_ids(model / "tokenizer.json") == frozenset({im_end})
    assert episode_rows(calls, merge="splice").rows[1].break_reason  # without the end-of-turn ids: no splice


def test_token_texts_where_stored_and_cli_json(demo, tmp_path: Path):
    with Store.open(demo.run_dir) as store:
        chat = store.get_calls(demo.reply_break_episode)[1]
        streamed = store.get_call(demo.streamed_call)
    assert completion_token_texts(chat) == [token_text(t) for t in chat.completion_token_ids]
    assert completion_token_texts(streamed) is None  # a streamed answer keeps ids only
    out = subprocess.run([sys.executable, "-m", "agentlightning_cli", "inspect", "show", chat.id, "--run",
                          str(demo.run_dir), "--json", "--raw"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["raw"]["completion_token_texts"] == completion_token_texts(chat)


async def test_app_shows_break_detail_and_token_text(demo):
    from tests.test_inspect_app import screen_text

    app = InspectApp(demo.run_dir)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.push_screen(EpisodeScreen(app.source, demo.reply_break_episode))
        await pilot.pause(PREFETCH_AFTER_S + 0.2)  # the rows are read in a thread while the user looks
        prefetched = app.screen._prefetched
        assert prefetched is not None
        rows, training = prefetched.result(timeout=30)  # the rows and the trainer's verdict, both read off-screen
        assert [r.calls for r in rows.rows] == [[0, 1], [2], [3]] and "trains" in training
        await pilot.press("t")
        await pilot.pause()
        assert app.screen._prefetched is None  # used
        text = screen_text(app.screen)
        assert "in call 1's reply (sampled token 2 of 12)" in text and "trainer's label: retokenised" in text
        with Store.open(demo.run_dir) as store:
            chat = store.get_calls(demo.reply_break_episode)[1]
        assert f'expected id {chat.completion_token_ids[2]} {json.dumps(token_text(chat.completion_token_ids[2]))}' in text
        app.push_screen(CallScreen(app.source, chat.id))
        await pilot.pause()
        await pilot.press("l")
        await pilot.pause()
        text = screen_text(app.screen)
        first = chat.completion_token_ids[0]
        assert "token text as vLLM reported it" in text
        assert f"    0  {first:>8}  {chat.completion_logprobs[0]:9.5f}  {json.dumps(token_text(first))}" in text


async def test_long_table_draws_only_what_is_on_screen():
    from textual.app import App

    items = [f"item-{i:05d}" for i in range(5000)]
    rendered: list[str] = []

    def render(item: str) -> list[str]:
        rendered.append(item)
        return [item, str(len(item))]

    class One(App[None]):
        def compose(self):
            yield PagedTable(["name", "len"], render, key=lambda s: s, id="t")

    app = One()
    async with app.run_test(size=(80, 30)) as pilot:
        table = app.query_one(PagedTable)
        table.show_items(items)
        table.focus()
        await pilot.pause()
        assert table.row_count == 5000 and len(set(rendered)) <= MEASURE + 30
        await pilot.press("end")
        await pilot.pause()
        assert table.current() == "item-04999" and "item-04999" in rendered and len(set(rendered)) <= MEASURE + 60
        await pilot.press("up", "enter")
        await pilot.pause()
        assert table.get_row_at(4998) == ["item-04998", "10"]


def _word_tokenizer(folder: Path) -> Path:
    """A real tokenizer.json (the `tokenizers` library's WordLevel model) whose ids cover the demo's ids."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    folder.mkdir(parents=True)
    Tokenizer(WordLevel({f"w{i}": i for i in range(32000)}, unk_token="w0")).save(str(folder / "tokenizer.json"))
    return folder


async def test_d_decodes_a_streamed_calls_ids_with_the_runs_local_tokenizer(tmp_path: Path):
    from tests.test_inspect_app import screen_text

    model = _word_tokenizer(tmp_path / "model")
    run_dir = tmp_path / "runs" / "r"
    with Store.open(run_dir) as store:
        run = store.create_run("r", {"command": "run", "settings": {"serve": {"model": str(model)}}})
        ep = store.create_episode(run.id, None, "t", 0, "mini-swe-agent", "k")
        streamed = store.add_calls(conversation(ep.id, "openai-chat", "Fix it.", [Step(text="Done.", stream=True)]))[0]
    assert completion_token_texts(streamed) is None
    assert run_tokenizer_file({"serve": {"model": str(tmp_path / "elsewhere")}}) is None  # never downloaded
    assert run_tokenizer_file(None) is None
    app = InspectApp(run_dir)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.push_screen(CallScreen(app.source, streamed.id))
        await pilot.pause()
        await pilot.press("l")
        await pilot.pause()
        assert "no token text stored for this call" in screen_text(app.screen)
        await pilot.press("d")
        await pilot.pause()
        text = screen_text(app.screen)
        first = streamed.completion_token_ids[0]
        assert f"decoded by the run's tokenizer ({model / 'tokenizer.json'})" in text
        assert f"    0  {first:>8}  {streamed.completion_logprobs[0]:9.5f}  \"w{first}\"" in text
