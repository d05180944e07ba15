"""Harness recipes: validated YAML data that says how to install, configure, run and judge one harness.

A recipe is found by name (the shipped `harness_recipes/*.yaml`) or by path (`--harness ./my-recipe.yaml`).
Without `install`, a recipe describes a harness that is already there (external): its command is a program on
PATH, an absolute path, or a path relative to the recipe file or the workspace (resolved per episode, env.py).
Every template is rendered with jinja2's StrictUndefined and checked at load time against a full dummy
context, so a misspelt variable fails when the recipe loads, naming the file and the key, not mid-rollout.
"""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path
from typing import Any, Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator

from agentlightning_cli.errors import AlightError
from agentlightning_cli.masking import looks_like_secret, mask, masked_env
from agentlightning_cli.yaml_files import read_yaml

log = logging.getLogger("alight.recipe")

Protocol = Literal["openai-chat", "anthropic-messages", "openai-responses", "gemini-generate-content"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Install(_Strict):
    kind: Literal["venv", "npm"]
    package: str
    """PyPI or npm package name; the version is pinned separately so a user can override it."""
    version: str
    bin: str
    """The executable the install provides (venv/bin/<bin> or node_modules/.bin/<bin>)."""
    python: str | None = None
    """Python requirement for kind venv, as the package declares it (PEP 440), e.g. "==3.12.*"."""
    node: str | None = None
    """Node requirement for kind npm, e.g. ">=18" (checked before installing)."""
    prerequisites: list[str] = Field(default_factory=list)
    """Other programs the harness needs on PATH at run time (e.g. tmux)."""
    shared_with: str | None = None
    """Another recipe whose install this one uses (same package and version, other settings): one folder,
    `<shared_with>-<version>`, installed once for both."""


class ErrorRule(_Strict):
    match: dict[str, Any]
    """Dotted field path -> value; a record matches when every path holds that value."""
    prefix: dict[str, str] = Field(default_factory=dict)
    """Dotted field path -> text the field's string value starts with, for harnesses that report an error only as
    text (Qwen Code ends an API error with `subtype: success` and a result of "[API Error: ...]")."""
    reason: str
    """Template for the harness_error reason; `record` is the matching JSON object."""


class OutcomeRules(_Strict):
    """How to judge an episode from the harness's own report (the result is harness/outcome.py's EpisodeOutcome)."""

    source: str = "stdout"
    """"stdout" or a file path template (e.g. the trajectory file)."""
    format: Literal["json", "jsonl"] = "jsonl"
    """json: the whole source (or the last JSON line of stdout) is one object; jsonl: every JSON line."""
    errors: list[ErrorRule] = Field(default_factory=list)
    turn_limit: dict[str, Any] | None = None
    """A record matching this means the harness stopped at its turn limit: finished, flagged as such."""
    require: dict[str, Any] | list[dict[str, Any]] | None = None
    """If set, a finished episode needs a record matching this (or one of these); otherwise harness_error."""
    require_reason: str = "the harness did not report success"
    """Template for the reason when `require` is not met; `records` is the list of parsed records."""
    exit_codes: list[int] = Field(default_factory=lambda: [0])
    """Exit codes that are not an error by themselves: the report decides (errors, turn_limit, require). Any other
    exit code is a harness_error. Mistral Vibe exits 3 for every ending it calls the agent's own (a reply cut at
    the token cap, its turn limit, a refusal) and 3 as well for being terminated: its report tells them apart."""


class Stop(_Strict):
    signal: str = "SIGTERM"
    grace_s: float = 5.0
    cleanup: list[list[str]] = Field(default_factory=list)
    """Commands run after the harness exits (always), e.g. killing a daemonised tmux server."""

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, value: str) -> str:
        if not hasattr(signal, value) or not value.startswith("SIG"):
            raise ValueError(f"unknown signal {value!r} (use a name such as SIGTERM or SIGINT)")
        return value


