"""Recipe loading and validation: shipped recipes, user recipe files, and the errors a typo produces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentlightning_cli.harness import recipe as recipes
from agentlightning_cli.errors import AlightError
from agentlightning_cli.harness.env import EpisodeSpec, episode_context
from agentlightning_cli.harness.install import find_python, layout, satisfies
from agentlightning_cli.harness.outcome import judge, read_records

SHIPPED = {"mini-swe-agent": "openai-chat", "openhands": "openai-chat",
           "claude-code": "anthropic-messages", "codex": "openai-responses", "mini-swe-agent-text": "openai-chat",
           "opencode": "openai-chat", "qwen-code": "openai-chat",
           "aider": "openai-chat", "gemini-cli": "gemini-generate-content",
           "kilo-code": "openai-chat", "mistral-vibe": "openai-chat"}


def test_all_shipped_recipes_load_with_their_protocols() -> None:
    found = recipes.available()
    assert set(SHIPPED) <= set(found)
    for name, protocol in SHIPPED.items():
        recipe = recipes.load(name)
        assert recipe.protocol == protocol
        assert recipe.source.endswith(f"{name}.yaml")


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "my-recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _base() -> dict:
    return yaml.safe_load(Path(recipes.available()["codex"]).read_text())


def test_recipe_by_path_works(tmp_path: Path) -> None:
    data = _base()
    data["name"] = "my-codex"
    recipe = recipes.load(str(_write(tmp_path, data)))
    assert recipe.name == "my-codex"


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    data = _base()
    data["outcome"]["erors"] = []
    path = _write(tmp_path, data)
    with pytest.raises(AlightError, match=r"my-recipe.yaml: unknown key 'outcome.erors'"):
        recipes.load(str(path))


def test_missing_command_names_file_and_key(tmp_path: Path) -> None:
    data = _base()
    del data["command"]
    with pytest.raises(AlightError, match=r"my-recipe.yaml: missing key 'command'"):
        recipes.load(str(_write(tmp_path, data)))


def test_unknown_template_variable_names_file_and_key(tmp_path: Path) -> None:
    data = _base()
    data["env"]["EPISODE_API_KEY"] = "{{ api_kee }}"
    with pytest.raises(AlightError, match=r"my-recipe.yaml: key 'env.EPISODE_API_KEY': 'api_kee' is undefined"):
        recipes.load(str(_write(tmp_path, data)))


def test_unknown_variable_inside_a_file_template_is_caught(tmp_path: Path) -> None:
    data = _base()
    data["files"]["home/.codex/config.toml"] += "x = {{ base_ulr }}\n"
    with pytest.raises(AlightError, match=r"key 'files\['home/.codex/config.toml'\]'.*base_ulr"):
        recipes.load(str(_write(tmp_path, data)))


def test_unknown_name_lists_available_and_paths_tried() -> None:
    with pytest.raises(AlightError) as err:
        recipes.load("no-such-harness")
    assert "harness_recipes/no-such-harness.yaml" in err.value.message
    assert "mini-swe-agent" in (err.value.hint or "")


def test_missing_recipe_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(AlightError, match="recipe file not found"):
        recipes.load(str(tmp_path / "nope.yaml"))


def _ctx(name: str, tmp_path: Path) -> tuple[recipes.Recipe, dict]:
    recipe = recipes.load(name)
    spec = EpisodeSpec("ep-1", "do it", tmp_path / "ws", "http://127.0.0.1:9/e/ep-1/v1", "k-1", tmp_path)
    return recipe, episode_context(recipe, layout(recipe, tmp_path), spec, tmp_path / "ep", tmp_path / "t")


def test_rendered_codex_config_is_valid_toml_pointing_at_the_proxy(tmp_path: Path) -> None:
    import tomllib

    recipe, ctx = _ctx("codex", tmp_path)
    config = tomllib.loads(recipe.render(recipe.files["home/.codex/config.toml"], ctx))
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == "http://127.0.0.1:9/e/ep-1/v1"
    assert provider["wire_api"] == "responses"
    assert not provider["env_key"].startswith("ALIGHT_")
    assert recipe.render(recipe.env[provider["env_key"]], ctx) == "k-1"
    assert config["features"] == {"plugins": False, "apps": False, "goals": False}
    assert config["web_search"] == "disabled" and config["analytics"]["enabled"] is False


def test_rendered_mini_and_openhands_files_parse(tmp_path: Path) -> None:
    recipe, ctx = _ctx("mini-swe-agent", tmp_path)
    mini = yaml.safe_load(recipe.render(recipe.files["alight-mini.yaml"], ctx))
    assert mini["model"]["model_kwargs"]["api_base"] == ctx["base_url"]
    assert mini["agent"]["step_limit"] == recipe.max_turns
    recipe, ctx = _ctx("openhands", tmp_path)
    settings = json.loads(recipe.render(recipe.files["home/.openhands/agent_settings.json"], ctx))
    assert settings["llm"]["base_url"] == ctx["base_url"] and settings["llm"]["num_retries"] == 1


def _opencode_style_config(recipe, ctx: dict, name: str, env: str) -> dict:
    """OpenCode and its fork Kilo Code: a config file in the private HOME whose one provider is the proxy (key from
    the environment, never in the file) and whose agent and helper (small) models are both the policy."""
    config = json.loads(recipe.render(recipe.files[f"home/{name}"], ctx))
    assert recipe.render(recipe.env[env], ctx) == f"{ctx['home']}/{name}"
    assert config["enabled_providers"] == ["alight"] and list(config["provider"]) == ["alight"]
    provider = config["provider"]["alight"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"  # bundled in the binary: nothing installed at run time
    assert provider["options"] == {"baseURL": ctx["base_url"], "apiKey": "{env:EPISODE_API_KEY}"}
    assert recipe.render(recipe.env["EPISODE_API_KEY"], ctx) == "k-1" and "k-1" not in json.dumps(config)
    assert config["model"] == config["small_model"] == f"alight/{ctx['model']}"
    assert list(provider["models"]) == [ctx["model"]]
    return config


def test_rendered_opencode_config_names_only_the_proxy_and_the_policy(tmp_path: Path) -> None:
    recipe, ctx = _ctx("opencode", tmp_path)
    config = _opencode_style_config(recipe, ctx, "opencode.json", "OPENCODE_CONFIG")
    assert config["agent"]["build"]["steps"] == recipe.max_turns
    assert config["autoupdate"] is False and config["share"] == "disabled" and config["lsp"] is False
    for flag in ("MODELS_FETCH", "AUTOUPDATE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS", "PROJECT_CONFIG", "SHARE"):
        assert recipe.env[f"OPENCODE_DISABLE_{flag}"] == "1", flag
    assert recipe.env["npm_config_registry"] == "http://127.0.0.1:9/"  # its plugin install fails on loopback


def test_rendered_qwen_settings_turn_its_helper_calls_off(tmp_path: Path) -> None:
    recipe, ctx = _ctx("qwen-code", tmp_path)
    settings = json.loads(recipe.render(recipe.files["home/.qwen/settings.json"], ctx))
    assert recipe.render(recipe.env["QWEN_HOME"], ctx) == f"{ctx['home']}/.qwen"
    assert recipe.render(recipe.env["OPENAI_BASE_URL"], ctx) == ctx["base_url"]
    assert recipe.render(recipe.env["OPENAI_MODEL"], ctx) == settings["model"]["name"] == ctx["model"]
    assert settings["security"]["auth"]["selectedType"] == "openai"
    assert settings["model"]["skipNextSpeakerCheck"] is True and settings["model"]["skipLoopDetection"] is True
    assert settings["model"]["chatCompression"]["contextPercentageThreshold"] == 0
    assert settings["memory"] == {"enableManagedAutoMemory": False, "enableManagedAutoDream": False}
    assert "fastModel" not in settings  # unset: the title helper never runs, the others use the one model name
    assert settings["privacy"]["usageStatisticsEnabled"] is False and settings["telemetry"]["enabled"] is False
    assert recipe.env["QWEN_CODE_EMIT_TOOL_USE_SUMMARIES"] == "0"


def test_rendered_kilo_config_names_only_the_proxy_and_keeps_it_off_kilos_services(tmp_path: Path) -> None:
    """Kilo Code is OpenCode's fork: the same provider config under KILO_ names, plus the two switches its own
    services need (PostHog and api.kilo.ai were looked up with every KILO_DISABLE_* set)."""
    recipe, ctx = _ctx("kilo-code", tmp_path)
    config = _opencode_style_config(recipe, ctx, "kilo.json", "KILO_CONFIG")
    # Kilo's primary agent is `code` (OpenCode's `build`): the turn limit is its steps (test_harness_real checks
    # that Kilo applies it).
    assert config["agent"] == {"code": {"steps": recipe.max_turns}}
    assert config["autoupdate"] is False and config["share"] == "disabled" and config["lsp"] is False
    for flag in ("MODELS_FETCH", "AUTOUPDATE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS", "PROJECT_CONFIG", "SHARE",
                 "SESSION_INGEST", "AUTOCOMPACT"):
        assert recipe.env[f"KILO_DISABLE_{flag}"] == "1", flag
    assert recipe.env["KILO_TELEMETRY_LEVEL"] == "off"
    assert recipe.env["KILO_API_URL"] == "http://127.0.0.1:9"  # a closed loopback port: no api.kilo.ai lookup
    assert recipe.env["npm_config_registry"] == "http://127.0.0.1:9/"
    assert not any(k.startswith("OPENCODE_") for k in recipe.env)  # the fork reads only its own names
    assert recipe.install.version == "7.7.7"  # 7.8.1's platform package is not on the registry
    error = {"type": "error", "error": {"name": "APIError", "data": {"message": "bad", "statusCode": 400}}}
    assert judge(recipe, ctx, [{"type": "step_start"}, error])[0] == "kilo error (APIError, status 400): bad"
    assert judge(recipe, ctx, [{"type": "step_finish", "part": {"reason": "stop"}}]) == (None, False)
    assert judge(recipe, ctx, [{"type": "step_start"}])[0] == "kilo reported no finished step"


def test_rendered_vibe_config_points_at_the_proxy_and_labels_its_utility_calls(tmp_path: Path) -> None:
    import tomllib

    recipe, ctx = _ctx("mistral-vibe", tmp_path)
    config = tomllib.loads(recipe.render(recipe.files["home/.vibe/config.toml"], ctx))
    assert recipe.render(recipe.env["VIBE_HOME"], ctx) == f"{ctx['home']}/.vibe"
    assert config["providers"] == [{"name": "alight", "api_base": ctx["base_url"], "api_key_env_var": "EPISODE_API_KEY",
                                    "api_style": "openai", "backend": "generic"}]
    assert recipe.render(recipe.env["EPISODE_API_KEY"], ctx) == "k-1" and "k-1" not in json.dumps(config)
    models = {m["alias"]: m for m in config["models"]}
    assert config["active_model"] == "policy" and models["policy"]["name"] == ctx["model"] == recipe.model
    # Titles and smart-approve: a model entry of their own whose name is not the policy's, so they are helper
    # calls (train/helper_calls.py), and no probe of Mistral's API for a fast model.
    assert config["utility_models"] == {"title": "utility", "smart_approve": "utility"}
    assert models["utility"]["provider"] == "alight" and models["utility"]["name"] != ctx["model"]
    assert all(m["auto_compact_threshold"] == 0 for m in models.values())  # 0: never compact
    for key in ("enable_telemetry", "enable_otel", "enable_update_checks", "enable_auto_update", "enable_connectors"):
        assert config[key] is False, key
    assert config["experiments"] == {"enable": False} and {"web_fetch", "web_search"} <= set(config["disabled_tools"])
    argv = [recipe.render(part, ctx) for part in recipe.command]
    assert argv[argv.index("--max-turns") + 1] == str(recipe.max_turns)
    assert "--auto-approve" in argv and "--trust" not in argv  # its repository's .vibe/ stays unread
    assert argv[argv.index("--output-dir") + 1] == f"{ctx['episode_dir']}/vibe-report"
    # The outcome is read from the export it writes there, not from its exit code.
    assert recipe.render(recipe.outcome.source, ctx) == f"{ctx['episode_dir']}/vibe-report/export.json"


def test_mistral_vibe_outcome_reads_its_export(tmp_path: Path) -> None:
    """export.json as vibe 2.26.1 writes it (RunOutcome, app_server/run_export.py), read from its file."""
    from agentlightning_cli.harness.outcome import load_report

    recipe, ctx = _ctx("mistral-vibe", tmp_path)
    report = Path(recipe.render(recipe.outcome.source, ctx))
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"outcome": "finished", "stop_reason": None, "exit_code": 0, "steps": 2}, indent=2))
    assert judge(recipe, ctx, load_report(recipe, ctx, tmp_path / "stdout")) == (None, False)
    limit = {"outcome": "turn_limit", "stop_reason": "limit", "exit_code": 3}
    assert judge(recipe, ctx, [limit]) == (None, True)
    failure = {"outcome": "infrastructure_failure", "error": {"message": "API error 400"}, "exit_code": 2}
    assert judge(recipe, ctx, [failure]) == ("mistral-vibe: infrastructure failure: API error 400", False)
    # A reply cut at the token cap is the policy's doing: scored like any finished episode.
    assert judge(recipe, ctx, [{"outcome": "length", "stop_reason": "length"}]) == (None, False)
    assert judge(recipe, ctx, [{"outcome": "aborted"}])[0] == "mistral-vibe ended with outcome aborted"
    report.unlink()
    missing = judge(recipe, ctx, load_report(recipe, ctx, tmp_path / "stdout"))
    assert missing == (f"the harness wrote no report to {report}", False)


def test_rendered_aider_files_point_at_the_proxy_without_writing_the_key(tmp_path: Path) -> None:
    recipe, ctx = _ctx("aider", tmp_path)
    metadata = json.loads(recipe.render(recipe.files["model-metadata.json"], ctx))
    # An entry for the very model Aider asks for: else it downloads litellm's price map from GitHub.
    name = f"openai/{ctx['model']}"
    assert list(metadata) == [name] and metadata[name]["input_cost_per_token"] == 0
    env_file = recipe.render(recipe.files["aider.env"], ctx)
    assert f"OPENAI_API_BASE={ctx['base_url']}" in env_file and "OPENAI_API_KEY=${EPISODE_API_KEY}" in env_file
    assert ctx["api_key"] not in env_file and recipe.render(recipe.env["EPISODE_API_KEY"], ctx) == ctx["api_key"]
    argv = [recipe.render(part, ctx) for part in recipe.command]
    assert {"--no-gitignore", "--no-auto-commits", "--no-check-update", "--analytics-disable"} <= set(argv)
    assert not recipe.tool_calls and recipe.max_turns is None


def test_the_text_recipe_shares_mini_swe_agents_install_and_parses_a_small_models_reply(tmp_path: Path) -> None:
    import re

    text, mini = recipes.load("mini-swe-agent-text"), recipes.load("mini-swe-agent")
    assert layout(text, tmp_path).dir == layout(mini, tmp_path).dir == tmp_path / "harnesses" / "mini-swe-agent-2.4.6"
    recipe, ctx = _ctx("mini-swe-agent-text", tmp_path)
    config = yaml.safe_load(recipe.render(recipe.files["alight-mini.yaml"], ctx))
    assert config["model"]["model_class"] == "litellm_textbased" and recipe.command[2] == "mini_textbased.yaml"
    assert "{{task}}" in config["agent"]["instance_template"]  # left for mini to fill, not alight's renderer
    regex = config["model"]["action_regex"]  # mini applies it with re.findall(..., re.DOTALL)
    assert re.findall(regex, "Let me see.\n```bash\nls -la\n```\nthen\n```\npwd\n```", re.DOTALL) == ["ls -la"]
    assert re.findall(regex, "```mswea_bash_command\necho hi > a.txt\n```", re.DOTALL) == ["echo hi > a.txt"]
    assert re.findall(regex, "I would run ls.", re.DOTALL) == []


def test_outcome_rules_for_each_harness_report(tmp_path: Path) -> None:
    recipe, ctx = _ctx("claude-code", tmp_path)
    records = read_records(recipe.outcome, 'noise\n{"type":"result","is_error":true,"subtype":"success","api_error_status":400,"result":"API Error: 400"}\n')
    assert judge(recipe, ctx, records) == ("claude-code reported an error (success, API status 400): API Error: 400", False)
    assert judge(recipe, ctx, [{"type": "result", "subtype": "error_max_turns", "is_error": True}]) == (None, True)
    recipe, ctx = _ctx("openhands", tmp_path)
    text = 'banner\n{"kind":"MessageEvent"}\n{"kind":"ConversationErrorEvent","code":"LLMBadRequestError","detail":"bad"}\n'
    assert judge(recipe, ctx, read_records(recipe.outcome, text))[0] == "openhands conversation error LLMBadRequestError: bad"
    recipe, ctx = _ctx("codex", tmp_path)
    assert judge(recipe, ctx, [{"type": "turn.started"}])[0] == "codex reported no completed turn"
    assert judge(recipe, ctx, [{"type": "turn.failed", "error": {"message": "boom"}}])[0] == "codex turn failed: boom"
    recipe, ctx = _ctx("mini-swe-agent", tmp_path)
    assert judge(recipe, ctx, [{"info": {"exit_status": "Submitted"}}]) == (None, False)
    assert judge(recipe, ctx, [{"info": {"exit_status": "LimitsExceeded"}}]) == (None, True)
    assert judge(recipe, ctx, [{"info": {"exit_status": "RepeatedFormatError"}}]) == (None, False)
    err = judge(recipe, ctx, [{"info": {"exit_status": "APIError"}, "messages": [{"extra": {"exception_str": "boom"}}]}])[0]
    assert "'APIError'" in err and "boom" in err
    assert "wrote no report" in judge(recipe, ctx, [])[0]
    recipe, ctx = _ctx("opencode", tmp_path)
    done = [{"type": "step_start"}, {"type": "text"}, {"type": "step_finish", "part": {"reason": "stop"}}]
    assert judge(recipe, ctx, done) == (None, False)
    error = {"type": "error", "error": {"name": "APIError", "data": {"message": "bad", "statusCode": 400}}}
    assert judge(recipe, ctx, [error])[0] == "opencode error (APIError, status 400): bad"
    assert judge(recipe, ctx, [{"type": "step_start"}])[0] == "opencode reported no finished step"


def test_rendered_gemini_settings_choose_its_auth_trust_the_folder_and_send_nothing_elsewhere(tmp_path: Path) -> None:
    """The two traps (no auth type chosen: exit 41; an untrusted folder: yolo silently overridden) and the settings
    that keep it on the proxy; the turn limit is model.maxSessionTurns (-1, unlimited, when there is none)."""
    from agentlightning_cli.proxy.server import episode_base_url

    recipe, ctx = _ctx("gemini-cli", tmp_path)
    settings = json.loads(recipe.render(recipe.files["home/.gemini/settings.json"], ctx))
    assert settings["security"] == {"folderTrust": {"enabled": False}, "auth": {"selectedType": "gemini-api-key"}}
    assert settings["privacy"]["usageStatisticsEnabled"] is False and settings["telemetry"]["enabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False and settings["general"]["checkpointing"]["enabled"] is False
    assert settings["model"]["maxSessionTurns"] == recipe.max_turns == ctx["max_turns"]
    assert settings["model"]["skipNextSpeakerCheck"] is True and settings["model"]["disableLoopDetection"] is True
    assert json.loads(recipe.render(recipe.files["home/.gemini/settings.json"], {**ctx, "max_turns": 0})
                      )["model"]["maxSessionTurns"] == -1
    assert recipe.render(recipe.env["GOOGLE_GEMINI_BASE_URL"], ctx) == ctx["base_url"]
    assert recipe.render(recipe.env["GEMINI_API_KEY"], ctx) == ctx["api_key"]
    # The SDK adds /v1beta/models/...: the proxy hands this protocol the bare episode URL.
    assert episode_base_url("http://127.0.0.1:9", "ep-1", recipe.protocol) == "http://127.0.0.1:9/e/ep-1"
    assert recipe.command[recipe.command.index("-m") + 1] == "{{ model }}" and recipe.stdin == "{{ prompt_file }}"


def test_gemini_cli_outcome_reads_its_stream_json_result(tmp_path: Path) -> None:
    """stream-json lines as Gemini CLI 0.61.0 printed them: success, the turn limit (exit 53), an API error."""
    recipe, ctx = _ctx("gemini-cli", tmp_path)
    ok = '{"type":"init","model":"policy"}\n{"type":"result","status":"success","stats":{"total_tokens":9}}\n'
    assert judge(recipe, ctx, read_records(recipe.outcome, ok)) == (None, False)
    limit = {"type": "result", "status": "error", "error": {"type": "FatalTurnLimitedError", "message": "max turns"}}
    assert judge(recipe, ctx, [limit]) == (None, True)
    error = {"type": "result", "status": "error", "error": {"type": "Error", "message": "[API Error: 400 bad]"}}
    assert judge(recipe, ctx, [error]) == ("gemini-cli reported an error (Error): [API Error: 400 bad]", False)
    assert judge(recipe, ctx, [{"type": "init"}])[0] == "gemini-cli printed no successful result"


def test_qwen_code_api_error_reported_as_success_is_a_harness_error(tmp_path: Path) -> None:
    """Qwen Code ends a session whose API call failed with exit code 0 and a `success` result: only the result's
    text, "[API Error: ...]", tells (stream-json lines as it printed them for a 400 from the proxy)."""
    recipe, ctx = _ctx("qwen-code", tmp_path)
    text = (
        '{"type":"system","subtype":"init","model":"policy","permission_mode":"yolo"}\n'
        '{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"[API Error: 400 bad]"}]}}\n'
        '{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"[API Error: 400 bad]"}\n'
    )
    assert judge(recipe, ctx, read_records(recipe.outcome, text)) == ("qwen-code: [API Error: 400 bad]", False)
    ok = {"type": "result", "subtype": "success", "is_error": False, "result": "Done. [API Error: is quoted here]"}
    assert judge(recipe, ctx, [ok]) == (None, False)
    assert judge(recipe, ctx, [{"type": "system"}])[0] == "qwen-code printed no result"


def test_an_error_rule_prefix_matches_the_start_of_a_string_field(tmp_path: Path) -> None:
    data = _base()
    data["outcome"] = {"format": "jsonl", "errors": [{"match": {"kind": "end"}, "prefix": {"text": "ERR:"},
                                                      "reason": "failed: {{ record.text }}"}]}
    recipe = recipes.load_path(_write(tmp_path, data))
    assert judge(recipe, {}, [{"kind": "end", "text": "ERR: boom"}]) == ("failed: ERR: boom", False)
    assert judge(recipe, {}, [{"kind": "end", "text": "fine ERR:"}, {"kind": "end", "text": 3}]) == (None, False)


def test_version_requirements() -> None:
    assert satisfies("3.12.1", ">=3.12") and not satisfies("3.11.7", ">=3.12")
    assert satisfies("v20.20.2", ">=18") and not satisfies("v16.0.0", ">=18")
    # Upper bounds, the way packages declare them (OpenHands 1.16.0: Requires-Python ==3.12.*).
    assert satisfies("3.12.1", "==3.12.*") and not satisfies("3.13.0", "==3.12.*")
    assert satisfies("3.12.0", ">=3.11,<3.13") and not satisfies("3.13.0", ">=3.11,<3.13")
    with pytest.raises(AlightError):
        satisfies("3.12", "3.12 or newer")


def test_openhands_recipe_says_what_the_package_says() -> None:
    assert recipes.load("openhands").install.python == "==3.12.*"


def test_interpreter_discovery_honours_upper_bounds(tmp_path, monkeypatch) -> None:
    """With 3.13 and 3.12 both on PATH, `==3.12.*` picks 3.12 (the newest that satisfies), never 3.13."""
    for minor, version in ((13, "3.13.0"), (12, "3.12.4")):
        exe = tmp_path / f"python3.{minor}"
        exe.write_text(f"#!/bin/sh\necho {version}\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    assert find_python("==3.12.*") == str(tmp_path / "python3.12")
    assert find_python(">=3.13") == str(tmp_path / "python3.13")
    assert find_python("==3.14.*") is None


def test_packaged_recipes_match_the_checkout() -> None:
    # The wheel force-includes harness_recipes/ as agentlightning_cli/harness_recipes: lookup covers both.
    dirs = recipes.builtin_dirs()
    assert dirs[0].name == "harness_recipes" and dirs[0].parent.name == "agentlightning_cli"
    assert (dirs[1] / "codex.yaml").is_file()
