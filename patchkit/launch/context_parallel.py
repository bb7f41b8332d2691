"""Speculative decoding under context parallelism with a KV-cache interleave size above 1: vLLM's
check_attention_cp_compatibility (v1/worker/cp_utils.py, 0.13 on) asserts, as it sets up the KV cache
after every model has loaded, that each attention layer's backend supports it
(supports_mtp_with_cp_non_trivial_interleave_size). The target's layers and the drafter's are both
asked; where no backend of a layer's kind (MLA or not) declares that support in the tree, the launch
fails; where some do, which one vLLM picks depends on the GPU."""

from __future__ import annotations

from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.method import settled_method

CHECK = "context-parallel"
CP_UTILS = "vllm/v1/worker/cp_utils.py"
SUPPORT = b"supports_mtp_with_cp_non_trivial_interleave_size"
DECLARED = (SUPPORT + b": bool = True", SUPPORT + b" = True")  # a backend class that takes it
BACKENDS = "vllm/v1/attention/backends"
# the CUDA backends vLLM picks a layer's from, by kind (the ROCm and CPU ones serve no CUDA launch)
KINDS = {
    "MLA": ("mla/flashmla", "mla/flashattn_mla", "mla/cutlass_mla", "mla/triton_mla", "mla/flashinfer_mla",
            "mla/flashmla_sparse"),
    "non-MLA": ("flash_attn", "flashinfer", "triton_attn", "flex_attention"),
}  # fmt: skip
NO_DRAFTER_LAYERS = ("ngram", "[ngram]", "suffix")


def context_parallel_findings(context: LaunchContext) -> list[Finding]:
    """A failing finding where vLLM's assert fails for some layer's kind; cannot judge where it depends on
    the backend vLLM picks; none where the launch does not reach the assert."""
    command = context.command
    interleave, said = _interleave(command.options)
    if command.speculative_config is None or interleave <= 1 or SUPPORT not in (context.read(CP_UTILS) or b""):
        return []
    kinds = sorted(_layer_kinds(context))
    sources = {kind: {name: context.read(f"{BACKENDS}/{name}.py") for name in KINDS[kind]} for kind in kinds}
    taken = {kind: [name for name, source in sources[kind].items() if _declares(source)] for kind in kinds}
    refused = [kind for kind in kinds if not taken[kind]]
    where = f"{said} with context parallelism and speculative decoding"
    fix = f"drop {said.split()[0]} (1), or serve without -dcp/-pcp"
    unread = [kind for kind in refused if all(source is None for source in sources[kind].values())]
    if unread:  # a tree of parts: its attention backends are not there to read
        return [cannot_judge(CHECK, f"{where}: the tree has no {unread[0]} attention backend files", fix)]
    if refused:
        why = (
            f"{where}: vLLM asserts each attention layer's backend supports it, and no {' or '.join(refused)} "
            "backend here does: it fails after the load"
        )
        return [Finding(CHECK, False, why, fix)]
    backends = ", ".join(name.split("/")[-1] for kind in kinds for name in taken[kind])
    reason = f"{where}: vLLM asserts each layer's backend supports it; only {backends} do, and it picks one by the GPU"
    return [cannot_judge(CHECK, reason, fix)]


def _interleave(options: dict[str, object]) -> tuple[int, str]:
    """(the interleave size vLLM checks, the option it comes from): with -dcp above 1 a
    --dcp-kv-cache-interleave-size above 1 replaces --cp-kv-cache-interleave-size (config/vllm.py); 1
    where context parallelism is off (the assert is not reached)."""
    dcp, pcp = _whole(options.get("decode-context-parallel-size")), _whole(options.get("prefill-context-parallel-size"))
    if dcp * pcp <= 1:
        return 1, ""
    old = _whole(options.get("dcp-kv-cache-interleave-size"))
    if dcp > 1 and old > 1:
        return old, f"--dcp-kv-cache-interleave-size {old}"
    size = _whole(options.get("cp-kv-cache-interleave-size"))
    return size, f"--cp-kv-cache-interleave-size {size}"


def _layer_kinds(context: LaunchContext) -> set[str]:
    """The kinds of attention layer the launch builds: the target's, and an EAGLE drafter's (never MLA),
    an MTP drafter's (the target's), a draft model's (its own config's)."""
    command = context.command
    target = "MLA" if command.uses_mla(context.target.text_config, context.read) else "non-MLA"
    method = settled_method(command, context.drafter, context.read)
    if method in NO_DRAFTER_LAYERS:
        return {target}
    if method in ("eagle", "eagle3"):
        return {target, "non-MLA"}
    if method == "mtp" or context.drafter is None:
        return {target}
    return {target, "MLA" if command.uses_mla(context.drafter.config, context.read) else "non-MLA"}


def _declares(source: bytes | None) -> bool:
    return source is not None and any(mark in source for mark in DECLARED)


def _whole(value: object) -> int:
    """An integer option's value as vLLM's parser gives it (1, the default, where absent or odd: the
    parser or vLLM's own validation refuses those before any load)."""
    try:
        return int(str(value)) if value is not None else 1
    except ValueError:
        return 1
