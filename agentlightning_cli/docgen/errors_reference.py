"""docs/troubleshooting.md from the code: every `AlightError(message, hint)` the package raises, found by reading
the source (ast), never by running it. A message built at run time shows its `{expressions}` as written."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
HEADER = ("<!-- generated from every AlightError(...) in agentlightning_cli/ by"
          " `python -m agentlightning_cli.docgen --write`; do not edit by hand -->\n")
# The AlightError subclasses raise the same way (message, hint) and print the same.
ERROR_CLASSES = {"AlightError", "NothingToTrain", "VLLMDied"}
# Where each top-level part of the package is documented, for the page's "see" column.
AREAS = {
    "cli": "Commands", "commands": "Commands", "config": "Configuration", "yaml_files": "Configuration",
    "harness": "Harnesses", "sandbox": "Sandboxes", "proxy": "The recording proxy", "serve": "Serving models",
    "tasks": "Task sets", "reward": "Task sets", "swebench_grade": "Task sets", "rollout": "Running a task set",
    "train": "Training", "inspect": "Inspecting runs", "store": "The store",
}


def _text(node: ast.AST | None) -> str | None:
    """A string argument as the user reads it: literals as they are, f-string holes as `{expression}`."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is not None and right is not None:
            return left + right
    return "{" + ast.unparse(node) + "}"


def _function_of(tree: ast.AST) -> dict[int, str]:
    names: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in ast.walk(node):
                if hasattr(child, "lineno"):
                    names.setdefault(child.lineno, node.name)
    return names


def find_errors(root: Path = PACKAGE) -> list[dict[str, str]]:
    """Each error the package can raise: module, function, message, hint; sorted so the page is stable."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        if module.startswith(("testing", "docgen", "scripted")):
            continue  # test environments and this generator: not what a user meets
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        functions = _function_of(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ERROR_CLASSES
                    and node.args):
                continue
            hint_node = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "hint"), None)
            hint = _text(hint_node)
            found.append({"module": module, "function": functions.get(node.lineno, ""),
                          "message": _text(node.args[0]) or "", "hint": "" if hint in (None, "{None}") else hint})
    return sorted(found, key=lambda e: (AREAS.get(e["module"].split(".")[0], "Other"), e["module"], e["message"]))


def _cell(text: str) -> str:
    """A table cell shown as code: one line, backticks and pipes made safe."""
    text = " ".join(text.split()).replace("|", "\\|")
    return f"`` {text} ``" if text else ""  # the spaces let a message start or end with a backtick


def render() -> str:
    errors = find_errors()
    out = [HEADER, "# Troubleshooting", "",
           "Every error alight prints is one line and a hint on stderr, and exits 1 (usage errors exit 2, Ctrl-C 130):",
           "", "```text", "error: WHAT went wrong, WHERE (the file, line, setting or task)", "hint: THE FIX", "```", "",
           "This page lists every such error in the code, grouped by the part of alight that raises it, with its",
           "hint. `{...}` marks what is filled in when it is printed (a path, a name, a number).",
           "`alight doctor` checks an installation before a run; `alight -v COMMAND` (or `--log-level debug`) shows",
           "what alight did up to the error.", "",
           f"{len(errors)} errors in {len({e['module'] for e in errors})} modules.", ""]
    area = None
    for e in errors:
        here = AREAS.get(e["module"].split(".")[0], "Other")
        if here != area:
            area = here
            out += ["", f"## {area}", "", "| error | hint | raised in |", "|---|---|---|"]
        where = f"`{e['module']}`" + (f" `{e['function']}()`" if e["function"] else "")
        out.append(f"| {_cell(e['message'])} | {_cell(e['hint'])} | {where} |")
    return "\n".join(out).rstrip() + "\n"
