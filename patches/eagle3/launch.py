"""The eagle3 set's launch checks (`patchkit preflight`): a `--speculative-config` with method
eagle3, held against the installed vLLM, statically. Engine and API: patchkit/launch/engine.py.

Each fault the engineer this set comes from met one model load at a time is a finding here: the
whitelist, the proposer's image_token_index read, SupportsEagle3, and the drafter's shape.
SupportsEagle3 is also asked of vLLM itself (its supports_eagle3() on the class its ModelRegistry
resolves) when the preflight may import vLLM; that answer is then the verdict.

This script is loaded by path (engine._load_script), so the rules it shares with patchkit live in
patchkit/launch/, a module for each thing judged (aux_layers, attention_backend, drafter_layout,
llama_layers, transformers_backend, ...); here are the set's own rules (its contract's) and the wiring.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import shlex
from types import ModuleType
from typing import TYPE_CHECKING

from packaging.version import Version

from patchkit.base import hints
from patchkit.base.errors import escaped
from patchkit.checks.parsed import python_tree
from patchkit.launch.attention_backend import attention_backend_refused, cache_format_refused
from patchkit.launch.aux_layers import aux_layers
from patchkit.launch.drafter_attention import (
    partial_refused,
    positions_unserved,
    sliding_unbuilt,
    sliding_under_mla,
    unjudged,
)
from patchkit.launch.drafter_embedding import embedding_shared
from patchkit.launch.drafter_feeds import top_tokens_missing, v2_runner_unfed
from patchkit.launch.drafter_heads import heads_unsplit, when_refused
from patchkit.launch.drafter_layout import drafter_weights, layout_unread, weights_unfit
from patchkit.launch.drafter_nulls import null_refused
from patchkit.launch.drafter_quant import target_quantization
from patchkit.launch.drafter_quant_files import quant_config_unfound
from patchkit.launch.drafter_sizes import DRAFTER_FIX, SIZE_FIX, shown, size, vocabulary
from patchkit.launch.drafter_types import boolean_unjudged, mistyped
from patchkit.launch.drafter_weights import weights_unjudged
from patchkit.launch.engine import few_named
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.llama_layers import activation_refused, layer_types_refused, mlp_unsplit, rope_unknown
from patchkit.launch.method import settled_method
from patchkit.launch.microbatch import microbatch_findings
from patchkit.launch.model_files import EAGLE3_DRAFTER, LLAMA_DRAFTER, MODELS_DIR, REGISTRY
from patchkit.launch.parallel_drafting import mask_hidden_missing, uses_aux_hidden_states
from patchkit.launch.target_class import SPECULATIVE_TABLE, model_class, target_architecture
from patchkit.launch.target_heads import tp_refused
from patchkit.launch.transformers_backend import (
    BACKEND_MODULE,
    FALLBACK,
    backend_class,
    backend_name,
    called,
    config_defaults,
    has_experts,
)
from patchkit.series.requirements import Target

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

SUPPORTS = "SupportsEagle3"
NOTE_ROOM = 60  # columns for the names of the general plugins not judged
# vLLM's Transformers modeling backend: one file before 0.12, a package after (Base, in base.py, is
# where SupportsEagle3 and set_aux_hidden_state_layers are, from 0.13)
BACKEND_FILES = (f"{MODELS_DIR}/transformers/base.py", f"{MODELS_DIR}/transformers.py")
BACKEND_MOE = f"{MODELS_DIR}/transformers/moe.py"


# The other methods whose drafter vLLM loads through the proposer's load_model (EagleProposer: eagle,
# mtp; DraftModelProposer from 0.15.1): for them only patch 0002, the image token read, matters.
PROPOSER_METHODS = ("eagle", "mtp", "draft_model")


def checks(launch) -> list[Finding]:
    method = settled_method(launch.command, launch.drafter, launch.read)
    if method in PROPOSER_METHODS:
        return image_token(launch)
    if method != "eagle3":
        return []
    found = [whitelist(launch), supports_eagle3(launch)]
    found += image_token(launch)
    aux = launch.drafter is None or uses_aux_hidden_states(launch.drafter.config)  # the target's output, split:
    found += microbatch_findings(launch, lambda: has_experts(launch), aux)
    if launch.drafter is not None:
        built = drafter_architecture(launch)
        found += [built, *(_weights_unjudged(launch) if built.ok else [])]  # a failure's fix comes first
        drafter = launch.drafter.config
        found += [hidden_size(launch), aux_layers(launch, drafter), vocabulary(launch, drafter)]
    return found


# --- the target ----------------------------------------------------------------------------------


def whitelist(launch) -> Finding:
    model_type = launch.target.text_config.get("model_type")
    entries = launch.requirements("model-types")
    if not entries:
        return Finding("whitelist", True, "this vLLM has no EAGLE-3 target whitelist")
    if not isinstance(model_type, str):
        return Finding("whitelist", False, f"{launch.target.path} names no text model_type")

    def judgement(read):
        verdicts = [launch.evaluate(_with(r, model_types=[model_type]), read) for r in entries]
        failed = [message for ok, message in verdicts if not ok]
        if failed:
            return False, f"target model_type '{model_type}': " + "; ".join(failed)
        return True, f"target model_type '{model_type}' is accepted"

    return launch.judge("whitelist", judgement, _whitelist_fix(launch, model_type))


def _whitelist_fix(launch, model_type: str) -> str:
    """What to do about a target EAGLE-3 does not accept: the override that made its model_type, else
    the launch without EAGLE-3 (every failure has its fix; an --hf-overrides one had none)."""
    overrides = launch.command.hf_overrides or {}
    text = overrides.get("text_config") if isinstance(overrides.get("text_config"), dict) else {}
    if model_type in (overrides.get("model_type"), text.get("model_type")):
        return (
            f"--hf-overrides sets model_type '{model_type}': drop that override, or serve without --speculative-config"
        )
    return f"EAGLE-3 here serves no '{model_type}' target: serve it without --speculative-config"


def supports_eagle3(launch) -> Finding:
    arch = target_architecture(launch)
    if arch is None:
        return Finding("supports-eagle3", False, f"{launch.target.path} names no architecture")
    backend = backend_class(launch, arch)
    if backend is not None:  # the native class's answer is about a class vLLM does not build
        return _backend_eagle3(launch, *backend)
    if launch.command.options.get("model-impl") == "terratorch":  # vLLM builds its Terratorch class
        arch = "Terratorch"

    def judgement(read):
        where = model_class(launch.registry(read), arch)
        if where is None:
            return False, f"the installed vLLM does not register the target architecture {arch}"
        module, cls = where
        requirement = launch.requirement(file=f"{MODELS_DIR}/{module}.py", kind="base", **{"class": cls}, base=SUPPORTS)
        return launch.evaluate(requirement, read)

    fix = launch.command.where("model-impl", "--model-impl terratorch")[1] if arch == "Terratorch" else None
    static = launch.lacks("supports-eagle3", REGISTRY) or launch.judge("supports-eagle3", judgement, fix)
    verdict = launch.model_interface(_asked_for(launch, arch), "supports_eagle3")
    plugins = launch.general_plugins() if verdict.result is None else []
    if plugins:  # they run before vLLM builds the model, and may register another class for it
        named = few_named(plugins, NOTE_ROOM)  # a few, then how many more: one finding stays short
        note = f"; not judged: the class the general plugins {named} may register for {arch}"
        verdict = dataclasses.replace(verdict, message=verdict.message + note)
    return _held_to_vllm(static, verdict)


def _asked_for(launch, arch: str) -> list[str]:
    """The architectures vLLM itself is asked about: config.json's, of which it builds the first it
    loads; under --model-impl terratorch its Terratorch class, whatever the config names."""
    return [arch] if arch == "Terratorch" else launch.target.architectures


def _backend_eagle3(launch, cls: str, why: str) -> Finding:
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
    return _held_to_vllm(static, launch.model_interface([cls], "supports_eagle3"))


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


def _held_to_transformers(launch, built: str, needs: list[tuple[Version, str]], why: str) -> Finding:
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


def _backend_fix(launch, why: str, need: Version | None = None) -> str:
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
    specifier_set = _specifiers().SpecifierSet
    wanted = str(specifier_set(f">={need}") & specifier_set([s for s in pin or () if s not in lower]))
    python = launch.launch_python()
    if python is None:
        return f"install transformers{wanted} into the Python vLLM runs in"
    return (
        f"install transformers{wanted}: `{shlex.quote(python)} -m pip install {shlex.quote('transformers' + wanted)}`"
    )


def _required(fields: list[tuple[str, str]], name: str) -> str | None:
    """The version specifiers of `name` a distribution's METADATA requires (its Requires-Dist, not an
    extra's): "<5,>=4.56.0"; None when none is said. Read by hand: packaging.requirements loads
    packaging.markers, and with it platform, logging and subprocess, into `run`'s fast path."""
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


