"""A Harbor verifier's verdict (tasks/harbor_reward.py), with Harbor's rules (harbor/verifier/verifier.py): reward.json
before reward.txt, an empty, non-numeric, non-finite or missing reward is an error carrying the verifier's log, never
a zero; a reward file already in the verifier folder before test.sh runs is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlightning_cli.tasks.harbor_reward import RewardFileError, fresh_verifier_dir, read_verdict


def folder(tmp_path: Path, **files: str) -> Path:
    d = tmp_path / "verifier"
    d.mkdir(parents=True)
    for name, text in files.items():
        (d / name.replace("_", ".", 1) if name != "test_stdout" else d / "test-stdout.txt").write_text(text)
    return d


def test_reward_txt_and_json_with_two_metrics(tmp_path: Path) -> None:
    v = read_verdict(folder(tmp_path / "a", reward_txt=" 0.5\n"))
    assert v.reward == 0.5 and v.detail == {"source": "reward.txt", "rewards": {"reward": 0.5}, "key": "reward"}
    both = folder(tmp_path / "b", reward_json='{"reward": 1, "valid_json": 0.25}', reward_txt="0")
    v = read_verdict(both)  # reward.json wins, as in Harbor
    assert v.reward == 1.0 and v.detail["rewards"] == {"reward": 1, "valid_json": 0.25}
    assert read_verdict(both, key="valid_json").reward == 0.25


@pytest.mark.parametrize(("files", "contains"), [
    ({"reward_txt": ""}, "reward file is empty"),
    ({"reward_txt": "pass"}, "is not a number"),
    ({"reward_txt": "nan"}, "is not finite"),
    ({"reward_txt": "inf"}, "is not finite"),
    ({"reward_json": ""}, "reward file is empty"),
    ({"reward_json": "{oops"}, "is not JSON"),
    ({"reward_json": "[1]"}, "is not a JSON object"),
    ({"reward_json": '{"reward": "1"}'}, "is not a number"),
    ({"reward_json": '{"reward": NaN}'}, "is not finite"),
    ({"reward_json": '{"reward": 1e309}'}, "is not finite"),
    ({"reward_json": '{"score": 1}'}, "has no key .reward. \\(it has score\\)"),
    ({}, "wrote no reward"),
])
def test_no_usable_reward_is_an_error_with_the_log(tmp_path: Path, files: dict, contains: str) -> None:
    d = folder(tmp_path, test_stdout="FAILED test_stats.py::test_even\n", **files)
    with pytest.raises(RewardFileError, match=contains) as info:
        read_verdict(d)
    assert "FAILED test_stats.py::test_even" in info.value.log


def test_a_reward_written_before_the_verifier_ran_is_refused(tmp_path: Path) -> None:
    fresh = fresh_verifier_dir(tmp_path / "v1")
    assert fresh.is_dir() and not any(fresh.iterdir())
    planted = folder(tmp_path, reward_txt="1")
    with pytest.raises(RewardFileError, match=r"was not empty before test.sh ran \(reward.txt\)"):
        fresh_verifier_dir(planted)


def test_env_templates_resolve_as_harbors() -> None:
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.tasks.harbor_run import resolve_env

    env = {"A": "${HOST_A}", "B": "${HOST_B:-fallback}", "C": "literal ${NOT_WHOLE}"}
    assert resolve_env("t", env, {"HOST_A": "from host"}) == {"A": "from host", "B": "fallback",
                                                             "C": "literal ${NOT_WHOLE}"}
    with pytest.raises(AlightError, match=r"task org/t: its env A = '\$\{HOST_A\}' needs \$HOST_A, which is not set"):
        resolve_env("org/t", env, {})
