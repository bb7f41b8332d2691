"""What the EAGLE-3 drafter's attention takes in an MLA target's engine: an attention backend named for
the whole launch (--attention-backend, --attention-config, or VLLM_ATTENTION_BACKEND where the tree reads
it) serves the drafter's non-MLA layers too, and the engine's KV-cache format is the drafter's as well.
Read from the tree: its backend registry and rules, its selector (the eagle3 set's 0006), the target's
config class in models/config.py."""

from __future__ import annotations

import ast

from patchkit.base.errors import escaped
from patchkit.checks.parsed import python_tree
from patchkit.launch.engine import LaunchContext, Reader, apply_fix
from patchkit.launch.kernel_blocks import kernel_block_sizes, share_a_kernel_block
from patchkit.launch.model_files import MODELS_DIR
from patchkit.launch.target_class import target_architecture

# where the tree maps attention backend names to classes (0.14 on; 0.12-0.13 under vllm/attention), and where
# its backends' validate_configuration refuses a layer whose MLA-ness differs from the backend's (0.12 on)
ATTENTION_REGISTRIES = ("vllm/v1/attention/backends/registry.py", "vllm/attention/backends/registry.py")
ATTENTION_RULES = ("vllm/v1/attention/backend.py", "vllm/attention/backends/abstract.py")
NON_MLA_REFUSED = b"non-MLA not supported"
ATTENTION_ENV = "VLLM_ATTENTION_BACKEND"  # read by 0.12-0.14 (the env then wins over the option)
ATTENTION_ENV_READERS = ("vllm/config/attention.py", "vllm/attention/selector.py")
# the set's 0006 (0.13-0.17): in an MLA model's engine the selector gives a non-MLA layer (the drafter's)
# the platform's own choice instead of an MLA backend set for the whole engine, named or Blackwell's default
SELECTORS = ("vllm/v1/attention/selector.py", "vllm/attention/selector.py")
LAYER_BACKEND_CHOSEN = b"def _engine_backend_for_layer("
# 0006 since 2026-12-05: only among the backends that share a kernel block size with the MLA one (the
# layers share one KV cache group); the 0006 before it gave Blackwell's first non-MLA choice, FlashInfer
LAYER_BLOCKS_SHARED = b"def _backend_sharing_blocks("
BLACKWELL_FIRST = "FLASHINFER"
SHARING_MLA = "FLASHINFER_MLA"  # Blackwell's MLA backend whose kernel blocks (32, 64) FlashInfer takes
MODEL_CONFIG_CLASSES = (
    f"{MODELS_DIR}/config.py"  # MODELS_CONFIG_MAP: a class per architecture that may change the engine's config
)
SPARSE_MLA_CACHE = "fp8_ds_mla"  # DeepSeek-V3.2's KV-cache format: only its sparse-MLA backends take it


def attention_backend_refused(launch: LaunchContext) -> tuple[str, str] | None:
    """One attention backend named for the whole launch serves the drafter's layers too: on CUDA, vLLM
    raises for a named backend whose MLA-ness differs from the layer's. An MLA target builds and loads
    with an MLA backend; the drafter's non-MLA layers then refuse it, unless the tree's selector carries
    the set's 0006, which gives them a backend of the platform's choice that shares the MLA backend's KV
    cache blocks (the older 0006 gave FlashInfer on Blackwell, which CUTLASS_MLA's do not suit). (what
    fails, fix), else None."""
    named = _attention_backend(launch)
    if named is None or not launch.command.uses_mla(launch.target.text_config, launch.read):
        return None  # none named, or a non-MLA target: the target's own build refuses an MLA backend first
    source, undo, name = named
    drafter = launch.drafter.config if launch.drafter is not None else {}
    if (
        launch.command.uses_mla(drafter, launch.read, eagle=True)
        or not _mla_backend(launch, name)
        or not _cuda_build(launch)
    ):
        return None
    if (unshared := _layers_unserved(launch.read, name)) is None:
        return None
    why = f"{source} {escaped(name)} is an MLA backend, which vLLM refuses for the drafter's non-MLA attention"
    fix = f"{undo}: vLLM then picks a backend for each layer"
    if unshared:
        why = (
            f"{source} {escaped(name)} takes kernel blocks of {unshared[0]}, FlashInfer (the drafter's backend on "
            f"Blackwell) of {unshared[1]}: none is common, and vLLM fails after the target's load"
        )
        sharing = kernel_block_sizes(launch.read, ATTENTION_REGISTRIES, SHARING_MLA)
        chosen = kernel_block_sizes(launch.read, ATTENTION_REGISTRIES, BLACKWELL_FIRST) or []
        if sharing and share_a_kernel_block(sharing, chosen):  # on 0.13/0.14 dropping it gives CUTLASS_MLA again
            fix = f"name {SHARING_MLA} in place of {escaped(name)}: FlashInfer takes its kernel blocks too"
    if launch.read_planned is not None and _layers_unserved(launch.read_planned, name) is None:
        return why, launch.planned_fix or apply_fix(launch.patch_set)
    return why, fix


