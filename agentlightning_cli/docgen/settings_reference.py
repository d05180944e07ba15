"""docs/reference/settings.md from config.Settings: every key with its type, default, environment variable and the
docstring written under the field in config.py (read with ast: the settings model does not keep them itself)."""

from __future__ import annotations

import ast
import inspect
import typing
from typing import Any

HEADER = ("<!-- generated from agentlightning_cli/config.py by `python -m agentlightning_cli.docgen --write`;"
          " do not edit by hand -->\n")


def field_docs(cls: type) -> dict[str, str]:
    """The string literal right under each `name: type = default` of the class body (PEP 257 attribute docstrings)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for stmt, after in zip(body, body[1:]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


def env_name(path: tuple[str, ...]) -> str:
    """config._env_layer's naming read backwards: ALIGHT_ + the key path upper-cased, joined by `__`."""
    from agentlightning_cli.config import ENV_NESTING, ENV_PREFIX

    return ENV_PREFIX + ENV_NESTING.join(path).upper()


def _type_name(annotation: Any) -> str:
    # a class prints as <class 'int'>: its name; unions, Literal and generics print as written
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    for noise in ("typing.", "pathlib.", "agentlightning_cli.config."):
        text = text.replace(noise, "")
    return text


def _default(field: Any, path: tuple[str, ...]) -> str:
    if path == ("home",):
        return "`~/.alight`"  # a factory of the user's own HOME: written the way the user reads it
    if field.default_factory is not None:
        value = field.default_factory()
    else:
        value = field.default
    if value is None:
        return "(empty)"
    if hasattr(value, "model_dump"):
        return ""
    return f"`{value}`"


def _section(model: type) -> Any:
    """The settings model a field holds, if any: a section directly, or the values of a dict of sections."""
    from pydantic import BaseModel

    if isinstance(model, type) and issubclass(model, BaseModel):
        return model
    args = typing.get_args(model)
    if (typing.get_origin(model) is dict and len(args) == 2 and isinstance(args[1], type)
            and issubclass(args[1], BaseModel)):
        return args[1]
    return None


def rows(model: type, path: tuple[str, ...] = ()):
    """(key path, field, docstring, sub-model or None) for every field, depth first."""
    docs = field_docs(model)
    for name, field in model.model_fields.items():
        here = (*path, name)
        sub = _section(field.annotation)
        yield here, field, docs.get(name, ""), sub
        if sub is not None:
            # a dict of sections (harness.<name>): its keys are the user's names
            yield from rows(sub, (*here, "<name>") if sub is not field.annotation else here)


def _cell(text: str) -> str:
    """One table cell: one line, pipes escaped, and `<name>` outside code spans kept as text, not read as HTML."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


TABLE = ["| key | type | default | environment | what it does |", "|---|---|---|---|---|"]
TOP_TABLE = [TABLE[0] + " read by |", TABLE[1] + "---|"]


def _row(path: tuple[str, ...], field: Any, doc: str, read_by: str | None = None) -> str:
    row = (f"| `{'.'.join(path)}` | `{_type_name(field.annotation).replace('|', chr(92) + '|')}` | "
           f"{_default(field, path)} | `{env_name(path)}` | {_cell(doc)} |")
    return row if read_by is None else f"{row} {read_by} |"


def _commands(names: list[str], every: int) -> str:
    if len(names) == every:
        return "every command"
    return ", ".join(f"`{name}`" for name in names) or "no command"


def render() -> str:
    from agentlightning_cli.config import Settings
    from agentlightning_cli.docgen.cli_reference import root_command, walk
    from agentlightning_cli.docgen.settings_readers import readers

    read_by = readers(Settings.model_fields)
    every = sum(1 for _, c in walk(root_command()) if not getattr(c, "commands", None))
    out = [HEADER, "# Settings reference", "",
           "Every key alight reads from `alight.yaml` (project), `~/.config/alight/config.yaml` (user) or the",
           "environment, with its type and default ([Configuration](../configuration.md) explains the layers).",
           "In the environment a nested key joins its parts with `__`; the value is read as YAML",
           "(`ALIGHT_SERVE__DEVICES='[0, 1]'`); `<NAME>` stands for a harness's name.",
           "`alight config show` prints the resolved values.",
           "*Read by* lists the commands whose code reads a key or its section (found in the source by",
           "`agentlightning_cli/docgen/settings_readers.py`, following calls from each command).",
           "", "## Top level", "", *TOP_TABLE]
    sections = []
    for path, field, doc, sub in rows(Settings):
        if len(path) == 1 and sub is None:
            out.append(_row(path, field, doc, _commands(read_by[path[0]], every)))
        elif len(path) == 1:
            sections.append((path[0], sub, []))
        elif sub is None:
            sections[-1][2].append(_row(path, field, doc))
    for name, sub, lines in sections:
        out += ["", f"## `{name}`", ""]
        if sub.__doc__ and "Usage docs" not in sub.__doc__:
            out += [inspect.cleandoc(sub.__doc__), ""]
        out += [f"Read by: {_commands(read_by[name], every)}.", ""]
        out += [*TABLE, *lines]
    return "\n".join(out).rstrip() + "\n"
