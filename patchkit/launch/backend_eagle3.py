"""supports-eagle3 for a target vLLM builds as its Transformers modeling backend's class
(transformers_backend.backend_class): the EAGLE-3 the tree's backend files declare (SupportsEagle3,
none before 0.13) and the transformers their check_version() calls need, held against the
transformers the launch's Python finds and this vLLM's own pin of it (its METADATA's Requires-Dist);
then vLLM's own supports_eagle3() on that class, when it was asked (held_to_vllm)."""

from __future__ import annotations

import ast
import dataclasses
import re
import shlex

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from patchkit.base import hints
from patchkit.base.errors import escaped
from patchkit.checks.parsed import python_tree
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding, VllmVerdict, cannot_judge
from patchkit.launch.model_files import MODELS_DIR
from patchkit.launch.target_class import model_class
from patchkit.launch.transformers_backend import BACKEND_MODULE, FALLBACK, backend_name, called, has_experts

SUPPORTS = "SupportsEagle3"
# vLLM's Transformers modeling backend: one file before 0.12, a package after (Base, in base.py, is
# where SupportsEagle3 and set_aux_hidden_state_layers are, from 0.13)
BACKEND_FILES = (f"{MODELS_DIR}/transformers/base.py", f"{MODELS_DIR}/transformers.py")
BACKEND_MOE = f"{MODELS_DIR}/transformers/moe.py"


def backend_eagle3(launch: LaunchContext, cls: str, why: str) -> Finding:
    """The backend's EAGLE-3, as the tree's backend files declare it: the interface (none before
    0.13), and the transformers its check_version() calls need (set_aux_hidden_state_layers; an MoE
    class's __init__ too), held against the transformers the launch's Python finds. Then vLLM's own
    supports_eagle3() on that class, when asked."""
    source = next((data for path in BACKEND_FILES if (data := launch.read(path)) is not None), None)
    if source is None:
        return launch.lacks("supports-eagle3", BACKEND_FILES[0]) or Finding(
            "supports-eagle3",
            False,
            f"{why}: the tree's Transformers backend files are not readable",
            f"run {hints.command('status')}",
        )
    built = f"{why}: vLLM builds the target as its Transformers backend's {cls}"
    other = backend_name(launch, moe=True)  # where vLLM picks the class by the config (not one registered)
    picked = why == "--model-impl transformers" or why.startswith(FALLBACK)
    if picked and cls != other and has_experts(launch) is None:  # config.json does not tell, its class unread
        built += f" (or {other}, if its config class defaults to experts)"
    needs = _backend_needs(source, "set_aux_hidden_state_layers", "Eagle3 support")
    if needs is None:
        return Finding(
            "supports-eagle3", False, f"{built}, which has no EAGLE-3 in this vLLM", _backend_fix(launch, why)
        )
    if "MoE" in cls:
        needs += _backend_needs(launch.read(BACKEND_MOE) or b"", "__init__", "MoE models support") or []
    static = _held_to_transformers(launch, built, needs, why)
    if not static.ok or not static.judged:
        return static
    if why.startswith(FALLBACK):  # vLLM's fallback builds the backend only for a model transformers has
        reason = f"{static.message}, if transformers has {launch.target.architectures[0]}"
        gives = "check that it does (or that config.json's auto_map names its class, with --trust-remote-code)"
        return cannot_judge("supports-eagle3", reason, gives)
    return held_to_vllm(static, launch.model_interface([cls], "supports_eagle3"))


def _backend_needs(source: bytes, function: str, feature: str) -> list[tuple[Version, str]] | None:
    """(version, feature) of each check_version("X", ...) call `function` (a method of the file's
    classes) always makes; None when the file's classes do not implement SupportsEagle3 (the function read for
    EAGLE-3) or define no such function."""
    tree = python_tree(source)
    if tree is None:
        return None
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    methods = [m for c in classes for m in c.body if isinstance(m, ast.FunctionDef) and m.name == function]
    interface = function != "set_aux_hidden_state_layers" or any(
        SUPPORTS in ast.unparse(base) for c in classes for base in c.bases
    )
    if not methods or not interface:
        return None
    # the calls every run makes: a statement of the method's own body (not one under an `if`: 0.34.0's Aria check)
    statements = [n.value for m in methods for n in m.body if isinstance(n, ast.Expr)]
    calls = [n for n in statements if isinstance(n, ast.Call) and called(n.func, "check_version")]
    found = []
    for call in calls:
        first = call.args[0] if call.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            try:
                found.append((Version(first.value), feature))
            except ValueError:
                continue
    return found


