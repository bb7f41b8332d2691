"""An EAGLE-3 drafter's weights held to the modules vLLM's llama_eagle3.py builds from its config.json
(0.12-0.18's layout): each tensor's shape against its module's loader (an assert, or a narrow to the size
it shards over -tp), a layer past num_hidden_layers, and each name against the parameters the tree's
renames look it up by. What is not held to it (quantized or torch weights, another layout) is said by
drafter_weights.weights_unjudged."""

from __future__ import annotations

import os
import re
from typing import Any

from patchkit.base.errors import escaped
from patchkit.launch.aux_layers import FC_HIDDEN_STATES, fc_hidden_states
from patchkit.launch.drafter_load import drafter_load_format
from patchkit.launch.drafter_sizes import size
from patchkit.launch.drafter_weights import weights_unjudged
from patchkit.launch.engine import LaunchContext
from patchkit.launch.method import settled_method
from patchkit.launch.model_files import EAGLE3_DRAFTER, LLAMA, LLAMA_DRAFTER
from patchkit.launch.parallel_drafting import uses_aux_hidden_states
from patchkit.launch.torch_names import torch_tensors
from patchkit.launch.weights import TorchFiles, drafter_tensors

# llama_eagle3.py's layout whose weight names and shapes weights_unfit holds the drafter's weights to (0.13-0.18;
# checked on 0.16.0 by loading weights into vLLM's own drafter on CPU): layer 0's q/k/v take 2 x hidden size
WEIGHTS_LAYOUT = (
    b"qkv_input_size = 2 * self.hidden_size if layer_idx == 0 else self.hidden_size",
    b'name.replace("midlayer.", "layers.0.")',
    b'"d2t"',
)
# llama_eagle3.py's renames of the drafter's tensor names before its loaders look each up (0.13-0.18): t2d
# skipped, d2t renamed, any name but lm_head's put under the inner model; _unmapped judges names only there
NAMES_LAYOUT = (b'"t2d" in name', b'"lm_head" not in name', b'name = "model." + name')
QKV_BIAS = b'qkv_bias = getattr(config, "attention_bias", False)'  # llama_eagle3.py (0.16.0); 0.13.0 has none
O_BIAS = b"bias_o_proj = attention_bias"  # llama.py: attention_bias (or bias) adds o_proj's bias
MLP_BIAS = b'bias=getattr(config, "mlp_bias", False)'  # llama.py's LlamaMLP


def weights_unfit(launch: LaunchContext) -> tuple[str, str] | None:
    """vLLM loads the drafter's weights into the modules its config.json builds (llama_eagle3.py), after
    the target's load; a tensor whose shape a module's loader refuses (an assert; a narrow to the size it
    shards over -tp, where a larger one loads in part), or a layer past its num_hidden_layers (a KeyError),
    fails the launch. (what fails, fix) for the first; None where none does, or the check cannot tell
    (_weights_unjudged says why)."""
    config = launch.drafter.config if launch.drafter is not None else {}
    source = launch.read(EAGLE3_DRAFTER) or b""
    tensors = drafter_weights(launch)
    if not isinstance(tensors, dict) or weights_unjudged(launch, LLAMA_DRAFTER, layout_unread(launch), tensors):
        return None  # quantized tensors are packed, with scales: other shapes
    sizes = _drafter_sizes(config)
    unfit = [
        (name, file, shape, taken)
        for name, (file, shape) in sorted(tensors.items())
        if (taken := _taken(name, sizes)) is not None and not _fits(shape, taken)
    ]
    if not unfit:
        return _unmapped(launch, tensors, source)
    name, file, shape, taken = unfit[0]
    more = f" (and {len(unfit) - 1} more)" if len(unfit) > 1 else ""
    if isinstance(taken, int):
        why = f"its weights hold {escaped(name)} ({escaped(file)}), past its num_hidden_layers {taken}{more}"
        return (
            why,
            "give the drafter's config.json the num_hidden_layers its weights hold, or the config saved with them",
        )
    wanted = ", ".join(f"at least {size}" if least else str(size) for size, least in taken)
    why = f"its weights' {escaped(name)} is {shape} ({escaped(file)}), where its config.json builds [{wanted}]{more}"
    return why, "give the drafter the config.json saved with its weights (this one's sizes do not build them)"


