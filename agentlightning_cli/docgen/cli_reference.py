"""docs/reference/cli.md from the Typer app itself: every command, argument and option with its default and help."""

from __future__ import annotations

from typing import Any

HEADER = ("<!-- generated from agentlightning_cli/cli.py by `python -m agentlightning_cli.docgen --write`;"
          " do not edit by hand -->\n")


def root_command() -> Any:
    """The click command tree Typer builds for `alight` (Typer vendors its own click: no `click` import)."""
    import typer.main

    from agentlightning_cli.cli import app

    return typer.main.get_command(app)


def walk(command: Any, path: tuple[str, ...] = ("alight",)):
    """(path, command) for the command and every visible subcommand, depth first, in the order --help lists them."""
    yield path, command
    for name in getattr(command, "commands", {}):
        sub = command.commands[name]
        if not sub.hidden:
            yield from walk(sub, (*path, name))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(param: Any) -> str:
    # Completion options are Typer's own plumbing; flags read as on/off; None means "not given".
    if getattr(param, "is_flag", False) and not getattr(param, "secondary_opts", None):
        return "off" if not param.default else "on"
    if param.default is None or param.default == () or param.default == []:
        return ""
    return f"`{param.default}`"


def _names(param: Any, ctx: Any) -> str:
    if param.param_type_name == "argument":
        return f"`{param.make_metavar(ctx)}`"
    names = ", ".join(f"`{opt}`" for opt in (*param.opts, *param.secondary_opts))
    if not getattr(param, "is_flag", False):
        names += f" `{param.make_metavar(ctx)}`"
    return names


def render() -> str:
    root = root_command()
    out = [HEADER, "# CLI reference", "",
           "Every `alight` command with its arguments and options, as `alight COMMAND --help` prints them.",
           "Options given more than once where marked *repeatable*; *required* ones have no default.", ""]
    for path, command in walk(root):
        ctx = command.make_context(path[-1], [], resilient_parsing=True)
        out += [f"## `{' '.join(path)}`", ""]
        if command.help:
            out += [command.help.strip(), ""]
        usage = " ".join(command.collect_usage_pieces(ctx))
        out += ["```text", f"{' '.join(path)} {usage}".rstrip(), "```", ""]
        params = [p for p in command.params if not p.hidden and p.name not in ("install_completion", "show_completion")]
        if params:
            out += ["| argument / option | default | help |", "|---|---|---|"]
            for p in params:
                notes = [n for n, on in (("*required*", p.required), ("*repeatable*", getattr(p, "multiple", False)))
                         if on]
                help_text = _cell(" ".join([*notes, getattr(p, "help", None) or ""]))
                out.append(f"| {_names(p, ctx)} | {_default(p)} | {help_text} |")
            out.append("")
        subs = [name for name, sub in getattr(command, "commands", {}).items() if not sub.hidden]
        if subs:
            out += ["Commands: " + ", ".join(f"`{' '.join((*path, name))}`" for name in subs) + ".", ""]
    return "\n".join(out).rstrip() + "\n"
