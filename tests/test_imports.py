"""The package's import graph: no cycle between modules, no import that points up the layers.

Every import counts: module level, inside functions, and `importlib.import_module("...")` strings (an f-string's
constant prefix names the package it reaches into). Only `if TYPE_CHECKING:` blocks are exempt (never run).

Layers (ARCHITECTURE.md, docs/contracts.md), top to bottom; an import may point down or sideways, never up:
  0  testing/ (the shipped test environments stand on the product; nothing of the product imports them),
     cli, __main__, docgen/ (the documentation pages generated from the app, the settings and the errors)
  1  commands/
  2  rollout/, train/, inspect/
  3  harness/, sandbox/, proxy/, serve/, scripted/ (the scripted upstream), tasks/, reward
  4  store/, config, config_paths, errors, process, yaml_files, logs, masking, local_http, the package __init__
Sideways imports the design rules out: the harness knows nothing of the proxy or serving; serve knows nothing
of the proxy; the proxy knows nothing of harnesses, tasks or serving; cli does not import testing/ either.

Run directly (`python tests/test_imports.py [PACKAGE_DIR]`) to print the cycles and violations of any tree.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "agentlightning_cli"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

LAYERS = {
    "testing": 0, "cli": 0, "__main__": 0, "docgen": 0,
    "commands": 1,
    "rollout": 2, "train": 2, "inspect": 2,
    "harness": 3, "sandbox": 3, "proxy": 3, "serve": 3, "scripted": 3, "tasks": 3, "reward": 3,
    "swebench_grade": 3,
    "store": 4, "config": 4, "config_paths": 4, "run_snapshot": 4, "errors": 4, "process": 4, "yaml_files": 4, "logs": 4, "masking": 4, "local_http": 4, "": 4,
}
FORBIDDEN_SIDEWAYS = {
    "cli": {"testing", "docgen"}, "__main__": {"testing", "docgen"},
    "scripted": {"harness", "sandbox", "proxy", "serve", "tasks", "reward", "swebench_grade"},
    "harness": {"proxy", "serve"},
    "serve": {"proxy", "harness"},
    "proxy": {"harness", "tasks", "serve", "reward", "swebench_grade"},
}


def module_names(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST):
    """ast.walk, minus the bodies of `if TYPE_CHECKING:` blocks."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _walk(other)
            continue
        yield child
        yield from _walk(child)


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(imported module, line, exact) for each import in the file; exact=False for an f-string's prefix."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[str, int, bool]] = []

    def add(target: str, line: int, exact: bool = True) -> None:
        # The longest name that is one of our modules (`from a.b import c` may name a function c).
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target.startswith(PACKAGE) and target != name and (target, line, exact) not in found:
            found.append((target, line, exact))

    for node in _walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                add(f"{module}.{alias.name}", node.lineno)
        elif isinstance(node, ast.Call) and node.args and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id == "import_module")):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                add(arg.value, node.lineno)
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                add(str(arg.values[0].value).rstrip("."), node.lineno, exact=False)
    return found


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def analyse(root: Path = ROOT) -> tuple[list[list[str]], list[str]]:
    """(cycles as lists of modules, human-readable layer violations)."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    violations = []
    for name, path in modules.items():
        for target, line, exact in imports_of(name, path, modules):
            if exact:
                graph[name].add(target)
            src, dst = room(name), room(target)
            where = f"{path.relative_to(root.parent)}:{line} imports {target}"
            missing = [r for r in (src, dst) if r not in LAYERS]
            if missing:
                violations.append(f"{where}: '{missing[0]}' has no layer (add it to LAYERS and the docs)")
            elif LAYERS[dst] < LAYERS[src]:
                violations.append(f"{where}: points up ({src or PACKAGE} is layer {LAYERS[src]}, "
                                  f"{dst or PACKAGE} is layer {LAYERS[dst]})")
            elif dst in FORBIDDEN_SIDEWAYS.get(src, ()):
                violations.append(f"{where}: {src} must not depend on {dst}")
    return _cycles(graph), violations


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return result


def test_no_import_cycles() -> None:
    cycles, _ = analyse()
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_points_up_the_layers() -> None:
    _, violations = analyse()
    assert not violations, "\n".join(violations)


def test_the_walker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The checker itself: a lazy import, an import_module string and a relative import are all seen, and a
    TYPE_CHECKING import is not."""
    pkg = tmp_path / PACKAGE
    (pkg / "store").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "store" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from agentlightning_cli import cli\n"
        "def f():\n    from . import b\n"
        "import importlib\nimportlib.import_module('agentlightning_cli.errors')\n")
    (pkg / "store" / "b.py").write_text("def g():\n    import importlib\n    importlib.import_module('agentlightning_cli.store.a')\n")
    cycles, violations = analyse(pkg)
    assert cycles == [["agentlightning_cli.store.a", "agentlightning_cli.store.b"]]
    assert violations == []
    (pkg / "errors.py").write_text("def h():\n    from agentlightning_cli.cli import main\n")
    _, violations = analyse(pkg)
    assert len(violations) == 1 and "errors.py:2 imports agentlightning_cli.cli: points up" in violations[0]


if __name__ == "__main__":
    target = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    # Extra rooms for measuring an older tree, e.g. harnesses=3 recipes=3
    LAYERS.update({k: int(v) for k, v in (a.split("=") for a in sys.argv[2:])})
    FORBIDDEN_SIDEWAYS.update({"harnesses": {"proxy", "serve"}, "recipes": {"proxy", "serve"}})
    found_cycles, found_violations = analyse(target)
    print(f"{len(found_cycles)} cycle(s)")
    for cycle in found_cycles:
        print("  " + " <-> ".join(cycle))
    print(f"{len(found_violations)} layer violation(s)")
    for violation in found_violations:
        print("  " + violation)