def drafter_weights(launch: LaunchContext) -> dict[str, tuple[str, list[int]]] | str | None:
    """drafter_tensors', a torch file's state dict read too (torch_names), as vLLM's pt iterator loads it."""
    method = settled_method(launch.command, launch.drafter, launch.read)
    tensors = drafter_tensors(launch.command, drafter_load_format(launch.command, launch.read, method))
    if not isinstance(tensors, TorchFiles):
        return tensors
    read = {}
    for path in tensors.paths:
        found = torch_tensors(path)
        if found is None:
            return tensors  # why: a pickle not read
        read.update({name: (os.path.basename(path), shape) for name, shape in found.items()})
    return read


def layout_unread(launch: LaunchContext) -> str | None:
    """Why the tree's llama_eagle3.py is not the layout weights_unfit reads (0.12-0.18's); None: it is."""
    source = launch.read(EAGLE3_DRAFTER) or b""
    if not all(mark in source for mark in WEIGHTS_LAYOUT):
        return "this vLLM's llama_eagle3.py maps their names otherwise (patchkit reads 0.12-0.18's)"
    if fc_hidden_states(launch) is None:
        return "this vLLM's llama_eagle3.py sizes its fc from the drafter's config (not read)"
    return None


def _unmapped(
    launch: LaunchContext, tensors: dict[str, tuple[str, list[int]]], source: bytes
) -> tuple[str, str] | None:
    """llama_eagle3.py renames each tensor's name and looks it up among the drafter's parameters (a
    KeyError or ValueError for a name it has none for, after the target's load): (what fails, fix) for
    names that map to none, as the tree's renames and the config's bias keys build them; None else."""
    if not all(mark in source for mark in NAMES_LAYOUT):
        return None
    llama = launch.read(LLAMA) or b""
    config = launch.drafter.config if launch.drafter is not None else {}
    layer, top = _built_parameters(config, QKV_BIAS in source, O_BIAS in llama, MLP_BIAS in llama)
    skipped = (*SKIPPED, *(() if any("d2t" in name for name in tensors) else ("draft_id_to_target_id",)))
    skipped += () if uses_aux_hidden_states(config) else ("fc.",)
    unmapped = []
    for name in sorted(tensors):
        looked = _looked_up(name, skipped)
        in_layer = re.fullmatch(r"model\.layers\.\d+\.(.+)", looked or "")
        if looked is not None and looked not in top and not (in_layer and in_layer[1] in layer):
            unmapped.append(name)
    if not unmapped:
        return None
    file = tensors[unmapped[0]][0]
    more = f" (and {len(unmapped) - 1} more)" if len(unmapped) > 1 else ""
    why = f"its weights hold {escaped(unmapped[0])} ({escaped(file)}){more}, which vLLM's drafter has no parameter for"
    fix = "give the drafter the config.json saved with its weights, or save them under the names vLLM maps"
    return why, f"{fix} (midlayer.* or layers.N.*, fc, norm, lm_head, d2t)"


def _built_parameters(
    config: dict[str, Any], qkv_bias: bool, o_bias: bool, mlp_bias: bool
) -> tuple[set[str], set[str]]:
    """The parameter names llama_eagle3.py's drafter has: a layer's (under model.layers.N., N judged by
    _taken) and the rest; a bias whose rule the tree does not show counts as built (not judged)."""
    attention = bool(config.get("attention_bias"))
    layer = {"self_attn.qkv_proj.weight", "self_attn.o_proj.weight", "mlp.gate_up_proj.weight"}
    layer |= {"mlp.down_proj.weight", *NORMS}
    layer |= {"self_attn.qkv_proj.bias"} if attention or not qkv_bias else set()
    layer |= {"self_attn.o_proj.bias"} if attention or config.get("bias") or not o_bias else set()
    layer |= {"mlp.gate_up_proj.bias", "mlp.down_proj.bias"} if config.get("mlp_bias") or not mlp_bias else set()
    inner = ("embed_tokens.weight", "norm.weight", "fc.weight")
    return layer, {"lm_head.weight", "draft_id_to_target_id", *(f"model.{name}" for name in inner)}


STACKED: tuple[tuple[str, str], ...] = ((".q_proj", ".qkv_proj"), (".k_proj", ".qkv_proj"), (".v_proj", ".qkv_proj"))
STACKED += ((".gate_proj", ".gate_up_proj"), (".up_proj", ".gate_up_proj"))
# names vLLM skips (t2d, mask_hidden, AutoWeightsLoader's rotary buffers); an unquantized drafter's other
# scales are looked up as any name (a KeyError: measured on 0.16.0), but for the attention's own
KV_SCALES = tuple(f".{qkv}_{kind}" for qkv in ("q", "k", "v", "kv") for kind in ("scale", "zero_point"))
SKIPPED = ("mask_hidden", "rotary", "t2d")


