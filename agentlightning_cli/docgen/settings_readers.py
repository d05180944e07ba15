"""Which `alight` command reads which settings section, found in the source (the settings reference's "read by").

Static, by a call graph over the package's top-level functions and classes: from a command's function (and the
app's callback, which every command runs), follow every name that resolves, through the module's imports (local
ones included: commands import lazily), to a function or class of the package; a unit reads a section where it
takes `.serve`, `.proxy`, ... of a settings object — an expression whose name says `settings` (`settings.serve`,
`arm_settings.eval`, `self.settings.proxy`), a parameter annotated `Settings`, or `load_settings().container`.
`settings.model_dump(...)` reads every key (`alight config show`). Records with a field of the same name
(`episode.reward`) are not settings and do not count.

What it can miss: a section reached only through a method of an object built elsewhere (`server.start()`); the
caller that handed the section over (`VLLMServer(settings.serve)`) is what counts, and that caller is on the path.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

Unit = tuple[str, str]  # (module, top-level name)
EVERY = "*"


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class SourceGraph:
    """The package's modules, their top-level units, and for each unit what it calls and which keys it reads."""

    def __init__(self, package_dir: Path, keys: Iterable[str], settings_module: str) -> None:
        self.keys = set(keys)
        self.settings_module = settings_module  # defines the keys: its own `.serve` etc. are not reads
        self.modules = {_module_name(package_dir, p): ast.parse(p.read_text(), str(p))
                        for p in sorted(package_dir.rglob("*.py"))}
        self.units: dict[Unit, ast.AST] = {
            (m, node.name): node for m, tree in self.modules.items() for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        self._top = {m: self._bindings(m, [n for n in tree.body
                                           if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))])
                     for m, tree in self.modules.items()}
        self.calls: dict[Unit, set[Unit]] = {}
        self.reads: dict[Unit, set[str]] = {}
        for unit in self.units:
            self.calls[unit], self.reads[unit] = self._scan(unit)

    def _bindings(self, module: str, nodes: list[ast.AST]) -> dict[str, tuple[str, object]]:
        """Names bound by imports: to a module of the package ("module", name) or a unit ("unit", (module, name))."""
        bound: dict[str, tuple[str, object]] = {}
        for node in nodes:
            for n in ast.walk(node):
                if isinstance(n, ast.Import):
                    for alias in n.names:
                        if alias.name in self.modules:
                            target = alias.name if alias.asname else alias.name.split(".")[0]
                            bound[alias.asname or target] = ("module", target)
                elif isinstance(n, ast.ImportFrom) and n.module:
                    base = n.module if not n.level else ".".join([*module.split(".")[:-n.level], n.module])
                    for alias in n.names:
                        if f"{base}.{alias.name}" in self.modules:
                            bound[alias.asname or alias.name] = ("module", f"{base}.{alias.name}")
                        elif (base, alias.name) in self.units:
                            bound[alias.asname or alias.name] = ("unit", (base, alias.name))
        return bound

    def _scan(self, unit: Unit) -> tuple[set[Unit], set[str]]:
        module, _ = unit
        node = self.units[unit]
        bound = {name: ("unit", (m, name)) for (m, name) in self.units if m == module}
        bound |= self._top[module] | self._bindings(module, [node])
        settings_params = {a.arg for a in ast.walk(node) if isinstance(a, ast.arg) and a.annotation is not None
                           and ast.unparse(a.annotation).split("|")[0].strip().strip("\"'") == "Settings"}
        calls: set[Unit] = set()
        reads: set[str] = set()
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and bound.get(n.id, ("",))[0] == "unit":
                calls.add(bound[n.id][1])  # type: ignore[arg-type]
            elif isinstance(n, ast.Attribute):
                reached = self._dotted_unit(n, bound)
                if reached is not None:  # a path through a module: a call when it names a unit, never a read
                    if reached in self.units:
                        calls.add(reached)
                elif module != self.settings_module and self._on_settings(n.value, settings_params):
                    if n.attr in self.keys:
                        reads.add(n.attr)
                    elif n.attr == "model_dump":
                        reads.add(EVERY)
        return calls, reads

    def _dotted_unit(self, node: ast.Attribute, bound: dict) -> Unit | None:
        """`module.sub.function` through an imported package module: the unit it names (None: not such a path)."""
        parts = []
        value: ast.AST = node
        while isinstance(value, ast.Attribute):
            parts.append(value.attr)
            value = value.value
        if not (isinstance(value, ast.Name) and bound.get(value.id, ("",))[0] == "module"):
            return None
        path = bound[value.id][1]
        for part in reversed(parts):
            if f"{path}.{part}" in self.modules:
                path = f"{path}.{part}"
            elif (path, part) in self.units:
                return (path, part)
            else:
                break
        return ("", "")  # a module's attribute that is no unit

    @staticmethod
    def _on_settings(value: ast.AST, settings_params: set[str]) -> bool:
        if isinstance(value, ast.Call):  # load_settings().container
            func = value.func
            return (func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")) == "load_settings"
        name = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else ""
        return "settings" in name.lower() or name in settings_params

    def reach(self, roots: Iterable[Unit]) -> set[str]:
        """The keys read by everything the roots call, transitively (EVERY when one of them dumps the settings)."""
        seen: set[Unit] = set()
        stack = [r for r in roots if r in self.units]
        while stack:
            unit = stack.pop()
            if unit in seen:
                continue
            seen.add(unit)
            stack += [u for u in self.calls[unit] if u in self.units and u not in seen]
        return set().union(*(self.reads[u] for u in seen)) if seen else set()


def readers(keys: Iterable[str]) -> dict[str, list[str]]:
    """{top-level settings key: the `alight …` commands that read it}, from this package's source and CLI tree."""
    import inspect

    import agentlightning_cli
    from agentlightning_cli.docgen.cli_reference import root_command, walk

    keys = list(keys)
    graph = SourceGraph(Path(agentlightning_cli.__file__).parent, keys, "agentlightning_cli.config")
    root = root_command()
    app_callback = inspect.unwrap(root.callback)
    found: dict[str, list[str]] = {key: [] for key in keys}
    for path, command in walk(root):
        if getattr(command, "commands", None) or command.callback is None:
            continue  # a group: its subcommands are listed
        func = inspect.unwrap(command.callback)
        read = graph.reach([(func.__module__, func.__name__), (app_callback.__module__, app_callback.__name__)])
        for key in keys:
            if key in read or EVERY in read:
                found[key].append(" ".join(path))
    return found
