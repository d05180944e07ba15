"""Task prompts over Linux's 128 KB per-argument limit reach the harness whole, through a file or stdin.

An execve argument longer than MAX_ARG_STRLEN (32 pages = 128 KiB) fails with E2BIG, so a recipe that put
the prompt on the command line could not run a long SWE-bench-style task at all. Claude Code and Codex read
it from the prompt file on stdin, mini-SWE-agent from its per-episode config file, OpenHands (which has no
stdin mode) from `-f FILE` when the prompt is too long for `-t`, Kilo Code from stdin and Mistral Vibe from
`--prompt-file`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness_support import installed, scripted

from agentlightning_cli.testing.proxy_env import SmokeEnvironment
from agentlightning_cli.scripted.harness_scripts import OUT_FILE, OUT_TEXT

pytestmark = pytest.mark.harness
MAX_ARG_STRLEN = 32 * 4096
FILLER = "context line about the repository that the agent may read but does not need. "
# No newlines or quotes: the prompt then appears byte-for-byte inside the JSON request the harness sends.
PROMPT = (f"Create {OUT_FILE} containing: {OUT_TEXT}. " + FILLER * (MAX_ARG_STRLEN // len(FILLER) + 400)
          + "END-OF-LONG-PROMPT-7f3a")


@pytest.mark.parametrize("name", ["codex", "claude-code", "mini-swe-agent", "openhands", "aider", "kilo-code",
                                  "mistral-vibe"])
async def test_prompt_over_the_argument_limit_reaches_the_model_whole(name: str, tmp_path: Path) -> None:
    assert len(PROMPT.encode()) > MAX_ARG_STRLEN + 20_000
    recipe, inst = installed(name)
    async with SmokeEnvironment(tmp_path / "run", scripted(recipe)) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", PROMPT, timeout_s=240)
        outcome = await env.run(recipe, inst, spec)
        calls = env.store.get_calls(spec.episode_id)
    assert outcome.status == "finished", (outcome.reason, Path(outcome.stderr_path).read_text()[-2000:])
    assert (spec.workspace / OUT_FILE).read_text() == OUT_TEXT + "\n"
    # The first request carries the whole prompt exactly once: nothing cut, nothing appended twice.
    assert calls and calls[0].client_request.decode().count(PROMPT) == 1


def test_a_misspelt_stdin_template_fails_when_the_recipe_loads(tmp_path: Path) -> None:
    import yaml

    from agentlightning_cli.harness import recipe as recipes
    from agentlightning_cli.errors import AlightError

    data = yaml.safe_load(Path(recipes.available()["codex"]).read_text())
    assert data["stdin"] == "{{ prompt_file }}" and "{{ prompt }}" not in data["command"]
    data["stdin"] = "{{ promt_file }}"
    path = tmp_path / "my-recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(AlightError, match=r"my-recipe.yaml: key 'stdin': 'promt_file' is undefined"):
        recipes.load(str(path))
