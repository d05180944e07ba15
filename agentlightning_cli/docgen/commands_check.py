"""Every `alight ...` command line the README and the docs show, parsed against the Typer app with click's own
parser: an unknown command, option or setting is an error naming the file and line.

What counts as a command line: a fenced shell block's line, a `$ ` line in any block, or an inline code span,
where `alight` stands in command position: at the start, after `$ `, environment assignments, `.venv/bin/`, `exec`, or after `&&`, `;`,
`|`, `(`. Synopses are read too: `[ ]` and `\\|` (a table's escaped pipe) are dropped, an UPPER-CASE word or `…`
where a command belongs (`alight -v CMD`) stands for any command, and values are not checked (`--rounds N`).
Settings: an `ALIGHT_*=` assignment, or a code span that is a `section.key` (`train.max_row_tokens`)."""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path
from typing import Any, Iterator

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w-]*)")
SHELL_LANGS = {"", "bash", "sh", "shell", "console", "zsh"}
INLINE = re.compile(r"(`+)(.+?)\1")
ASSIGN = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
PLACEHOLDER = re.compile(r"^([A-Z][A-Z_]*|…|\.\.\.)$")  # `alight CMD`, `alight …`
SEPARATORS = {"&&", "||", ";", "|", "(", ")"}


def candidate_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every fenced shell line and inline code span that may hold a command."""
    fence: str | None = None
    lang = ""
    pending = ""
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match and (fence is None or match.group(2).startswith(fence[0]) and len(match.group(2)) >= len(fence)):
            if fence is None:
                fence, lang = match.group(2), match.group(3).lower()
            else:
                fence = None
            continue
        if fence is not None:
            if lang in SHELL_LANGS:
                # a line ending in `\` continues on the next
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                    continue
                yield number, pending + line
                pending = ""
            elif line.startswith("$ "):
                yield number, line  # a command typed above its output in a `text` block
            continue
        if line.startswith("    ") and line.strip().startswith("alight "):
            yield number, line.strip()  # an indented code block
            continue
        for span in INLINE.finditer(line):
            if len(span.group(1)) == 1:
                yield number, span.group(2).strip()
            else:  # a ``span`` quotes text holding `code` (troubleshooting's messages): its inner spans count
                yield from ((number, inner.group(2).strip()) for inner in INLINE.finditer(span.group(2)))


def commands_in(line: str) -> Iterator[list[str]]:
    """The argument lists after each `alight` in command position."""
    line = line.replace("\\|", " ").replace("[", " ").replace("]", " ")
    line = re.sub(r"(?<!\S)#.*$", "", line)  # a shell comment
    line = re.sub(r"^\s*\$\s+", "", line)
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return
    start = True
    for i, token in enumerate(tokens):
        if token in SEPARATORS:
            start = True
            continue
        if start and (ASSIGN.match(token) or token in ("exec", "sudo", "time", "env")):
            continue
        if start and (token == "alight" or token.endswith("/bin/alight")):
            args = []
            for rest in tokens[i + 1:]:
                if rest in SEPARATORS or rest.startswith((">", "<", "2>")):
                    break
                args.append(rest)
            yield args
        start = False


def check_args(root: Any, args: list[str]) -> str | None:
    """None when click's option parser takes the line, else why not. Only names are checked: the parser alone runs
    (no value conversion, no required options, no callbacks such as --version's), on a context of its own."""
    parent = None
    command, name = root, "alight"
    while True:
        ctx = command.context_class(command, info_name=name, parent=parent)
        try:
            _, rest, _ = command.make_parser(ctx).parse_args(list(args))
        except Exception as exc:  # click's UsageError family (Typer vendors click: matched by name)
            if type(exc).__name__ == "NoSuchOption":
                return f"`{name}`: {exc.format_message()}"
            return None  # a value missing after an option in a synopsis: not a name problem
        if not hasattr(command, "commands") or not rest:
            return None
        sub = command.get_command(ctx, rest[0])
        if sub is None and "browse" in command.commands:
            # `alight inspect [RUN]`: inspect's group runs its hidden browse command for a first word that is no
            # command (cli._InspectGroup)
            command, name, args, parent = command.commands["browse"], "browse", rest, ctx
            continue
        if sub is None:
            if PLACEHOLDER.match(rest[0]):
                return None
            return f"`{name}`: no such command '{rest[0]}'"
        command, name, args, parent = sub, rest[0], rest[1:], ctx


@functools.cache
def _setting_names() -> tuple[frozenset[str], tuple[str, ...]]:
    """Every ALIGHT_* name a setting answers to, and the prefixes of those with a user's name in them."""
    from agentlightning_cli.config import Settings
    from agentlightning_cli.docgen.settings_reference import env_name, rows

    known = frozenset(env_name(path) for path, *_ in rows(Settings))
    return known, tuple(name.split("<NAME>")[0] for name in known if "<NAME>" in name)


def unknown_setting(line: str) -> str | None:
    """An ALIGHT_* assignment in the line that names no setting."""
    known, known_prefixes = _setting_names()
    extra = {"ALIGHT_TORCH_WHEELS", "ALIGHT_TORCH_INDEX", "ALIGHT_SMOLLM2_WHEEL"}  # read by scripts, not settings
    for token in re.findall(r"(?<![\w$])(ALIGHT_[A-Z0-9_]+)=", line):
        if token not in known and token not in extra and not any(token.startswith(p) for p in known_prefixes):
            return f"unknown setting {token}"
    return None


@functools.cache
def _setting_keys() -> tuple[frozenset[str], re.Pattern[str]]:
    """Every dotted settings key (`harness.<name>.python` for a harness's), and a pattern for a code span that
    names one: `serve.model`, `serve.model: smollm2`."""
    from agentlightning_cli.config import Settings
    from agentlightning_cli.docgen.settings_reference import rows

    keys = frozenset(".".join(path) for path, *_ in rows(Settings))
    sections = sorted(name for name in Settings.model_fields if any(k.startswith(name + ".") for k in keys))
    return keys, re.compile(r"^(%s)\.([\w.<>-]+?)(?::\s.*|:)?$" % "|".join(sections))


PACKAGE = Path(__file__).resolve().parents[1]
# Pages about the Python APIs between modules, where `proxy.upstream_url` is an object's attribute, not a setting.
API_PAGES = {"contracts.md"}


def unknown_setting_key(span: str) -> str | None:
    """A code span naming a settings key (`train.max_row_tokens`) that config.Settings does not have. A span that
    names one of alight's modules (`serve.gpu_plan`) or a file (`proxy.json`) is not a key."""
    keys, pattern = _setting_keys()
    match = pattern.match(span)
    if not match:
        return None
    parts = [match.group(1), *match.group(2).split(".")]
    # `serve.gpu_plan`, `proxy.recorder.failure`: a module, or a name inside one
    for end in range(2, len(parts) + 1):
        module = PACKAGE.joinpath(*parts[:end])
        if module.with_suffix(".py").is_file() or module.is_dir():
            return None
    if parts[-1] in ("json", "jsonl", "py", "yaml", "yml", "md", "txt", "sh", "toml", "log", "db"):
        return None
    if parts[0] == "harness" and len(parts) == 3:
        parts[1] = "<name>"
    return None if ".".join(parts) in keys else f"unknown setting {'.'.join(parts)}"


def problems(paths: list[Path], root_dir: Path) -> list[str]:
    """`file:line: the line: why`, for every command line that does not parse; [] when all do."""
    from agentlightning_cli.docgen.cli_reference import root_command

    root = root_command()
    found = []
    for path in paths:
        for number, line in candidate_lines(path.read_text(encoding="utf-8")):
            where = f"{path.relative_to(root_dir)}:{number}: {line.strip()}"
            bad = unknown_setting(line) or (None if path.name in API_PAGES else unknown_setting_key(line.strip()))
            if bad:
                found.append(f"{where}: {bad}")
            for args in commands_in(line):
                why = check_args(root, args)
                if why:
                    found.append(f"{where}: {why}")
    return found


def count_commands(paths: list[Path]) -> int:
    return sum(1 for path in paths for _, line in candidate_lines(path.read_text(encoding="utf-8"))
               for _ in commands_in(line))
