"""A deprecated VLLM_* variable under warning filters that make its warning an error (0.22-0.23:
envs.py's deprecated_env warns FutureWarning as it reads a variable that is set, and enable_envs_cache
reads every entry right after the model's load). With PYTHONWARNINGS=error (or error::FutureWarning,
or a filter naming the message or vllm.envs) that warning raises: the launch stops after its load.
The launch's filters are read as Python's warnings module reads PYTHONWARNINGS (-W is not seen here)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping

from patchkit.base.errors import escaped, quoted
from patchkit.checks.parsed import python_tree
from patchkit.launch.env_json import shown_setting
from patchkit.launch.findings import Finding, cannot_judge

CHECK, ENVS, FILTERS = "vllm-environment", "vllm/envs.py", "PYTHONWARNINGS"
MODULE = "vllm.envs"  # the warning's module: stacklevel=2 names envs.py's __getattr__, its caller
# deprecated_env's warning, as 0.22-0.23 write it (its message's two parts, its category and level)
MARKS = (
    'f"{env_name} is deprecated and will be removed in "',
    'f"{removal_version}. {replacement}"',
    "FutureWarning",
    "stacklevel=2",
    "if env_name in os.environ",
)
ACTIONS = ("default", "always", "ignore", "module", "once", "error")  # warnings._getaction's order
FUTURE = ("", "Warning", "FutureWarning", "builtins.Warning", "builtins.FutureWarning")  # categories it is in


def deprecation_findings(
    environ: Mapping[str, str], flags: Callable[[], list[str]], read: Callable[[str], bytes | None]
) -> list[Finding]:
    """A failing finding for each deprecated variable the launch sets whose warning its PYTHONWARNINGS
    makes an error; "cannot judge" where the tree warns otherwise, or a filter's line number decides.
    `flags`: the flag clusters of the launch's Python (-E or -I: it ignores PYTHONWARNINGS)."""
    filters = environ.get(FILTERS, "")
    options = [option for option in filters.split(",") if option]  # as Python splits it: no empty item
    if not any(_getaction(option.split(":")[0].strip()) == "error" for option in options):
        return []
    if any("E" in flag or "I" in flag for flag in flags()):
        return []
    source = read(ENVS) or b""
    deprecated = _deprecated(source)
    given = sorted(name for name in deprecated if name in environ)
    if not given:
        return []
    shown = shown_setting(FILTERS, filters)
    if b"def enable_envs_cache(" not in source or not all(mark.encode() in source for mark in MARKS):
        why = f"how this vLLM warns reading {', '.join(given)} (deprecated, its envs.py) under {shown} is not read"
        return [cannot_judge(CHECK, why, f"unset {FILTERS}, or {', '.join(given)}")]
    found = []
    for name in given:
        message, replacement = deprecated[name]
        action = _action(options, message)
        note = quoted(escaped(replacement))
        fix = f"unset {name}, or leave FutureWarning out of {FILTERS}' errors (vLLM's note on {name}: {note})"
        if action is None:
            why = f"{name} is deprecated, and whether {shown} makes its warning an error depends on a line number"
            found.append(cannot_judge(CHECK, why, fix))
        elif action == "error":
            why = f"{shown_setting(name, environ[name])} is deprecated: vLLM's envs.py warns reading it, which {shown}"
            found.append(Finding(CHECK, False, f"{why} makes an error: vLLM stops right after the model's load", fix))
    return found


def _deprecated(source: bytes) -> dict[str, tuple[str | None, str]]:
    """Each entry of the tree's environment_variables wrapped in deprecated_env(NAME, removal,
    replacement, getter): NAME -> (its warning's message, None where not literal; its replacement)."""
    module = python_tree(source, ENVS) if b"deprecated_env(" in source else None
    found: dict[str, tuple[str | None, str]] = {}
    for node in ast.walk(module) if module is not None else ():
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "deprecated_env"):
            continue
        args = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in node.args[:3]]
        name, removal, replacement = [*args, None, None, None][:3]
        if name is not None:
            literal = removal is not None and replacement is not None
            message = f"{name} is deprecated and will be removed in {removal}. {replacement}" if literal else None
            found[name] = (message, replacement or "see vLLM's envs.py")
    return found


def _action(options: list[str], message: str | None) -> str | None:
    """What Python's warning filters built from `options` (PYTHONWARNINGS' items, in order: the last
    one first) do with deprecated_env's FutureWarning of `message` (None: not known) from vllm.envs:
    the first filter that matches decides ("default" where none does); None where a line number or
    an unknown message decides it. An option Python refuses is ignored, as Python ignores it."""
    for option in reversed(options):
        parts = [part.strip() for part in option.split(":")]
        if len(parts) > 5:
            continue
        action, text, category, module, line = parts + [""] * (5 - len(parts))
        chosen, number = _getaction(action), _line(line)
        if chosen is None or number is None or category not in FUTURE or module not in ("", MODULE):
            continue  # refused by Python, or a filter this FutureWarning from vllm.envs does not meet
        if text and message is None:
            return None
        if text and not re.match(re.escape(text), message or "", re.IGNORECASE):
            continue
        return chosen if number == 0 else None
    return "default"


def _line(text: str) -> int | None:
    """A filter's line number as warnings reads it (0: any line); None where Python refuses it."""
    try:
        number = int(text) if text else 0
    except ValueError:
        return None
    return number if number >= 0 else None


def _getaction(action: str) -> str | None:
    """A filter's action as warnings reads it (a prefix of one names it); None where Python refuses it."""
    if action in ("", "all"):
        return "default" if not action else "always"
    return next((name for name in ACTIONS if name.startswith(action)), None)