def _held_to_transformers(launch: LaunchContext, built: str, needs: list[tuple[Version, str]], why: str) -> Finding:
    """The backend's transformers requirement against the launch's transformers (its METADATA's
    Version, as importlib.metadata.version() reads it: untrusted, judged here)."""
    if not needs:
        return Finding("supports-eagle3", True, f"{built}, which implements {SUPPORTS}")
    need = max(version for version, _ in needs)
    wanted = f"{built}, which needs transformers>={need} ({', '.join(f for v, f in needs if v == need)})"
    fields = launch.distribution("transformers") or []
    said = next((value for key, value in fields if key.lower() == "version"), None)
    readable = said is not None and _version(said) != Version("0")
    pin = None if readable else _vllm_pin(launch)
    if pin is not None and not _admits(pin, need):  # whatever is installed there, vLLM's own pin holds it below
        message = (
            f"{wanted}, which this vLLM's own requirement transformers{pin} excludes: vLLM fails loading the target"
        )
        return Finding("supports-eagle3", False, message, _backend_fix(launch, why, need))
    if said is None:
        found = "finds no transformers" if not fields else "finds a transformers whose METADATA gives no Version"
        return cannot_judge(
            "supports-eagle3", f"{wanted}; the launch's Python {found}", _backend_fix(launch, why, need)
        )
    try:
        installed = Version(said)
    except ValueError:
        reason = f"{wanted}; the launch's transformers gives version '{escaped(said)}'"
        return cannot_judge("supports-eagle3", reason, _backend_fix(launch, why, need))
    if installed < need:
        message = f"{wanted}; the launch's Python has {installed}: vLLM fails loading the target"
        return Finding("supports-eagle3", False, message, _backend_fix(launch, why, need))
    return Finding("supports-eagle3", True, f"{wanted}; the launch's Python has {installed}")


def _backend_fix(launch: LaunchContext, why: str, need: Version | None = None) -> str:
    """Drop --model-impl transformers where vLLM has a class of its own; else the transformers the
    backend needs, within this vLLM's own requirement (its METADATA); else no EAGLE-3."""
    tables = launch.registry()
    native = [
        a for a in launch.target.architectures if (model_class(tables, a) or (BACKEND_MODULE,))[0] != BACKEND_MODULE
    ]
    if why == "--model-impl transformers" and native:
        dropped = launch.command.where("model-impl", "--model-impl transformers")[1]  # a --config file's too
        return f"{dropped}: vLLM then builds its own {native[0]}"
    pin = _vllm_pin(launch)
    if need is None:
        return "serve it without --speculative-config: its Transformers backend has no EAGLE-3 in this vLLM"
    if pin is not None and not _admits(pin, need):
        held = f"this vLLM requires transformers{pin}, and "
        return f"serve it without --speculative-config: {held}its Transformers backend has no EAGLE-3 below {need}"
    lower = [s for s in pin or () if s.operator in (">=", ">") and _version(s.version) < need]  # implied by need
    wanted = str(SpecifierSet(f">={need}") & SpecifierSet([s for s in pin or () if s not in lower]))
    python = launch.launch_python()
    if python is None:
        return f"install transformers{wanted} into the Python vLLM runs in"
    return (
        f"install transformers{wanted}: `{shlex.quote(python)} -m pip install {shlex.quote('transformers' + wanted)}`"
    )


def _required(fields: list[tuple[str, str]], name: str) -> str | None:
    """The version specifiers of `name` a distribution's METADATA requires (its Requires-Dist, not an
    extra's): "<5,>=4.56.0"; None when none is said. Read by hand: packaging.requirements loads
    packaging.markers, and with it logging and subprocess, into `run`'s checks of a launch."""
    for key, value in fields:
        requirement, _, marker = value.partition(";")
        named = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^()]*)\)?\s*", requirement)
        if key.lower() == "requires-dist" and "extra" not in marker and named and _normal(named[1]) == name:
            return named[2].strip()
    return None


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(text: str) -> Version:
    try:
        return Version(text)
    except ValueError:
        return Version("0")


def _vllm_pin(launch: LaunchContext) -> SpecifierSet | None:
    """The transformers versions this vLLM's own METADATA admits (None: not said, or unreadable)."""
    said = _required(launch.distribution("vllm") or [], "transformers")
    try:
        return SpecifierSet(said) if said else None
    except InvalidSpecifier:
        return None


def _admits(pin: SpecifierSet, need: Version) -> bool:
    """Whether some release at or above `need` meets `pin`: tried at `need` and just past each of
    the pin's own versions (">=4.56,<5" admits none of 5.0.0 on; "!=5.2.*,!=5.5.0" admits 5.5.1)."""
    tried = [need]
    for spec in pin:
        try:
            at = Version(spec.version.removesuffix(".*"))
        except ValueError:
            continue
        major, minor, micro = (*at.release, 0, 0)[:3]
        tried += [at, Version(f"{major}.{minor}.{micro + 1}"), Version(f"{major}.{minor + 1}"), Version(f"{major + 1}")]
    return any(version >= need and pin.contains(version, prereleases=True) for version in tried)


def held_to_vllm(static: Finding, verdict: VllmVerdict) -> Finding:
    """The static finding, then vLLM's own answer when it gave one: vLLM's answer is the verdict."""
    if verdict.result is None:
        return dataclasses.replace(static, message=f"{static.message}; {verdict.message}")
    message = f"statically: {static.message}; {verdict.message}"
    fix = (
        None
        if verdict.result
        else verdict.fix
        or static.fix
        or f"the installed model class does not implement {SUPPORTS}: run {hints.command('status')}"
    )
    return Finding(static.check, verdict.result, message, fix)
