"""The tool-call and reasoning parsers a tree's vLLM registers, read from its files (nothing imported).

vLLM refuses `--enable-auto-tool-choice --tool-call-parser NAME`, and `--reasoning-parser NAME`, at
start (validate_api_server_args) when NAME is not registered: a misspelt name (`deepseekv3` for
`deepseek_v3`) would otherwise pass preflight and fail after `run` started the launch. The names come
from one table in 0.12.0 on (`_TOOL_PARSERS_TO_REGISTER` in the tool_parsers package's __init__.py,
`_REASONING_PARSERS_TO_REGISTER` in vllm/reasoning/'s), and before that from each parser module's
`@...Manager.register_module(...)`, the modules the package's __init__.py imports.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from patchkit.base import hints
from patchkit.launch.findings import Finding, cannot_judge


@dataclass(frozen=True)
class ParserKind:
    """One kind of parser a launch names: its option, where its registry is, what vLLM holds to it."""

    option: str  # the launch's option naming the parser
    plugin: str  # the option that loads a parser file of the user's (it may register any name)
    registries: tuple[str, ...]  # the registry's path, newest layout first
    table: str  # the registry's table of lazy registrations (0.12.0 on)
    needs: str | None = None  # the option without which vLLM does not hold the name to its registry
    empty_is_none: bool = False  # vLLM skips an empty name (`--reasoning-parser "$UNSET"` serves)


TOOL = ParserKind(
    "tool-call-parser",
    "tool-parser-plugin",
    ("vllm/tool_parsers/__init__.py", "vllm/entrypoints/openai/tool_parsers/__init__.py"),
    "_TOOL_PARSERS_TO_REGISTER",
    needs="enable-auto-tool-choice",
)
REASONING = ParserKind(
    "reasoning-parser",
    "reasoning-parser-plugin",
    ("vllm/reasoning/__init__.py",),
    "_REASONING_PARSERS_TO_REGISTER",
    empty_is_none=True,
)
KINDS = (TOOL, REASONING)
_MAX_MODULES = 200  # far more parser modules than a release has: an __init__ importing more is not vLLM's

Reader = Callable[[str], "bytes | None"]


def registered(read: Reader, kind: ParserKind = TOOL) -> tuple[str, set[str]] | None:
    """(the registry's path, the parser names it registers), or None when the tree holds no registry
    patchkit can read whole (a tree from `fetch --dest` has none): then nothing is judged."""
    for path in kind.registries:
        tree = _parsed(read(path))
        if tree is None:
            continue
        names = _table(tree, kind.table)
        if names is None:
            names = _decorated(tree, path.rpartition("/")[0], read)
        return (path, names) if names else None
    return None


def findings(check: str, options: dict[str, object], version: object, read: Reader, root: Path) -> list[Finding]:
    """The `check` findings for each parser the launch names: failed when vLLM refuses it at start,
    cannot judge when the tree holds no registry patchkit can read (`root`: the tree, for the fix)."""
    found = (finding(check, options, version, read, root, kind) for kind in KINDS)
    return [f for f in found if f is not None]


def finding(
    check: str, options: dict[str, object], version: object, read: Reader, root: Path, kind: ParserKind = TOOL
) -> Finding | None:
    """A failed `check` finding when the launch's parser of `kind` is one vLLM refuses at start, a
    cannot-judge one when the registry cannot be read; None when it is registered or not held to the
    registry (no --enable-auto-tool-choice for a tool-call parser; a plugin option may register it)."""
    name = options.get(kind.option)
    if (kind.needs and not options.get(kind.needs)) or not isinstance(name, str) or options.get(kind.plugin):
        return None
    if kind.empty_is_none and not name:
        return None
    found = registered(read, kind)
    if found is None:
        return _unread(check, name, version, read, root, kind)
    if name in found[1]:
        return None
    path, names = found
    vllm = f"vLLM {version}" if version else "this vLLM"
    what = kind.option.removesuffix("-parser")  # tool-call, reasoning
    message = f"--{kind.option} {name}: {vllm} registers no {what} parser of that name ({path}): it refuses the launch at start"
    return Finding(check, False, message, _fix(name, names, kind))


def _unread(check: str, name: str, version: object, read: Reader, root: Path, kind: ParserKind) -> Finding:
    """Cannot judge the parser's name: never a silent pass (a `fetch --dest` tree has no registry)."""
    held = [path for path in kind.registries if read(path) is not None]
    what = kind.option.removesuffix("-parser")
    if held:  # there, but not a registry patchkit reads whole (a module it imports is missing or odd)
        reason = f"--{kind.option} {name}: patchkit cannot read the {what} parsers {held[0]} registers"
    else:
        reason = f"--{kind.option} {name}: the tree has no {kind.registries[0]} (a tree of only the patched files?)"
    # as LaunchContext.lacks says it; --python alone, since this check reads the tree --target names
    whole = hints.command("fetch", str(version or "VERSION"), "--all", "--dest", str(root))
    gives = f"lay out the whole release ({whole}), or check the venv you launch (--python PATH in place of --target)"
    return cannot_judge(check, reason, gives)


def _fix(name: str, names: set[str], kind: ParserKind) -> str:
    close = _closest(name, names)
    if close is not None:
        return f"did you mean {close}? write --{kind.option} {close}"
    return f"write one of {', '.join(sorted(names))}, or load your own with --{kind.plugin}"


def _closest(name: str, names: set[str]) -> str | None:
    """The registered name `name` misspells: the same but for case, `-` and `_`, else the closest."""

    def plain(text: str) -> str:
        return text.lower().replace("-", "").replace("_", "")

    same = sorted(n for n in names if plain(n) == plain(name))
    if same:
        return same[0]
    import difflib  # lazy: a misspelt parser's name only; `run`'s fast path loads this module

    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.75)
    return close[0] if close else None


def _parsed(data: bytes | None) -> ast.Module | None:
    if data is None:
        return None
    try:
        return ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _table(tree: ast.Module, table: str) -> set[str] | None:
    """The keys of the module's `TABLE = {...}` (None: it has no such table)."""
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        targets = node.targets if isinstance(node, ast.Assign) else [target] if target is not None else []
        value = getattr(node, "value", None)
        if any(isinstance(t, ast.Name) and t.id == table for t in targets) and isinstance(value, ast.Dict):
            return {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return None


def _decorated(tree: ast.Module, package: str, read: Reader) -> set[str]:
    """The names each module the package's __init__ imports (`from .x import ...`) registers with
    `@...Manager.register_module(...)`; empty when a module cannot be read (not judged)."""
    modules = [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module]
    names: set[str] = set()
    for module in modules[:_MAX_MODULES]:
        parsed = _parsed(read(f"{package}/{module}.py"))
        if parsed is None:
            return set()
        names |= _registered_by(parsed)
    return names


def _registered_by(tree: ast.Module) -> set[str]:
    """The names a module's `register_module(...)` decorators give (a name, a list of names, or name=)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for call in node.decorator_list:
            if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "register_module":
                given = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "name")]
                names |= {text for value in given for text in _strings(value)}
    return names


def _strings(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []
