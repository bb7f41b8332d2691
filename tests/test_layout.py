"""The module layout the README's architecture section describes, held against the code's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import patchkit

PACKAGE = Path(patchkit.__file__).parent

# Lower layers never import higher ones (the README's table, bottom up).
LAYERS = [
    {"errors", "enums", "fsutil", "locks", "options", "pipconfig", "seal", "signals", "_target"},
    {"target", "version", "record", "state", "patchfile", "requirements", "library", "provenance"},
    {"plan", "transaction", "guard", "inspection", "checks", "fetch", "release_files", "resolve", "installed_wheel"},
    {"operations", "maintainer", "launch", "wheel"},
    {"release_check", "fleet"},
    {"commands", "ui", "cli", "__main__"},
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every patchkit module this file imports, at any depth (lazy imports inside functions count)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("patchkit")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("patchkit"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports(path) if m in files and m != name} for name, path in files.items()}


def top(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def layer(module: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if top(module) in names)


def test_every_module_has_a_layer():
    assert [m for m in graph() if m != "patchkit" and not any(top(m) in names for names in LAYERS)] == []


def test_no_module_imports_a_higher_layer():
    upward = [
        (name, dep)
        for name, deps in graph().items()
        if name != "patchkit"
        for dep in deps
        if dep != "patchkit" and layer(dep) > layer(name)
    ]
    assert upward == []


def test_there_is_no_import_cycle_between_top_level_modules():
    edges = {}
    for name, deps in graph().items():
        if name == "patchkit":
            continue
        edges.setdefault(top(name), set()).update(top(d) for d in deps if d != "patchkit" and top(d) != top(name))

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in edges.get(start, ()))

    assert sorted(m for m in edges if reaches(m, m, {m})) == []


def test_the_workers_never_import_patchkit():
    """They run in the target's interpreter, where patchkit is not installed."""
    assert all(not deps for name, deps in graph().items() if top(name) == "_target")
