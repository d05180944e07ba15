"""The interactive browser, driven headless by Textual's pilot on a realistic store made through the store API:
navigate to an episode, open a call and see its tool call, filter by status, follow a run being written, quit."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlightning_cli.inspect.app import InspectApp
from agentlightning_cli.inspect.call_view import CallScreen
from agentlightning_cli.inspect.episode_view import EpisodeScreen
from agentlightning_cli.inspect.episodes_view import EpisodesScreen
from agentlightning_cli.inspect.paged_table import PagedTable
from agentlightning_cli.inspect.runs_view import RunsScreen
from agentlightning_cli.store import Store
from agentlightning_cli.testing.call_bodies import Step, conversation
from agentlightning_cli.testing.inspect_store import DEMO_PATCH, build_demo_run


@pytest.fixture
def demo(tmp_path: Path):
    return build_demo_run(tmp_path / "runs" / "demo")


def screen_text(screen) -> str:
    """Everything the screen's widgets render, as plain text."""
    from textual.widgets import Static

    parts = [str(w.render()) for w in screen.query(Static)]
    for table in screen.query(PagedTable):
        for row in range(table.row_count):
            parts.append(" ".join(str(c) for c in table.get_row_at(row)))
    return "\n".join(parts)


async def test_navigate_open_a_call_see_its_tool_call_filter_and_quit(demo):
    app = InspectApp(demo.run_dir)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, EpisodesScreen)
        table = screen.table
        assert table.row_count == 12 and "reward per round" in screen_text(screen)

        # Down to the broken-prefix episode (the third), open it: its calls and their reply previews.
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        episode = app.screen
        assert isinstance(episode, EpisodeScreen) and episode.episode_id == demo.broken_prefix_episode
        assert episode.table.row_count == 4
        text = screen_text(episode)
        assert "→ bash(" in text and "openai-responses" in text
        assert f"patch: 1 file(s), {len(DEMO_PATCH)} bytes" in text  # the agent's patch, kept with the episode
        await pilot.press("t")  # training rows: the rewritten history starts a new row, and says where
        await pilot.pause()
        assert "diverges from call 1's prompt + completion at token 10" in screen_text(episode)

        await pilot.press("enter")  # open call 0: its tool call, rendered from the streamed Responses events
        await pilot.pause()
        call = app.screen
        assert isinstance(call, CallScreen)
        text = screen_text(call)
        assert "assistant · tool call bash" in text and '"command": "cat calc.py"' in text
        assert "served by adapter policy-r0" in text and "dropped by translation" in text
        await pilot.press("l")  # per-token logprobs on demand
        await pilot.pause()
        assert "per-token logprobs: 26 sampled tokens" in screen_text(call)

        await pilot.press("escape", "escape")
        await pilot.pause()
        assert app.screen is screen
        await pilot.press("slash")
        await pilot.press(*"status:failed", "enter")
        await pilot.pause()
        assert table.row_count == 1 and table.get_row_at(0)[0] == demo.failed
        await pilot.press("enter")
        await pilot.pause()
        assert "harness exited 1: LLM error after 2 calls" in screen_text(app.screen)
        await pilot.press("escape", "escape")  # back, then clear the filter
        await pilot.pause()
        assert table.row_count == 12

        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


async def test_sorting_reward_filters_and_lazy_big_prompt(demo):
    app = InspectApp(demo.run_dir)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        screen = app.screen
        for _ in range(7):  # episode, round, task, att, harness, outcome, status -> reward
            await pilot.press("s")
        await pilot.press("S")
        await pilot.pause()
        rewards = [screen.table.get_row_at(i)[7] for i in range(screen.table.row_count)]
        assert rewards == ["1"] * 5 + ["0"] * 4 + ["-"] * 3, rewards  # unscored last in either direction
        assert "sorted by reward (descending)" in screen.sub_title

        await pilot.press("slash", *"reward<1 harness:codex", "enter")
        await pilot.pause()
        assert {screen.table.get_row_at(i)[4] for i in range(screen.table.row_count)} == {"codex"}

        # The call with a 120 kB tool output in its prompt renders its start only until `e`.
        app.push_screen(CallScreen(app.source, demo.big_call))
        await pilot.pause()
        text = screen_text(app.screen)
        assert "more characters (e expands)" in text and len(text) < 60_000
        await pilot.press("e")
        await pilot.pause()
        assert "002999: log line" in screen_text(app.screen)


async def test_a_run_being_written_shows_new_episodes_and_calls(demo):
    app = InspectApp(demo.run_dir)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert screen.table.row_count == 12
        with Store.open(demo.run_dir) as writer:  # another process's connection, like a running `alight run`
            ep = writer.create_episode(demo.run_id, None, "fix-new", 0, "codex", "k-new")
            writer.add_calls(conversation(ep.id, "openai-responses", "New task.", [Step(text="hi", stream=True)]))
        screen.poll()  # what the refresh timer does every REFRESH_S
        await pilot.pause()
        assert screen.table.row_count == 13
        assert any(screen.table.get_row_at(i)[0] == ep.id for i in range(13))


async def test_runs_screen_lists_runs_and_opens_one(demo, tmp_path: Path):
    build_demo_run(tmp_path / "runs" / "second", name="second")
    app = InspectApp(None, runs_dir=tmp_path / "runs")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)
        table = app.screen.query_one(PagedTable)
        assert sorted(table.get_row_at(i)[0] for i in range(table.row_count)) == ["demo", "second"]
        await pilot.press("question_mark")
        await pilot.pause()
        assert "training rows" in screen_text(app.screen)
        await pilot.press("escape", "enter")
        await pilot.pause()
        assert isinstance(app.screen, EpisodesScreen) and app.screen.table.row_count == 12


async def test_episode_list_read_while_the_app_starts_is_what_it_shows(demo):
    from concurrent.futures import ThreadPoolExecutor

    from agentlightning_cli.commands.inspect import _episode_summaries

    with ThreadPoolExecutor(1) as pool:  # the first screen only (5 here), as `alight inspect` reads it
        first = pool.submit(_episode_summaries, demo.run_dir, 5)
        assert [s.episode.id for s in first.result()] == demo.episodes[:5]
        app = InspectApp(demo.run_dir, preload=first)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            assert app.screen.preloaded is None  # used once, for the first paint; then the whole list
            assert [app.screen.table.get_row_at(i)[0] for i in range(app.screen.table.row_count)] == demo.episodes
            assert "12 of 12 episodes" in app.screen.sub_title and "reading" not in app.screen.sub_title
            assert "reward per round" in screen_text(app.screen)
