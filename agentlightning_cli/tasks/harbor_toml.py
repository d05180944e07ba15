"""A Harbor task.toml, typed as the `harbor` 0.25.0 wheel's TaskConfig reads it (harbor/models/task/config.py), and
the line each key sits on, so a wrong type is reported with its line (tomllib gives lines only for syntax errors).

Only what alight runs or refuses is typed; other keys are ignored, as Harbor's own model ignores unknown keys.
Types are coerced the way pydantic's lax mode (Harbor's) does, so a file Harbor accepts is accepted here too."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

KNOWN_SCHEMA_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
"""task.toml schema versions the 0.25.0 wheel writes or reads (it writes 1.4; Terminal-Bench 2.0 has 1.0)."""

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
"""Harbor's ORG_NAME_PATTERN for `[task].name` ("org/name"); `..` is refused as well."""

NetworkMode = Literal["no-network", "public", "allowlist"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Phase(_Section):
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None

    @model_validator(mode="after")
    def _allowlist_only(self) -> "_Phase":
        # Harbor: allowed_hosts without a mode, or a non-empty list with another mode, is an error.
        if self.allowed_hosts is not None and (self.network_mode is None
                                               or (self.network_mode != "allowlist" and self.allowed_hosts)):
            raise ValueError("allowed_hosts is only valid when network_mode = 'allowlist'")
        return self


class TaskInfo(_Section):
    name: str
    description: str = ""

    @field_validator("name")
    @classmethod
    def _org_name(cls, value: str) -> str:
        if not NAME_PATTERN.match(value) or ".." in value:
            raise ValueError(f"{value!r} is not 'org/name' (letters, digits, . _ - on each side of one '/', no '..')")
        return value


class AgentSection(_Phase):
    timeout_sec: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    user: str | int | None = None


class VerifierSection(_Phase):
    timeout_sec: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: dict[str, Any] | None = None
    collect: list[Any] = Field(default_factory=list)


class Healthcheck(_Section):
    command: str


class EnvironmentSection(_Section):
    build_timeout_sec: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    docker_image: str | None = None
    os: str = "linux"
    cpus: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    memory_mb: int | None = Field(default=None, gt=0)
    storage_mb: int | None = Field(default=None, gt=0)
    gpus: int | None = Field(default=None, ge=0)
    gpu_types: list[str] | None = None
    tpu: dict[str, Any] | None = None
    mcp_servers: list[Any] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = None
    healthcheck: Healthcheck | None = None
    workdir: str | None = None
    allow_internet: bool | None = None
    """Deprecated in Harbor; still read: it sets network_mode when network_mode and allowed_hosts are absent."""
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None
    memory: str | None = None
    """Deprecated spelling ("2G", "512M"); Harbor maps it to memory_mb."""
    storage: str | None = None

    @field_validator("workdir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r} is not an absolute path in the container")
        return value

    @field_validator("os", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _legacy_sizes(self) -> "EnvironmentSection":
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            text = getattr(self, old)
            if text is not None and getattr(self, new) is None:
                setattr(self, new, size_mb(text))
        if self.allowed_hosts and self.network_mode != "allowlist":
            raise ValueError("allowed_hosts is only valid when network_mode = 'allowlist'")
        return self


class SolutionSection(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class TaskToml(_Section):
    schema_version: str = "1.4"
    task: TaskInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    agent: AgentSection = Field(default_factory=AgentSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
    steps: list[Any] | None = None
    artifacts: list[Any] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _version_rename(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:  # Harbor's older spelling of schema_version
            data = {**data}
            data.setdefault("schema_version", data.pop("version"))
        return data

    @field_validator("schema_version")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in KNOWN_SCHEMA_VERSIONS:
            raise ValueError(f"unknown schema_version {value!r}; this alight reads {', '.join(KNOWN_SCHEMA_VERSIONS)}")
        return value

    def baseline_network(self) -> tuple[NetworkMode, list[str]]:
        """[environment]'s policy; the legacy allow_internet applies only when no policy key is written."""
        env = self.environment
        if env.network_mode is None and env.allowed_hosts is None and env.allow_internet is not None:
            return ("public" if env.allow_internet else "no-network"), []
        return env.network_mode or "public", list(env.allowed_hosts or [])

    def phase_network(self, phase: _Phase) -> tuple[NetworkMode, list[str]]:
        if phase.network_mode is None:
            return self.baseline_network()
        return phase.network_mode, list(phase.allowed_hosts or [])


def size_mb(text: str) -> int:
    """Harbor's _parse_size_to_mb: "2G" -> 2048, "512M" -> 512, "2048K" -> 2."""
    value = text.strip().upper()
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}.get(value[-1:])
    if scale is None:
        raise ValueError(f"size {text!r}: expected a number with G, M or K (e.g. '2G', '512M')")
    return int(float(value[:-1]) * scale)


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\"' -]+?)\s*=")


def key_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the key at `loc` (e.g. ("environment", "cpus")) in a TOML text: the key's own line,
    else its table's header, else None. Good for the forms task.toml files use (tables, dotted keys)."""
    want = [str(p) for p in loc if not isinstance(p, int)]
    best: int | None = None
    table: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = [part.strip().strip("\"'") for part in header.group(1).split(".")]
            if table == want:
                return lineno
            if table and table == want[: len(table)] and best is None:
                best = lineno
            continue
        key = _KEY.match(line)
        if key:
            path = table + [part.strip().strip("\"'") for part in key.group(1).split(".")]
            n = min(len(path), len(want))
            if path[:n] == want[:n]:
                return lineno
    return best