def _vllm_pin(launch) -> SpecifierSet | None:
    """The transformers versions this vLLM's own METADATA admits (None: not said, or unreadable)."""
    said = _required(launch.distribution("vllm") or [], "transformers")
    specifiers = _specifiers()
    try:
        return specifiers.SpecifierSet(said) if said else None
    except specifiers.InvalidSpecifier:
        return None


def _specifiers() -> ModuleType:
    # lazy: only a backend's check reads specifiers (`run`'s fast path loads the set's checks)
    from packaging import specifiers

    return specifiers


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


def _held_to_vllm(static: Finding, verdict) -> Finding:
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


def image_token(launch) -> list[Finding]:
    """A multimodal target whose config lacks image_token_index must not reach the proposer's read."""
    config = launch.target.config
    if "text_config" not in config and "vision_config" not in config:
        return []
    if "image_token_index" in config or "image_token_id" in config:
        return [Finding("image-token", True, "the target config has an image token index")]
    arch = target_architecture(launch) or "?"
    entries = launch.requirements("guarded-read")
    if not entries:
        return []

    def judgement(read):
        verdicts = [launch.evaluate(_guarded_for(launch, r, arch), read) for r in entries]
        failed = [message for ok, message in verdicts if not ok]
        if failed:
            return False, f"{arch} config lacks image_token_index: " + "; ".join(failed)
        return True, f"the proposer does not read image_token_index for {arch}"

    return [launch.judge("image-token", judgement)]


