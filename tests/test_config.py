"""Settings precedence (flags > env > project > user > defaults) and errors that name their source."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlightning_cli.config import load_settings
from agentlightning_cli.errors import AlightError


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_when_nothing_is_set(tmp_path: Path) -> None:
    s = load_settings(environ={}, project_file=tmp_path / "none.yaml", user_file=tmp_path / "none2.yaml")
    assert s.proxy.host == "127.0.0.1"
    assert s.proxy.max_body_bytes == 64 * 1024 * 1024
    assert s.serve.max_lora_rank == 8
    assert s.home == Path.home() / ".alight"


def test_each_layer_overrides_the_one_below(tmp_path: Path) -> None:
    user = _write(tmp_path / "user.yaml", "proxy:\n  port: 1001\n  host: 127.0.0.2\nserve:\n  max_model_len: 111\n  max_loras: 3\nlog_level: debug\n")
    project = _write(tmp_path / "alight.yaml", "proxy:\n  port: 1002\nserve:\n  max_model_len: 222\n")
    env = {"ALIGHT_PROXY__PORT": "1003", "ALIGHT_SERVE__MAX_LORAS": "5"}
    s = load_settings(flags={"proxy": {"port": 1004, "host": None}}, environ=env, project_file=project, user_file=user)
    assert s.proxy.port == 1004  # flag beats everything
    assert s.serve.max_loras == 5  # env beats user file
    assert s.serve.max_model_len == 222  # project beats user
    assert s.proxy.host == "127.0.0.2"  # user beats default; a flag left at None does not override
    assert s.log_level == "debug"

    s = load_settings(environ=env, project_file=project, user_file=user)
    assert s.proxy.port == 1003  # env beats project


def test_nested_maps_merge_instead_of_replacing(tmp_path: Path) -> None:
    user = _write(tmp_path / "user.yaml", "proxy:\n  model_aliases:\n    a: x\n")
    project = _write(tmp_path / "alight.yaml", "proxy:\n  model_aliases:\n    b: y\n")
    s = load_settings(environ={}, project_file=project, user_file=user)
    assert s.proxy.model_aliases == {"a": "x", "b": "y"}


def test_unknown_key_names_key_and_file(tmp_path: Path) -> None:
    project = _write(tmp_path / "alight.yaml", "proxy:\n  prot: 3\n")
    with pytest.raises(AlightError) as err:
        load_settings(environ={}, project_file=project, user_file=tmp_path / "none.yaml")
    assert str(project) in err.value.message and "proxy.prot" in err.value.message


def test_unknown_env_variable_is_named(tmp_path: Path) -> None:
    with pytest.raises(AlightError) as err:
        load_settings(environ={"ALIGHT_SERVE__MODLE": "x"}, project_file=tmp_path / "n", user_file=tmp_path / "m")
    assert "ALIGHT_SERVE__MODLE" in err.value.message


def test_wrong_type_names_file_and_key(tmp_path: Path) -> None:
    user = _write(tmp_path / "user.yaml", "serve:\n  max_lora_rank: many\n")
    with pytest.raises(AlightError) as err:
        load_settings(environ={}, project_file=tmp_path / "n", user_file=user)
    assert str(user) in err.value.message and "serve.max_lora_rank" in err.value.message


def test_yaml_that_is_not_a_mapping_is_rejected(tmp_path: Path) -> None:
    project = _write(tmp_path / "alight.yaml", "- a\n- b\n")
    with pytest.raises(AlightError, match="mapping"):
        load_settings(environ={}, project_file=project, user_file=tmp_path / "n")


def test_alight_home_from_environment(tmp_path: Path) -> None:
    s = load_settings(environ={"ALIGHT_HOME": str(tmp_path / "h")}, project_file=tmp_path / "n", user_file=tmp_path / "m")
    assert s.home == tmp_path / "h"
