"""The two accepted line shapes (our own and SWE-bench's as published), strictly typed, with readable errors."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,199}$")
Timeout = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _check_id(value: str) -> str:
    # Ids become parts of workspace paths and store keys, so keep them to safe, visible characters.
    if not ID_PATTERN.match(value):
        raise ValueError(
            f"{value!r} is not a usable id (1-200 characters: letters, digits and . _ - : @ + =; no spaces or slashes)"
        )
    return value


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _commit(value: str | None) -> str | None:
    if value is not None and (not value.strip() or any(c.isspace() for c in value)):
        raise ValueError(f"{value!r} is not a commit or ref name")
    return value


def _commands(value: list[str]) -> list[str]:
    for i, cmd in enumerate(value):
        if not cmd.strip():
            raise ValueError(f"command {i} is empty")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class OwnLine(_Strict):
    """A task in alight's own format."""

    id: str
    prompt: str
    reward: str
    repo: str | None = None
    base_commit: str | None = None
    setup: list[str] = Field(default_factory=list)
    setup_network: bool = False
    """Setup commands get the host's network (package installs); otherwise they run without one."""
    hidden_files: str | None = None
    timeout_s: Timeout | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    image: str | None = None
    """`sandbox: container`: the image setup, the agent and the reward run in (else `container.image`)."""

    _id = field_validator("id")(_check_id)
    _blank = field_validator("prompt", "reward", "repo", "hidden_files", "image")(
        lambda v: v if v is None else _non_blank(v)
    )
    _commit = field_validator("base_commit")(_commit)
    _setup = field_validator("setup")(_commands)


def _test_list(value: Any) -> Any:
    # The published data stores these as JSON text ("[\"tests/x.py::t\"]"); people who re-save it often have lists.
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON-encoded list of test ids ({exc.msg} at character {exc.pos})") from exc
        if not isinstance(value, list):
            raise ValueError(f"JSON text decodes to {json_type(value)}, expected a list of test ids")
    return value


class SwebenchLine(_Strict):
    """A SWE-bench instance exactly as published, plus optional alight overrides (setup, reward, timeout, metadata)."""

    instance_id: str
    problem_statement: str
    repo: str
    base_commit: str
    test_patch: str
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    patch: str | None = None
    version: Any = None
    environment_setup_commit: str | None = None
    hints_text: str | None = None
    created_at: str | None = None
    difficulty: str | None = None
    image_assets: Any = None
    # SWE-bench 5.x rows carry how they are graded (the official harness reads these, nothing else).
    image: str | None = None
    eval_script: str | None = None
    log_parser: str | None = None
    eval_type: str | None = None
    # alight's own fields, allowed on a SWE-bench line to adapt it (e.g. `setup: ["pip install -e ."]`).
    setup: list[str] = Field(default_factory=list)
    reward: str | None = None
    timeout_s: Timeout | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    _id = field_validator("instance_id")(_check_id)
    _blank = field_validator("problem_statement", "test_patch", "reward")(
        lambda v: v if v is None else _non_blank(v)
    )
    _commit = field_validator("base_commit")(_commit)
    _setup = field_validator("setup")(_commands)
    _tests = field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")(_test_list)

    @field_validator("version")
    @classmethod
    def _version(cls, value: Any) -> str | None:
        # Published as text ("4.3"); some re-exports turned it into a number, which loses nothing we use.
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise ValueError(f"expected a string, got {json_type(value)}")


OWN_FIELDS = tuple(OwnLine.model_fields)
SWEBENCH_FIELDS = tuple(SwebenchLine.model_fields)


def is_swebench(obj: dict[str, Any]) -> bool:
    return "instance_id" in obj or "problem_statement" in obj


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


_EXPECTED = {
    "string_type": "a string",
    "float_type": "a number",
    "int_type": "a number",
    "list_type": "an array",
    "dict_type": "an object",
}


def describe_errors(exc: ValidationError, swebench: bool) -> list[tuple[str, str]]:
    """Pydantic errors -> (field, message) pairs a person can act on."""
    out: list[tuple[str, str]] = []
    known = SWEBENCH_FIELDS if swebench else OWN_FIELDS
    for err in exc.errors():
        loc = err["loc"]
        # Union members show up as extra loc parts ('version', 'str'); only list indexes belong in the name.
        field = str(loc[0]) + "".join(f"[{p}]" for p in loc[1:] if isinstance(p, int)) if loc else "(line)"
        kind = err["type"]
        if kind == "extra_forbidden":
            shape = "a SWE-bench line (it has instance_id/problem_statement)" if swebench else "an alight task line"
            msg = f"unknown field for {shape}; known fields: {', '.join(known)}"
        elif kind == "missing":
            msg = "missing (required)"
        elif kind in _EXPECTED:
            msg = f"expected {_EXPECTED[kind]}, got {json_type(err.get('input'))}"
        elif kind == "union_type" or kind.endswith("_type"):
            msg = f"wrong type: got {json_type(err.get('input'))}"
        elif kind == "greater_than":
            msg = f"must be greater than {err['ctx']['gt']:g}, got {err.get('input')!r}"
        elif kind == "finite_number":
            msg = "must be a finite number"
        elif kind == "value_error":
            msg = str(err["ctx"]["error"])
        else:
            msg = err["msg"]
        out.append((field, msg))
    # Union failures repeat once per member; keep the first message per field.
    seen: set[str] = set()
    return [(f, m) for f, m in out if not (f in seen or seen.add(f))]