def _guarded_for(launch, requirement, arch: str):
    declared = requirement["target"]
    config = launch.target.config
    has = tuple(name for name in declared.has if name in config)
    lacks = tuple(name for name in (*declared.lacks, requirement["attribute"]) if name not in config)
    return _with(requirement, target=Target(arch, has, lacks))


# --- the drafter ---------------------------------------------------------------------------------


def drafter_architecture(launch) -> Finding:
    lacking = launch.lacks("drafter-architecture", REGISTRY)
    if lacking is not None:
        return lacking
    arch = launch.drafter.architecture
    tables = launch.registry()
    table = tables.get(SPECULATIVE_TABLE, {})
    built = next((name for name in _built_names(launch.drafter) if any(name in t for t in tables.values())), None)
    if built is not None:
        registered = f"drafter architecture {built} is registered for EAGLE-3"
        # llama.py's rules hold only for the drafter class built of its layers (0.22+ has other EAGLE-3 drafters)
        # llama.py's layers read the drafter's config class's defaults where its config.json is silent
        defaults = _drafter_defaults(launch) if table.get(built, ("",))[0] == LLAMA_DRAFTER else None
        mla = launch.command.uses_mla(launch.target.text_config, launch.read)
        sliding = lambda launch: sliding_unbuilt(launch, defaults, mla)  # noqa: E731
        llama = (null_refused, mlp_unsplit, activation_refused, rope_unknown, partial_refused, layer_types_refused)
        llama = (*llama, sliding)
        llama = (*llama, weights_unfit, lambda launch: mask_hidden_missing(launch, drafter_weights(launch)))
        llama = llama if table.get(built, ("",))[0] == LLAMA_DRAFTER else ()
        top = lambda launch: top_tokens_missing(launch, table.get(built, ("",))[0])  # noqa: E731
        typed = mistyped(launch.drafter.config) if llama else None  # before the rules that read the sizes
        if typed is not None:
            return Finding("drafter-architecture", False, f"{registered}, but {typed[0]}", typed[1])
        heads = _heads_unsplit(launch)
        rules = (*llama, quant_config_unfound, attention_backend_refused, top)
        unbuilt = heads or next((found for rule in rules if (found := rule(launch)) is not None), None)
        later = (positions_unserved(launch, defaults) if llama else None) or cache_format_refused(launch)
        later = later or v2_runner_unfed(launch)
        later = later or (sliding_under_mla(launch, mla) if llama else None)
        quantized = target_quantization(launch) if llama else None  # (fails, why, fix): the target's, taken
        later = later or (quantized[1:] if quantized and quantized[0] else None)
        if unbuilt is None and later is not None:
            return Finding("drafter-architecture", False, f"{registered}, but {later[0]}", later[1])
        unread = (unjudged(launch, defaults, mla) if llama else None) or (
            quantized[1:] if quantized and not quantized[0] else None
        )
        unread = unread or (boolean_unjudged(launch.drafter.config) if llama else None)
        if unbuilt is None and unread is not None:
            return cannot_judge("drafter-architecture", f"{registered}, but {unread[0]}", unread[1])
        if unbuilt is None:
            return Finding("drafter-architecture", True, registered)
        spec = launch.command.speculative_config or {}
        when = when_refused(heads, spec, launch.read) if heads else "vLLM fails building it, after the target's load"
        message = f"{registered}, but {unbuilt[0]}: {when}"
        return Finding("drafter-architecture", False, message, unbuilt[1])
    known = ", ".join(sorted(n for n, (module, _) in table.items() if "eagle3" in module.lower())) or "none"
    names = _built_names(launch.drafter)
    renamed = f" (built as {', '.join(names)} under eagle3)" if names and names != launch.drafter.architectures else ""
    return Finding(
        "drafter-architecture",
        False,
        f"drafter architecture {arch}{renamed} is not registered for EAGLE-3 in the installed vLLM (registered: {known})",
        DRAFTER_FIX,
    )