def _looked_up(name: str, skipped: tuple[str, ...]) -> str | None:
    """The name llama_eagle3.py's loaders look `name` up by (0.16.0's renames); None: skipped."""
    if any(part in name for part in skipped) or name.endswith(KV_SCALES):
        return None  # maybe_remap_kv_scale_name maps a q/k/v scale to the attention's, or skips it
    if "d2t" in name:
        looked = name.replace("d2t", "draft_id_to_target_id")
    elif "lm_head" in name:
        looked = name
    else:
        inner = name.replace("midlayer.", "layers.0.")
        stacked = next(((part, param) for part, param in STACKED if part in inner), None)
        looked = "model." + (inner.replace(*stacked) if stacked else inner)
    return None if any(part in looked for part in skipped) else looked


def _drafter_sizes(config: dict[str, Any]) -> dict[str, int | None]:
    """The sizes the drafter's modules are built with, as vLLM reads its config (None: not given, so
    not judged here, though LlamaConfig would default it)."""
    hidden, heads = size(config, "hidden_size"), size(config, "num_attention_heads")
    head_dim = size(config, "head_dim") or (hidden // heads if hidden and heads else None)
    kv = size(config, "num_key_value_heads", "num_attention_heads")
    target = size(config, "target_hidden_size", "hidden_size")
    return {
        "hidden": hidden,
        "q": heads * head_dim if heads and head_dim else None,
        "kv": kv * head_dim if kv and head_dim else None,
        "inter": size(config, "intermediate_size"),
        "vocab": size(config, "vocab_size"),
        "draft": size(config, "draft_vocab_size", "vocab_size"),
        "fc": FC_HIDDEN_STATES * target if target and uses_aux_hidden_states(config) else None,
        "layers": size(config, "num_hidden_layers"),
    }


# each module's weight by its name under a layer: (key of the output size, sharded), (key of the input size,
# sharded); "in" is the layer's input (2 x hidden size at layer 0); a norm's one dimension is the hidden size
LAYER_WEIGHTS = {
    "self_attn.q_proj.weight": (("q", True), ("in", False)),
    "self_attn.k_proj.weight": (("kv", True), ("in", False)),
    "self_attn.v_proj.weight": (("kv", True), ("in", False)),
    "self_attn.o_proj.weight": (("hidden", False), ("q", True)),
    "mlp.gate_proj.weight": (("inter", True), ("hidden", False)),
    "mlp.up_proj.weight": (("inter", True), ("hidden", False)),
    "mlp.down_proj.weight": (("hidden", False), ("inter", True)),
}
NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight", "hidden_norm.weight")
TOP_WEIGHTS = {  # llama_eagle3.py's own modules: replicated or vocabulary-sharded, each dimension exact
    "d2t": ("draft",),
    "lm_head.weight": ("draft", "hidden"),
    "embed_tokens.weight": ("vocab", "hidden"),
    "fc.weight": ("hidden", "fc"),
    "norm.weight": ("hidden",),
}


def _taken(name: str, sizes: dict[str, int | None]) -> list[tuple[int, bool]] | int | None:
    """What vLLM's module takes for the checkpoint tensor `name`: each dimension (size, at least: a
    dimension sharded over -tp is narrowed, so a larger one loads); an int: the drafter's layer count,
    which the tensor's layer is past; None: not judged (skipped by vLLM, or a size not given)."""
    layer = re.fullmatch(r"(?:midlayer|layers\.(\d+))\.(.+)", name)
    if layer is None:
        keys: tuple[tuple[str, bool], ...] = tuple((key, False) for key in TOP_WEIGHTS.get(name, ("-",)))
    else:
        index = int(layer[1] or 0)
        if (
            sizes["layers"] is not None
            and index >= sizes["layers"]
            and "scale" not in name
            and "zero_point" not in name
        ):
            return sizes["layers"]
        hidden = sizes["hidden"]
        sizes = {**sizes, "in": hidden * (2 if index == 0 else 1) if hidden else None}
        keys = LAYER_WEIGHTS.get(layer[2]) or ((("hidden", False),) if layer[2] in NORMS else (("-", False),))
    taken = [(sizes.get(key), least) for key, least in keys]
    return [(size, least) for size, least in taken if size is not None] if all(s for s, _ in taken) else None


def _fits(shape: list[int], taken: list[tuple[int, bool]] | int) -> bool:
    if isinstance(taken, int):
        return False
    return len(shape) == len(taken) and all(
        dim >= size if least else dim == size for dim, (size, least) in zip(shape, taken, strict=False)
    )
