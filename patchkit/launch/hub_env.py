"""The HF_HUB_* variables huggingface_hub converts as it is imported (its constants.py: int() of
HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT, ...): transformers imports it as vLLM starts, so a value
int() refuses stops every vLLM command at start. Read from the launch's own huggingface_hub (beside
vllm/ in its site-packages, read as a tree file); preflight's import path finds these by importing."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

from patchkit.checks.parsed import python_tree
from patchkit.launch.env_json import shown_setting
from patchkit.launch.findings import Finding

CHECK, CONSTANTS = "vllm-environment", "huggingface_hub/constants.py"
CONVERTERS: dict[str, tuple[Callable[[str], object], str]] = {
    "int": (int, "an integer"),
    "float": (float, "a number"),
}
READERS = ("os.environ.get", "os.getenv")


def hub_findings(environ: Mapping[str, str], read: Callable[[str], bytes | None]) -> list[Finding]:
    """A failing finding for each variable huggingface_hub's constants.py converts at import that the
    launch sets to what that conversion refuses (none where the file is not beside vllm/)."""
    if not any(name.startswith("HF_") for name in environ):
        return []
    source = read(CONSTANTS)
    found = []
    for name, call in sorted(conversions(source).items()):
        value = environ.get(name)
        if value is None:
            continue
        convert, kind = CONVERTERS[call]
        try:
            convert(value)
        except ValueError:
            why = f"{shown_setting(name, value)} is not {kind}: {CONSTANTS} reads it with {call}() as it is imported"
            at = "which every vLLM command does at start: it fails there"
            found.append(Finding(CHECK, False, f"{why} {at}", f"give {name} {kind}, or unset it"))
    return found


def conversions(source: bytes | None) -> dict[str, str]:
    """Each variable a module-level assignment of constants.py converts: NAME -> "int" or "float",
    of int()/float() of os.environ.get(NAME) or os.getenv(NAME), directly or through one of its own
    functions that int()s its argument (_as_int)."""
    module = python_tree(source, CONSTANTS) if source else None
    if module is None:
        return {}
    own = {node.name: _converts(node) for node in module.body if isinstance(node, ast.FunctionDef)}
    found: dict[str, str] = {}
    for statement in module.body:
        if not isinstance(statement, ast.Assign | ast.AnnAssign) or statement.value is None:
            continue
        for node in ast.walk(statement.value):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1):
                continue
            call = node.func.id if node.func.id in CONVERTERS else own.get(node.func.id)
            name = _read_name(node.args[0])
            if call is not None and name is not None:
                found[name] = call
    return found


def _converts(function: ast.FunctionDef) -> str | None:
    """ "int" where `function` (one argument) returns int() of it unless it is None (_as_int)."""
    params = [a.arg for a in function.args.args]
    returns = [n.value for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None]
    calls = [
        r.func.id
        for r in returns
        if isinstance(r, ast.Call)
        and isinstance(r.func, ast.Name)
        and r.func.id in CONVERTERS
        and len(r.args) == 1
        and isinstance(r.args[0], ast.Name)
        and r.args[0].id == (params[0] if len(params) == 1 else None)
    ]
    others = [r for r in returns if not (isinstance(r, ast.Constant) and r.value is None)]
    return calls[0] if len(calls) == 1 and len(others) == 1 else None


def _read_name(node: ast.AST) -> str | None:
    """NAME where `node` is os.environ.get(NAME[, default]) or os.getenv(NAME[, default])."""
    if not (isinstance(node, ast.Call) and ast.unparse(node.func) in READERS and len(node.args) in (1, 2)):
        return None
    key = node.args[0]
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