def _layers_unserved(read: Reader, name: str) -> tuple[str, str] | tuple[()] | None:
    """None where the tree's selector (patched by the set's 0006) gives an MLA model's non-MLA layers a
    backend of their own that shares a kernel block size with `name`'s; else () where it binds them to
    the engine's backend, or the two backends' sizes where the older 0006 gives them FlashInfer."""
    selector = b"".join(read(path) or b"" for path in SELECTORS)
    if LAYER_BLOCKS_SHARED in selector:
        return None
    if LAYER_BACKEND_CHOSEN not in selector:
        return ()
    named = kernel_block_sizes(read, ATTENTION_REGISTRIES, name)
    chosen = kernel_block_sizes(read, ATTENTION_REGISTRIES, BLACKWELL_FIRST)
    if named is None or chosen is None or share_a_kernel_block(named, chosen):
        return None
    said = [
        ", ".join(str(s) if isinstance(s, int) else f"multiples of {s[1]}" for s in sizes) for sizes in (named, chosen)
    ]
    return said[0], said[1]


def cache_format_refused(launch: LaunchContext) -> tuple[str, str] | None:
    """The drafter's attention takes the engine's KV-cache format, and the target's config class in the
    tree's models/config.py (DeepSeek-V3.2's, 0.11-0.17) rewrites an fp8 one to its sparse-MLA format, which
    no non-MLA backend takes: FlashAttention's forward raises on it, the others refuse it. (why, fix), else None."""
    dtype = launch.command.options.get("kv-cache-dtype")
    arch = target_architecture(launch)
    if not isinstance(dtype, str) or not dtype.startswith("fp8") or arch is None:
        return None
    if not _rewrites_cache_format(python_tree(launch.read(MODEL_CONFIG_CLASSES)), arch):
        return None
    where, undo = launch.command.where("kv-cache-dtype", f"--kv-cache-dtype {escaped(dtype)}")
    why = (
        f"with {where} vLLM stores {escaped(arch)}'s KV cache as {SPARSE_MLA_CACHE}, which the drafter's "
        "attention cannot take: vLLM fails after the target's load"
    )
    return why, f"{undo} (the drafter shares the engine's KV-cache format)"


def _rewrites_cache_format(tree: ast.Module | None, arch: str) -> bool:
    """Whether MODELS_CONFIG_MAP's class for `arch` sets cache_dtype to the sparse-MLA format."""
    table = next(
        (
            node.value
            for node in (tree.body if tree else ())
            if isinstance(node, ast.AnnAssign | ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "MODELS_CONFIG_MAP" for t in _targets(node))
            and isinstance(node.value, ast.Dict)
        ),
        None,
    )
    pairs = zip(table.keys, table.values, strict=True) if table else ()
    named = next(
        (v.id for k, v in pairs if isinstance(k, ast.Constant) and k.value == arch and isinstance(v, ast.Name)), None
    )
    classes = [
        node for node in (tree.body if tree and named else ()) if isinstance(node, ast.ClassDef) and node.name == named
    ]
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "cache_dtype" for t in node.targets)
        and isinstance(node.value, ast.Constant)
        and node.value.value == SPARSE_MLA_CACHE
        for found in classes
        for node in ast.walk(found)
    )


def _targets(node: ast.AnnAssign | ast.Assign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def _attention_backend(launch: LaunchContext) -> tuple[str, str, str] | None:
    """(where it is named, how to drop it, the name) of the attention backend the launch gives vLLM, or None."""
    command = launch.command
    environ = command.environ.get(ATTENTION_ENV)
    if environ and any(ATTENTION_ENV.encode() in (launch.read(path) or b"") for path in ATTENTION_ENV_READERS):
        # the command's own `env` prefix, or the environment it is started in
        given = f"drop {ATTENTION_ENV}={escaped(environ)} from the command" if ATTENTION_ENV in command.env else None
        return ATTENTION_ENV, given or f"unset {ATTENTION_ENV}", environ
    return command.attention_backend


def _mla_backend(launch: LaunchContext, name: str) -> bool:
    """Whether the tree's backend registry maps `name` (as vLLM looks it up: upper case) to a class of its
    MLA package, and its backends refuse a non-MLA layer; False when the tree does not say so."""
    if not any(NON_MLA_REFUSED in (launch.read(path) or b"") for path in ATTENTION_RULES):
        return False
    for path in ATTENTION_REGISTRIES:
        tree = python_tree(launch.read(path))
        for node in ast.walk(tree) if tree else ():
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id == name.upper():
                path = str(node.value.value) if isinstance(node.value, ast.Constant) else ""
                # a sparse backend (DeepSeek-V3.2's) fails a dense target first, before its load
                return ".mla." in path and ("sparse" not in path or "index_topk" in launch.target.text_config)
    return False


def _cuda_build(launch: LaunchContext) -> bool:
    """ROCm's platform picks another backend for a layer the named one cannot serve; only a CUDA build
    (no local version label, or a cuXYZ one) raises. An unknown version is not judged."""
    version = launch.version
    return version is not None and (version.local is None or version.local.startswith("cu"))