class SandboxRules(_Strict):
    read_only: list[str] = Field(default_factory=list)
    """Extra host paths the harness may read inside the sandbox (a recipe's choice; task sets have no say)."""


class Recipe(_Strict):
    name: str
    description: str
    protocol: Protocol
    install: Install | None = None
    """How alight installs the harness; None: the harness is already there (external, see `command`)."""
    check: list[str] = Field(default_factory=list)
    """A quick command proving the install works (e.g. `--version`); empty: no check."""
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)
    """Path template (relative paths are under the episode's private dir) -> content template."""
    stdin: str | None = None
    """A file path template fed to the harness's stdin, e.g. "{{ prompt_file }}" for a harness that reads its
    prompt from stdin (argv is limited to 128 KB per argument); unset means /dev/null."""
    model: str = "policy"
    """The model name the harness sends; the proxy's alias maps any name to the policy."""
    max_turns: int | None = None
    """Default turn/step limit passed to the command (None where the harness has none)."""
    timeout_s: float = 1800.0
    tool_calls: bool = True
    """The harness offers its tools through the API (tool calling); False for text-mode harnesses that read actions
    from the reply's text. With True, `alight run` warns when the model's chat template never shows the tools."""
    context_tokens: int | None = Field(default=None, gt=0)
    """The context (prompt + answer tokens) the harness needs to work: its first prompt plus room for the
    conversation. `alight run` and `alight serve` start vLLM with at least this max_model_len."""
    outcome: OutcomeRules = Field(default_factory=OutcomeRules)
    stop: Stop = Field(default_factory=Stop)
    sandbox: SandboxRules = Field(default_factory=SandboxRules)
    source: str = Field(default="", exclude=True)
    """Where the recipe was loaded from (set by the loader)."""

    def render(self, template: str, context: dict[str, Any]) -> str:
        return _ENV.from_string(template).render(context)

    @property
    def external(self) -> bool:
        """No `install`: alight runs a program that is already there and installs nothing."""
        return self.install is None

    @property
    def recipe_dir(self) -> Path:
        return Path(self.source).resolve().parent if self.source else Path.cwd()

    def literal_secrets(self) -> list[str]:
        """Names of `env` entries whose literal value looks like a key or token (templates are fine)."""
        return [name for name, value in self.env.items() if looks_like_secret(value)]

    def shown_env(self) -> dict[str, str]:
        """`env` as alight prints or records it: secret-looking literals masked."""
        return masked_env(self.env)

    @field_serializer("env")
    def _mask_env(self, env: dict[str, str]) -> dict[str, str]:
        return masked_env(env)  # every dump of a recipe (JSON output, records) masks literal secrets


_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


class Lenient:
    """A JSON value whose missing fields render as empty text, for error-reason templates."""

    def __init__(self, value: Any = None):
        self._value = value

    def __getattr__(self, name: str) -> "Lenient":
        if name.startswith("__"):
            raise AttributeError(name)
        return self[name]

    def __getitem__(self, key: Any) -> "Lenient":
        v = self._value
        try:
            return Lenient(v[key]) if isinstance(v, (dict, list)) else Lenient()
        except (KeyError, IndexError, TypeError):
            return Lenient()

    def __len__(self) -> int:
        return len(self._value) if isinstance(self._value, (dict, list, str)) else 0

    def __iter__(self):
        return iter(Lenient(v) for v in self._value) if isinstance(self._value, list) else iter(())

    def __bool__(self) -> bool:
        return bool(self._value)

    def __str__(self) -> str:
        v = self._value
        if v is None:
            return ""
        return v if isinstance(v, str) else json.dumps(v)[:500]


def dummy_context() -> dict[str, Any]:
    """Every variable a recipe template may use, with placeholder values (see harness/env.py episode_context)."""
    return {
        "prompt": "Create out.txt", "workspace": "/tmp/ws", "episode_id": "ep-dummy", "episode_dir": "/tmp/ep",
        "home": "/tmp/ep/home", "tmpdir": "/tmp/alight-x", "base_url": "http://127.0.0.1:1/e/ep-dummy/v1",
        "api_key": "key", "model": "policy", "install_dir": "/tmp/h", "bin_dir": "/tmp/h/bin",
        "executable": "/tmp/h/bin/x", "is_root": True, "max_turns": 10, "timeout_s": 60.0,
        "prompt_file": "/tmp/ep/prompt.txt", "recipe_dir": "/tmp/recipes",
    }