def _built_names(drafter) -> list[str]:
    """The names vLLM looks the drafter up by, in order: for eagle3 its EAGLEConfig renames each of
    config.json's architectures to Eagle3<name> unless it starts or ends with Eagle3 (an EAGLE-1
    EagleLlamaForCausalLM becomes Eagle3EagleLlamaForCausalLM, which no registry holds). A config of
    model_type eagle is vLLM's already and is not renamed there: either spelling is looked up."""
    archs = drafter.architectures
    if drafter.config.get("model_type") == "eagle":
        return [name for arch in archs for name in (arch, f"Eagle3{arch}")]
    return [arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}" for arch in archs]


def _heads_unsplit(launch) -> tuple[str, str] | None:
    """-tp against the drafter's attention heads (patchkit/launch/drafter_heads.py); not when the
    target's refuse it: vLLM refuses the launch at start then (patchkit/launch/target_heads.py)."""
    tp = launch.command.tensor_parallel_size
    return None if tp_refused(launch.target, tp) else heads_unsplit(launch.drafter.config, tp)


def _drafter_defaults(launch) -> dict[str, object] | None:
    """The __init__ defaults of the drafter's config class (what vLLM reads where its config.json is silent)."""
    return config_defaults(launch, launch.drafter.config.get("model_type"))


def _weights_unjudged(launch) -> list[Finding]:
    """A cannot-judge finding for a registered drafter whose weights no rule here holds (another drafter
    class, a llama_eagle3.py of another layout, quantized or torch weights); none for a tree without the file."""
    table = launch.registry().get(SPECULATIVE_TABLE, {})
    built = next((name for name in _built_names(launch.drafter) if name in table), None)
    if built is None or launch.read(EAGLE3_DRAFTER) is None:
        return []  # not registered: drafter-architecture fails; no drafter file: a tree of parts
    unjudged = weights_unjudged(launch, table[built][0], layout_unread(launch), drafter_weights(launch))
    return [] if unjudged is None else [unjudged]


def hidden_size(launch) -> Finding:
    table = launch.registry().get(SPECULATIVE_TABLE, {})
    built = next((name for name in _built_names(launch.drafter) if name in table), None)
    llama = built is not None and table[built][0] == LLAMA_DRAFTER  # the assert is llama_eagle3.py's
    # without aux hidden states llama_eagle3.py builds no fc: the target's states enter as they are
    own = llama and not uses_aux_hidden_states(launch.drafter.config)
    wanted = size(launch.drafter.config, *(() if own else ("target_hidden_size",)), "hidden_size")
    actual = size(launch.target.text_config, "hidden_size")
    if wanted is None or actual is None:
        message = f"cannot judge: the drafter expects hidden size {shown(wanted)}, the target has {shown(actual)}"
        return Finding("drafter-hidden-size", False, message, SIZE_FIX)
    shared = embedding_shared(launch, actual, drafter_weights(launch)) if wanted == actual and llama else None
    if shared is not None:
        return shared
    why = " (its own hidden_size: eagle_config's use_aux_hidden_state is off, so it takes no fc)" if own else ""
    message = f"drafter expects hidden size {wanted}{why}, target has {actual}"
    return Finding("drafter-hidden-size", wanted == actual, message, None if wanted == actual else DRAFTER_FIX)


# --- helpers -------------------------------------------------------------------------------------


def _with(requirement, **changes):
    """A copy of a contract requirement with some fields replaced (its reason dropped: the finding says why)."""
    return dataclasses.replace(requirement, fields={**requirement.fields, **changes}, reason="")
