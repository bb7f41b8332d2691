"""The eagle3 set's launch checks (`patchkit preflight`): a `--speculative-config` with method
eagle3, held against the installed vLLM, statically. Engine and API: patchkit/launch/engine.py.

Each fault the engineer this set comes from met one model load at a time is a finding here: the
whitelist, the proposer's image_token_index read, SupportsEagle3, and the drafter's shape.
SupportsEagle3 is also asked of vLLM itself (its supports_eagle3() on the class its ModelRegistry
resolves) when the preflight may import vLLM; that answer is then the verdict.

This script is loaded by path (engine._load_script), so the rules it shares with patchkit live in
patchkit/launch/, a module for each thing judged (aux_layers, attention_backend, drafter_layout,
llama_layers, transformers_backend, backend_eagle3, ...); here are the set's own rules (its
contract's) and the wiring.
"""

from __future__ import annotations

import dataclasses

from patchkit.launch.attention_backend import attention_backend_refused, cache_format_refused
from patchkit.launch.aux_layers import aux_layers
from patchkit.launch.backend_eagle3 import SUPPORTS, backend_eagle3, held_to_vllm
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
from patchkit.launch.transformers_backend import backend_class, config_defaults, has_experts
from patchkit.series.requirements import Target

NOTE_ROOM = 60  # columns for the names of the general plugins not judged


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
        return backend_eagle3(launch, *backend)
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
    return held_to_vllm(static, verdict)


def _asked_for(launch, arch: str) -> list[str]:
    """The architectures vLLM itself is asked about: config.json's, of which it builds the first it
    loads; under --model-impl terratorch its Terratorch class, whatever the config names."""
    return [arch] if arch == "Terratorch" else launch.target.architectures


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