def _check_templates(recipe: Recipe, where: str) -> None:
    # Reasons read fields of the harness's own JSON, which vary; only those two names are lenient.
    ctx = {**dummy_context(), "record": Lenient(), "records": Lenient([])}
    ctx["max_turns"] = recipe.max_turns if recipe.max_turns is not None else 0
    pieces: list[tuple[str, str]] = [(f"command[{i}]", t) for i, t in enumerate(recipe.command)]
    pieces += [(f"check[{i}]", t) for i, t in enumerate(recipe.check)]
    pieces += [(f"env.{k}", v) for k, v in recipe.env.items()]
    for path, content in recipe.files.items():
        pieces += [(f"files[{path!r}] (path)", path), (f"files[{path!r}]", content)]
    pieces += [(f"stop.cleanup[{i}][{j}]", t) for i, cmd in enumerate(recipe.stop.cleanup) for j, t in enumerate(cmd)]
    pieces += [("stdin", recipe.stdin)] if recipe.stdin is not None else []
    pieces += [("outcome.source", recipe.outcome.source), ("outcome.require_reason", recipe.outcome.require_reason)]
    pieces += [(f"outcome.errors[{i}].reason", r.reason) for i, r in enumerate(recipe.outcome.errors)]
    for key, template in pieces:
        try:
            recipe.render(template, ctx)
        except jinja2.TemplateError as exc:
            raise AlightError(
                f"{where}: key '{key}': {exc}",
                f"template variables available: {', '.join(sorted(dummy_context()))}",
            ) from exc


def builtin_dirs() -> list[Path]:
    """Shipped recipe folders: inside the installed package, then the source checkout's top-level folder."""
    package_dir = Path(__file__).resolve().parent.parent
    return [package_dir / "harness_recipes", package_dir.parent / "harness_recipes"]


def available() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in builtin_dirs():
        for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            found.setdefault(path.stem, path)
    return found


def load_path(path: Path) -> Recipe:
    data = read_yaml(path)  # bad syntax and duplicate keys are errors naming the file and line(s)
    if not isinstance(data, dict):
        raise AlightError(f"{path}: a recipe is a mapping of keys at the top level")
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            raise AlightError(f"{path}: unknown key '{key}'", "see harness_recipes/*.yaml for the recipe format") from exc
        if err["type"] == "missing":
            raise AlightError(f"{path}: missing key '{key}'") from exc
        raise AlightError(f"{path}: key '{key}': {err['msg']}") from exc
    recipe.source = str(path)
    _check_templates(recipe, str(path))
    for name in recipe.literal_secrets():
        log.warning("%s: env.%s holds a literal value that looks like a secret (%s); it is masked in output, but "
                    "keep keys out of recipe files (alight hands each episode its own key as {{ api_key }})",
                    path, name, mask(recipe.env[name]))
    return recipe


def load(name_or_path: str) -> Recipe:
    """A recipe by shipped name (`codex`) or by path (`./my-recipe.yaml`)."""
    path = Path(name_or_path).expanduser()
    if path.suffix in (".yaml", ".yml") or "/" in name_or_path or path.is_file():
        if not path.is_file():
            raise AlightError(f"recipe file not found: {path}")
        return load_path(path)
    recipes = available()
    if name_or_path in recipes:
        return load_path(recipes[name_or_path])
    tried = ", ".join(str(d / f"{name_or_path}.yaml") for d in builtin_dirs())
    raise AlightError(
        f"unknown harness '{name_or_path}' (tried {tried})",
        f"available: {', '.join(recipes) or 'none'}; or pass a recipe file path",
    )
